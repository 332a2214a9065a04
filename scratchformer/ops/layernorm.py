"""Layer normalisation over the last axis.

``xhat = (x - mu) / sqrt(var + eps)``, ``out = gamma * xhat + beta``, with ``mu`` and
``var`` (biased) taken over the last axis of size D.

Derivation: docs/derivations.md#layer-norm.
"""

from __future__ import annotations

from typing import NamedTuple

from scratchformer import device
from scratchformer.backend import xp


class LayerNormCache(NamedTuple):
    xhat: object  # (..., D) normalised input
    rstd: object  # (..., 1) 1 / sqrt(var + eps)
    gamma: object  # (D,)


def layernorm_forward(x, gamma, beta, eps: float = 1e-5):
    """x (..., D), gamma (D,), beta (D,)  ->  out (..., D).

    Row means as a product with a (D,) vector of 1/D (a BLAS matrix-vector product, much
    faster than NumPy's reduction over short rows) and the variance as a row dot product;
    ``xhat`` is built in the buffer of ``x - mu``. Two (..., D) arrays are allocated:
    ``xhat`` (kept for backward) and the output.
    """
    d = x.shape[-1]
    mu = x @ xp.full(d, 1.0 / d, dtype=x.dtype)  # (...,)
    xhat = x - mu[..., None]  # (..., D), x - mu for now
    var = device.rowdot(xhat, xhat) * (1.0 / d)  # (...,) biased variance
    rstd = (1.0 / xp.sqrt(var + eps))[..., None].astype(x.dtype)  # (..., 1)
    xhat *= rstd
    out = xhat * gamma
    out += beta
    return out, LayerNormCache(xhat, rstd, gamma)


def layernorm_backward(dout, cache: LayerNormCache):
    """Closed form, no D x D Jacobian:

    ``dxhat = dout * gamma``
    ``dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))``
    ``dgamma = sum(dout * xhat)``, ``dbeta = sum(dout)`` over all leading axes.
    Returns ``(dx, dgamma, dbeta)``. ``dx`` is built in the buffer of ``dxhat``; the
    sums over rows are products with a vector of ones.
    """
    xhat, rstd, gamma = cache
    d = xhat.shape[-1]
    dxhat = dout * gamma  # (..., D), becomes dx
    inv_d = xp.full(d, 1.0 / d, dtype=dxhat.dtype)
    mean_dxhat = dxhat @ inv_d  # (...,)
    mean_dxhat_xhat = device.rowdot(dxhat, xhat) * (1.0 / d)  # (...,)
    t = xhat * mean_dxhat_xhat[..., None].astype(dxhat.dtype)
    dxhat -= mean_dxhat[..., None]
    dxhat -= t
    dxhat *= rstd
    dout2 = dout.reshape(-1, d)  # (N, D)
    ones = xp.ones(dout2.shape[0], dtype=dout.dtype)
    xp.multiply(dout, xhat, out=t)
    dgamma = ones @ t.reshape(-1, d)
    dbeta = ones @ dout2
    return dxhat, dgamma, dbeta
