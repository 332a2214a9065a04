"""relu: ``max(x, 0)`` (ops/activations.py), and its in-place form.

reference   ops/activations.py
inplace     ``max(x, 0)`` in x's buffer, its backward in dout's: the caller gives
            up both (``donate=True``); bitwise equal, no (..., F) temporary
"""

from __future__ import annotations

from scratchformer.backend import xp
from scratchformer.kernels.cases import pointwise
from scratchformer.kernels.table import Implementation, Schema, new_table
from scratchformer.ops import activations as _op

SCHEMA = Schema(inputs=("x",), gradients=("dx",), donatable=("x",))


def inplace_forward(x):
    """``relu_forward`` in x's buffer (x is given up)."""
    positive = x > 0
    xp.multiply(x, positive, out=x)
    return x, _op.ReLUCache(positive)


def inplace_backward(dout, cache: _op.ReLUCache):
    """``relu_backward`` in dout's buffer (dout is given up)."""
    xp.multiply(dout, cache.positive, out=dout)
    return dout


TABLE = new_table("relu", SCHEMA, _op.relu_forward, _op.relu_backward, pointwise)
TABLE.register(
    Implementation(
        "inplace", inplace_forward, inplace_backward, default=True, exact=True,
        donates=("x", "dout"), note="in x's buffer, the backward in dout's (both given up)",
    )
)  # fmt: skip
forward, backward = TABLE.forward, TABLE.backward
