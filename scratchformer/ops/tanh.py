"""Hyperbolic tangent, the classification head's activation.

``y = tanh(x)``; ``dy/dx = 1 - y^2``, so the cache keeps the output.
Derivation: docs/derivations.md#classification-head.
"""

from __future__ import annotations

from typing import NamedTuple

from scratchformer.backend import xp


class TanhCache(NamedTuple):
    y: object  # tanh(x), same shape as x


def tanh_forward(x):
    """x (...)  ->  tanh(x) (...)."""
    y = xp.tanh(x)
    return y, TanhCache(y)


def tanh_backward(dout, cache: TanhCache):
    """``dx = dout * (1 - y^2)``."""
    return dout * (1.0 - cache.y * cache.y)


__all__ = ["TanhCache", "tanh_backward", "tanh_forward"]
