"""softmax: the masked softmax over the last axis (ops/softmax.py).

reference   ops/softmax.py: ``dx = (dout - sum(dout * P)) * P``
rowdot      the same with the row sums as ``device.rowdot`` (no (..., K) product
            array; NumPy's ``vecdot`` where it has one), the default
"""

from __future__ import annotations

from scratchformer import device
from scratchformer.kernels.cases import Case, mask, randn
from scratchformer.kernels.table import Implementation, Schema, new_table
from scratchformer.ops import softmax as _op

SCHEMA = Schema(inputs=("x", "mask"), gradients=("dx",))


def cases(r, dt):
    x = randn(r, (2, 3, 4, 7), dt)
    return [Case("masked, an empty row", (x, mask(r, (2, 1, 4, 7)))), Case("no mask", (x,))]


def rowdot_backward(dout, cache: _op.SoftmaxCache):
    """``dx = P * (dout - rowdot(dout, P))``."""
    P = cache.P
    return (dout - device.rowdot(dout, P)[..., None]) * P


TABLE = new_table("softmax", SCHEMA, _op.softmax_forward, _op.softmax_backward, cases)
TABLE.register(
    Implementation(
        "rowdot", _op.softmax_forward, rowdot_backward, default=True,
        note="the row sums of the backward without the (..., K) product",
    )
)  # fmt: skip
forward, backward = TABLE.forward, TABLE.backward
