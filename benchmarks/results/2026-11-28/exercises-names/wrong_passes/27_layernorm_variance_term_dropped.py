# ruff: noqa
"""Exercise layernorm: the backward pass of layer norm. Write ``layernorm_backward`` below.

Layer normalisation over the last axis of every row: ``xhat = (x - mu) / sqrt(var + eps)``
with the row's mean ``mu`` and (biased) variance ``var``, then ``out = gamma xhat + beta``.

    scratchformer exercise check layernorm      grade it
    scratchformer exercise hint layernorm       the next hint
    scratchformer exercise solution layernorm   the engine's code and derivation

The derivation: docs/derivations.md#layer-norm (on the docs site: derivations.html#layer-norm).
The forward is given as the engine has it (scratchformer/engine/ops/layernorm.py); the
checker runs the engine's forward and compares your backward with float64
central differences of sum(out * dout) on these inputs:
    D 7
    2-D, D 6, rows off-centre

``xp`` is NumPy (CuPy on a GPU): xp.zeros, xp.sum, xp.exp, ... as with np.
"""

from __future__ import annotations

from scratchformer.engine.backend import xp
from scratchformer.engine import device  # device.rowdot(a, b) = sum(a * b, -1)
from scratchformer.engine.ops.layernorm import LayerNormCache

EXERCISE = "layernorm"


# -- given: the forward pass, as in the engine ---------------------------------------------
def layernorm_forward(x, gamma, beta, eps: float = 1e-5):
    """x (..., D), gamma (D,), beta (D,)  ->  out (..., D).

    1. ``mu = mean(x)``, ``var = mean((x - mu)^2)`` over the last axis (biased)
    2. ``xhat = (x - mu) / sqrt(var + eps)``
    3. ``out = gamma * xhat + beta``
    """
    mu = x.mean(axis=-1, keepdims=True)  # (..., 1)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)  # (..., 1)
    rstd = 1.0 / xp.sqrt(var + eps)  # (..., 1)
    xhat = (x - mu) * rstd  # (..., D)
    out = gamma * xhat + beta
    return out, LayerNormCache(xhat, rstd, gamma)


# -- yours: the backward pass --------------------------------------------------------------
def layernorm_backward(dout, cache):
    """dout (..., D): the gradient of the loss with respect to ``out``.

    cache (a LayerNormCache):
        cache.xhat   (..., D)  the normalised input, (x - mu) * rstd
        cache.rstd   (..., 1)  1 / sqrt(var + eps)
        cache.gamma  (D,)

    Return ``(dx, dgamma, dbeta)``: dx (..., D) like x, dgamma (D,), dbeta (D,).
    mu and var are computed from x: each depends on every entry of its row.
    """
    xhat, rstd, gamma = cache.xhat, cache.rstd, cache.gamma
    lead = tuple(range(dout.ndim - 1))
    dgamma = (dout * xhat).sum(axis=lead)
    dbeta = dout.sum(axis=lead)

    dxhat = dout * gamma
    dx = rstd * (dxhat - dxhat.mean(axis=-1, keepdims=True))
    return dx, dgamma, dbeta
