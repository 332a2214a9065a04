# ruff: noqa
"""Exercise dropout: the backward pass of inverted dropout. Write ``dropout_backward`` below.

Inverted dropout: each entry is zeroed with probability p and the survivors are scaled by
1 / (1 - p). With no generator (evaluation) it is the identity and keeps no mask.

    scratchformer exercise check dropout      grade it
    scratchformer exercise hint dropout       the next hint
    scratchformer exercise solution dropout   the engine's code and derivation

The derivation: docs/derivations.md#dropout (on the docs site: derivations.html#dropout).
The forward is given as the engine has it (scratchformer/engine/ops/dropout.py); the
checker runs the engine's forward and compares your backward with float64
central differences of sum(out * dout) on these inputs:
    p 0.3
    p 0.3, odd size
    off

``xp`` is NumPy (CuPy on a GPU): xp.zeros, xp.sum, xp.exp, ... as with np.
"""

from __future__ import annotations

from scratchformer.engine.backend import xp
from scratchformer.engine.ops.dropout import DropoutCache
from scratchformer.engine.ops import float16

EXERCISE = "dropout"


# -- given: the forward pass, as in the engine ---------------------------------------------
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


# -- yours: the backward pass --------------------------------------------------------------
def dropout_backward(dout, cache):
    """dout (...): the gradient of the loss with respect to ``out``.

    cache (a DropoutCache):
        cache.mask   bool like x, or None   True where x survived; None when dropout was off
        cache.scale  float                  1 / (1 - p), the survivors' factor

    Return ``dx`` like x.
    """
    if cache.mask is None:
        return dout
    return dout * cache.mask
