"""Layer normalisation over the last axis.

``xhat = (x - mu) / sqrt(var + eps)``, ``out = gamma * xhat + beta``, with ``mu`` and
``var`` (biased) taken over the last axis of size D.

Derivation: docs/derivations.md#layer-norm.
"""

from __future__ import annotations

from typing import NamedTuple

from scratchformer.backend import xp


class LayerNormCache(NamedTuple):
    xhat: object  # (..., D) normalised input
    rstd: object  # (..., 1) 1 / sqrt(var + eps)
    gamma: object  # (D,)


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


def layernorm_backward(dout, cache: LayerNormCache):
    """Closed form, no D x D Jacobian:

    3. ``dxhat = dout * gamma``; ``dgamma = sum(dout * xhat)``, ``dbeta = sum(dout)``
       over all leading axes
    2-1. ``dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))``

    Returns ``(dx, dgamma, dbeta)``.
    """
    xhat, rstd, gamma = cache
    dxhat = dout * gamma  # (..., D)
    mean_dxhat = dxhat.mean(axis=-1, keepdims=True)  # (..., 1)
    mean_dxhat_xhat = (dxhat * xhat).mean(axis=-1, keepdims=True)  # (..., 1)
    dx = rstd * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat)
    lead = tuple(range(dout.ndim - 1))
    dgamma = (dout * xhat).sum(axis=lead)  # (D,)
    dbeta = dout.sum(axis=lead)  # (D,)
    return dx, dgamma, dbeta
