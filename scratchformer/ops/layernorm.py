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
    """x (..., D), gamma (D,), beta (D,)  ->  out (..., D)."""
    mu = x.mean(axis=-1, keepdims=True)  # (..., 1)
    xc = x - mu
    var = (xc * xc).mean(axis=-1, keepdims=True)  # (..., 1)
    rstd = 1.0 / xp.sqrt(var + eps)
    xhat = xc * rstd
    return xhat * gamma + beta, LayerNormCache(xhat, rstd, gamma)


def layernorm_backward(dout, cache: LayerNormCache):
    """Closed form, no D x D Jacobian:

    ``dxhat = dout * gamma``
    ``dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))``
    ``dgamma = sum(dout * xhat)``, ``dbeta = sum(dout)`` over all leading axes.
    Returns ``(dx, dgamma, dbeta)``.
    """
    xhat, rstd, gamma = cache
    d = xhat.shape[-1]
    dxhat = dout * gamma
    dx = rstd * (
        dxhat
        - dxhat.mean(axis=-1, keepdims=True)
        - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True)
    )
    dgamma = (dout * xhat).reshape(-1, d).sum(axis=0)
    dbeta = dout.reshape(-1, d).sum(axis=0)
    return dx, dgamma, dbeta
