"""relu: ``max(x, 0)`` (ops/activations.py), and its in-place form.

reference   ops/activations.py
inplace     ``max(x, 0)`` in x's buffer, its backward in dout's: the caller gives
            up both (``donate=True``); bitwise equal, no (..., F) temporary; the rows
            shared by the host's threads (``device.parallel_rows``)
"""

from __future__ import annotations

from scratchformer import device
from scratchformer.backend import xp
from scratchformer.kernels.cases import pointwise
from scratchformer.kernels.table import Implementation, Schema, new_table
from scratchformer.ops import activations as _op

SCHEMA = Schema(inputs=("x",), gradients=("dx",), donatable=("x",))


def inplace_forward(x):
    """``relu_forward`` in x's buffer (x is given up), a range of rows per host thread."""
    positive = xp.empty(x.shape, dtype=bool)

    def rows(a, b):
        xp.greater(x[a:b], 0, out=positive[a:b])
        xp.multiply(x[a:b], positive[a:b], out=x[a:b])

    if x.ndim:
        device.parallel_rows(rows, x)
    else:
        positive, x[...] = x > 0, x * (x > 0)
    return x, _op.ReLUCache(positive)


def inplace_backward(dout, cache: _op.ReLUCache):
    """``relu_backward`` in dout's buffer (dout is given up), a range of rows per thread."""
    mask = cache.positive

    def rows(a, b):
        xp.multiply(dout[a:b], mask[a:b], out=dout[a:b])

    if dout.ndim:
        device.parallel_rows(rows, dout)
    else:
        xp.multiply(dout, mask, out=dout)
    return dout


TABLE = new_table("relu", SCHEMA, _op.relu_forward, _op.relu_backward, pointwise)
TABLE.register(
    Implementation(
        "inplace", inplace_forward, inplace_backward, default=True, exact=True,
        donates=("x", "dout"), note="in x's buffer, the backward in dout's (both given up)",
    )
)  # fmt: skip
forward, backward = TABLE.forward, TABLE.backward
