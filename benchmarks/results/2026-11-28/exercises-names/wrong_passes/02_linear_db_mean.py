# ruff: noqa
"""Exercise linear: the backward pass of a linear map. Write ``linear_backward`` below.

The affine map of every projection of the model: ``out = x W + b`` applied at every
position of every sequence of the batch.

    scratchformer exercise check linear      grade it
    scratchformer exercise hint linear       the next hint
    scratchformer exercise solution linear   the engine's code and derivation

The derivation: docs/derivations.md#linear (on the docs site: derivations.html#linear).
The forward is given as the engine has it (scratchformer/engine/ops/linear.py); the
checker runs the engine's forward and compares your backward with float64
central differences of sum(out * dout) on these inputs:
    with bias
    no bias
    a transposed weight (the tied projection)

``xp`` is NumPy (CuPy on a GPU): xp.zeros, xp.sum, xp.exp, ... as with np.
"""

from __future__ import annotations

from scratchformer.engine.backend import xp
from scratchformer.engine.ops.linear import LinearCache

EXERCISE = "linear"


# -- given: the forward pass, as in the engine ---------------------------------------------
def linear_forward(x, W, b=None):
    """``out = x @ W + b``.

    x (..., D_in), W (D_in, D_out), b (D_out,) or None  ->  out (..., D_out).

    The leading dims are folded into one before the product: ``(N, D_in) @ (D_in, D_out)``
    is one matrix product, where NumPy's ``(B, T, D_in) @ (D_in, D_out)`` would be B small
    ones (about twice as slow at T = 32).
    """
    d_in, d_out = W.shape
    out = x.reshape(-1, d_in) @ W  # (N, D_out)
    if b is not None:
        out += b
    return out.reshape(*x.shape[:-1], d_out), LinearCache(x, W, b is not None)


# -- yours: the backward pass --------------------------------------------------------------
def linear_backward(dout, cache):
    """dout (..., D_out): the gradient of the loss with respect to ``out``.

    cache (a LinearCache), what the forward kept:
        cache.x         (..., D_in)     the input
        cache.W         (D_in, D_out)   the weight
        cache.has_bias  bool            False when the forward had no b

    Return ``(dx, dW, db)``: dx (..., D_in) like x, dW (D_in, D_out) like W, db (D_out,)
    like b, or None when ``cache.has_bias`` is False. ``...`` is any number of leading axes
    (here (B, T)): W and b are used at every one of those positions.
    """
    x, W = cache.x, cache.W
    d_in, d_out = W.shape
    x2 = x.reshape(-1, d_in)
    dout2 = dout.reshape(-1, d_out)
    dx = (dout2 @ W.T).reshape(x.shape)
    dW = x2.T @ dout2
    db = dout2.mean(axis=0) if cache.has_bias else None
    return dx, dW, db
