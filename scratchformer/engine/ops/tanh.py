"""Hyperbolic tangent, the classification head's activation.

``y = tanh(x)``; ``dy/dx = 1 - y^2``, so the cache keeps the output.
The reference pair is what runs (float16 activations: its emulated float16 form,
ops/float16.py).

Derivation: docs/derivations.md#classification-head.
"""

from __future__ import annotations

from typing import NamedTuple

from scratchformer.engine.backend import xp
from scratchformer.engine.dispatch import Op
from scratchformer.engine.ops import float16
from scratchformer.engine.ops.cases import pointwise


class TanhCache(NamedTuple):
    y: object  # tanh(x), same shape as x


def tanh_forward(x):
    """x (...)  ->  tanh(x) (...)."""
    y = xp.tanh(x)
    return y, TanhCache(y)


def tanh_backward(dout, cache: TanhCache):
    """``dx = dout * (1 - y^2)``."""
    return dout * (1.0 - cache.y * cache.y)


tanh = Op("tanh", tanh_forward, tanh_backward, inputs=("x",), gradients=("dx",),
          cases=pointwise)
float16.register(tanh)

__all__ = ["TanhCache", "tanh", "tanh_backward", "tanh_forward"]
