"""Inverted dropout: zero each entry with probability ``p``, scale survivors by 1/(1-p).

The mask lives in the cache, never on a module, so one Dropout used by several
sub-layers (or called twice) still back-propagates through the right mask, and a
gradient check can replay it by reseeding the generator.

Derivation: docs/derivations.md#dropout.
"""

from __future__ import annotations

from typing import NamedTuple

from scratchformer.backend import xp


class DropoutCache(NamedTuple):
    mask: object  # bool, same shape as x: True where x survives; None when dropout was off
    scale: float = 1.0  # 1 / (1 - p), the survivors' factor


def dropout_forward(x, p: float, rng=None):
    """``out = x * m``, ``m = Bernoulli(1-p) / (1-p)``; identity when ``rng`` is None or p == 0.

    Passing a generator is what turns dropout on: evaluation simply passes none. The
    cache keeps the bool mask (1 byte per entry, not a float mask of 4 or 8).
    """
    if rng is None or p == 0.0:
        return x, DropoutCache(None)
    cache = dropout_mask(x.shape, p, rng, x.dtype)
    out = xp.multiply(x, cache.mask)
    out *= cache.scale
    return out, cache


def dropout_mask(shape, p: float, rng, dtype) -> DropoutCache:
    """The mask ``dropout_forward`` draws for an input of ``shape``: keep each entry with
    probability 1-p (one uniform draw of ``dtype`` per entry). Drawing it again from a
    generator in the same state gives the same mask (memory-efficient attention
    regenerates its masks in the backward pass this way instead of storing them).
    A float16 input draws float32 numbers: generators draw no float16."""
    keep = rng.random(shape, dtype=dtype if dtype != xp.float16 else xp.float32) >= p
    return DropoutCache(keep, 1.0 / (1.0 - p))


def dropout_backward(dout, cache: DropoutCache):
    """``dx = dout * m`` (the same mask as the forward)."""
    if cache.mask is None:
        return dout
    dx = xp.multiply(dout, cache.mask)
    dx *= cache.scale
    return dx
