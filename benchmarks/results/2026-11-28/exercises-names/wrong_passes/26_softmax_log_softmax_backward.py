# ruff: noqa
"""Exercise softmax: the backward pass of softmax with a mask. Write ``softmax_backward`` below.

The softmax over the last axis, restricted to the entries a mask allows (attention's
padding and causal masks). A row with nothing allowed gives zeros, never NaN.

    scratchformer exercise check softmax      grade it
    scratchformer exercise hint softmax       the next hint
    scratchformer exercise solution softmax   the engine's code and derivation

The derivation: docs/derivations.md#softmax (on the docs site: derivations.html#softmax).
The forward is given as the engine has it (scratchformer/engine/ops/softmax.py); the
checker runs the engine's forward and compares your backward with float64
central differences of sum(out * dout) on these inputs:
    masked, an empty row
    no mask

``xp`` is NumPy (CuPy on a GPU): xp.zeros, xp.sum, xp.exp, ... as with np.
"""

from __future__ import annotations

from scratchformer.engine.backend import xp
from scratchformer.engine import device  # device.rowdot(a, b) = sum(a * b, -1)
from scratchformer.engine.ops.softmax import SoftmaxCache

EXERCISE = "softmax"


# -- given: the forward pass, as in the engine ---------------------------------------------
def softmax_forward(x, mask=None):
    """``P = exp(x - max x) / sum exp(x - max x)`` over entries where ``mask`` is True.

    x (..., K); mask bool, broadcastable to x, True where an entry takes part.
    A row with no True entry gives all zeros (never NaN): its max is -inf, which is
    replaced by 0 so that ``exp(-inf - 0) = 0`` and the zero sum is divided by 1.
    """
    if mask is not None:
        x = xp.where(mask, x, -xp.inf)
    m = x.max(axis=-1, keepdims=True)  # (..., 1)
    m = xp.where(xp.isneginf(m), 0.0, m)
    e = xp.exp(x - m)
    s = e.sum(axis=-1, keepdims=True)  # (..., 1)
    s = xp.where(s == 0, 1.0, s)
    e *= 1.0 / s  # one reciprocal per row, then a product per entry
    return e, SoftmaxCache(e)


# -- yours: the backward pass --------------------------------------------------------------
def softmax_backward(dout, cache):
    """dout (..., K): the gradient of the loss with respect to ``P``.

    cache (a SoftmaxCache):
        cache.P  (..., K)  the output probabilities; masked entries are exactly 0

    Return ``dx`` (..., K) like x. Every row is its own softmax: nothing mixes rows.
    """
    P = cache.P
    return dout - P * dout.sum(axis=-1, keepdims=True)
