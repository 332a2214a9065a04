"""Layer normalisation over the last axis, and the exit of the paper's "Add & Norm".

``xhat = (x - mu) / sqrt(var + eps)``, ``out = gamma * xhat + beta``, with ``mu`` and
``var`` (biased) taken over the last axis of size D. Add & Norm's exit around a
sub-layer ``s`` of the residual stream ``x``:

    post-LN (the paper)   y = LayerNorm(x + dropout(s))
    pre-LN                y = x + dropout(s)                 (gamma None: no norm)

The reference pairs first (the exit's calls dropout and layer norm through their tables,
so whatever runs there, a learner's included, runs here). Below them the faster forms,
which are what run by default: layer norm with every row reduction as a BLAS product
(``blas``: NumPy's reductions over short rows are several times slower), the exit
``fused`` (dropout and the residual add in the buffer of ``s``, then the BLAS layer
norm: the NumPy form of what a GPU kernel does in one pass); and ``stats``, the cache a
GPU kernel keeps (llm.c's: the input and two numbers per row). float16 activations take
the emulated float16 forms (ops/float16.py).

Dimension key: ``...`` any leading dims (B, T), ``D`` the normalised width (d_model).
Derivations: docs/derivations.md#layer-norm and #add--norm-post-ln-and-pre-ln.
"""

from __future__ import annotations

from typing import NamedTuple

from scratchformer.engine import device
from scratchformer.engine.backend import xp
from scratchformer.engine.dispatch import Op
from scratchformer.engine.ops import float16
from scratchformer.engine.ops.cases import Case, Seed, randn
from scratchformer.engine.ops.dropout import dropout, dropout_mask


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


class AddNormExitCache(NamedTuple):
    dropout: object  # the dropout table's cache
    norm: object  # the layernorm table's cache (None: pre-LN, no norm)


def add_norm_exit_forward(x, s, gamma, beta, eps: float = 1e-5, p_drop: float = 0.0, rng=None):
    """x, s (..., D); gamma, beta (D,) or None  ->  y (..., D).

    1. ``s' = dropout(s)``    2. ``r = x + s'``    3. ``y = LayerNorm(r)`` (post-LN only)
    """
    s_drop, c_drop = dropout.forward(s, p_drop, rng)
    r = x + s_drop
    if gamma is None:
        return r, AddNormExitCache(c_drop, None)
    y, c_norm = layernorm.forward(r, gamma, beta, eps)
    return y, AddNormExitCache(c_drop, c_norm)


def add_norm_exit_backward(dy, cache: AddNormExitCache):
    """3. ``dr, dgamma, dbeta = LayerNorm'(dy)`` (``dr = dy`` without the norm)
    2. ``dx = dr`` (the residual path)    1. ``ds = dropout'(dr)``

    Returns ``(dx, ds, dgamma, dbeta)`` (``dgamma``, ``dbeta`` None without the norm).
    ``dx`` may be ``dy`` itself (pre-LN): a caller adds into neither.
    """
    dgamma = dbeta = None
    dr = dy
    if cache.norm is not None:
        dr, dgamma, dbeta = layernorm.backward(dy, cache.norm)
    return dr, dropout.backward(dr, cache.dropout), dgamma, dbeta


# -- layer norm with the row reductions as BLAS products: the default --------------------------
def layernorm_blas_forward(x, gamma, beta, eps: float = 1e-5):
    """The reference's forward with its row means as a product with a (D,) vector of
    1/D and the variance as a row dot product; ``xhat`` built in the buffer of ``x - mu``."""
    d = x.shape[-1]
    mu = x @ xp.full(d, 1.0 / d, dtype=x.dtype)  # (...,)
    xhat = x - mu[..., None]  # (..., D), x - mu for now
    var = device.rowdot(xhat, xhat) * (1.0 / d)  # (...,) biased variance
    rstd = (1.0 / xp.sqrt(var + eps))[..., None].astype(x.dtype)  # (..., 1)
    xhat *= rstd
    out = xhat * gamma
    out += beta
    return out, LayerNormCache(xhat, rstd, gamma)


def layernorm_blas_backward(dout, cache: LayerNormCache):
    """The reference's backward with the row means and the sums over rows as products;
    ``dx`` built in the buffer of ``dxhat``."""
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


# -- layer norm keeping a GPU kernel's cache -------------------------------------------------
class StatsCache(NamedTuple):
    x: object  # (..., D) the input
    mu: object  # (..., 1) its row means
    rstd: object  # (..., 1) 1 / sqrt(var + eps)
    gamma: object  # (D,)


def layernorm_stats_forward(x, gamma, beta, eps: float = 1e-5):
    """The reference's forward keeping (x, mean, rstd) instead of xhat."""
    mu = x.mean(axis=-1, keepdims=True)  # (..., 1)
    xc = x - mu  # (..., D)
    rstd = 1.0 / xp.sqrt((xc * xc).mean(axis=-1, keepdims=True) + eps)  # (..., 1)
    out = gamma * (xc * rstd) + beta
    return out, StatsCache(x, mu, rstd, gamma)


def layernorm_stats_backward(dout, cache: StatsCache):
    """``xhat = (x - mu) rstd`` made again, then the reference's closed form."""
    x, mu, rstd, gamma = cache
    return layernorm_backward(dout, LayerNormCache((x - mu) * rstd, rstd, gamma))


# -- Add & Norm's exit fused: the default ---------------------------------------------------------
class FusedExitCache(NamedTuple):
    keep: object  # (..., D) bool dropout mask, None when dropout was off
    scale: float  # 1 / (1 - p)
    norm: object  # the LayerNorm's (xhat, rstd, gamma), None without the norm


def add_norm_exit_fused_forward(x, s, gamma, beta, eps: float = 1e-5, p_drop: float = 0.0,
                                rng=None):
    """``s' = dropout(s)`` and ``r = x + s'`` in s's buffer (s is given up), then
    ``LayerNorm(r)`` (post-LN) in its BLAS form; the mask drawn as the dropout op draws it."""
    keep, scale = None, 1.0
    if rng is not None and p_drop > 0.0:
        drawn = dropout_mask(s.shape, p_drop, rng, s.dtype)  # the dropout op's draws
        keep, scale = drawn.mask, drawn.scale
        s *= keep
        s *= scale
    s += x  # r
    if gamma is None:
        return s, FusedExitCache(keep, scale, None)
    y, c_norm = layernorm_blas_forward(s, gamma, beta, eps)
    return y, FusedExitCache(keep, scale, c_norm)


def add_norm_exit_fused_backward(dy, cache: FusedExitCache):
    """``dr = LayerNorm'(dy)`` (or dy), ``dx = dr``, ``ds = dr * keep * scale``."""
    dgamma = dbeta = None
    dr = dy
    if cache.norm is not None:
        dr, dgamma, dbeta = layernorm_blas_backward(dy, cache.norm)
    if cache.keep is None:
        return dr, dr, dgamma, dbeta
    ds = dr * cache.keep
    ds *= cache.scale
    return dr, ds, dgamma, dbeta


# -- the parity cases and the registration ---------------------------------------------------
def layernorm_cases(r, dt):
    x, g, b = randn(r, (2, 3, 7), dt), randn(r, (7,), dt), randn(r, (7,), dt)
    return [Case("D 7", (x, g, b, 1e-5))]


def add_norm_exit_cases(r, dt):
    x, s = randn(r, (2, 3, 7), dt), randn(r, (2, 3, 7), dt)
    g, b = randn(r, (7,), dt), randn(r, (7,), dt)
    return [
        Case("post-LN, dropout 0.3", (x, s, g, b, 1e-5, 0.3), {"rng": Seed(2, counter=True)}),
        Case("post-LN, no dropout", (x, s, g, b, 1e-5)),
        Case("pre-LN, dropout 0.3", (x, s, None, None, 1e-5, 0.3), {"rng": Seed(3, counter=True)}),
    ]


layernorm = Op("layernorm", layernorm_forward, layernorm_backward,
               inputs=("x", "gamma", "beta", "eps"), gradients=("dx", "dgamma", "dbeta"),
               cases=layernorm_cases)
layernorm.register("blas", layernorm_blas_forward, layernorm_blas_backward, default=True,
                   note="the row reductions as BLAS products (several times faster on short rows)")
layernorm.register("stats", layernorm_stats_forward, layernorm_stats_backward, exact=True,
                   note="keeps the input, the mean and 1/std per row (a GPU kernel's cache)")
float16.register(layernorm)

add_norm_exit = Op("add_norm_exit", add_norm_exit_forward, add_norm_exit_backward,
                   inputs=("x", "s", "gamma", "beta", "eps", "p_drop", "rng"),
                   gradients=("dx", "ds", "dgamma", "dbeta"), donatable=("s",),
                   parts=("dropout", "layernorm"), cases=add_norm_exit_cases)
add_norm_exit.register("fused", add_norm_exit_fused_forward, add_norm_exit_fused_backward,
                       default=True, donates=("s",),
                       note="dropout and the residual add in s's buffer (given up), then the "
                       "LayerNorm")
float16.register(add_norm_exit)

__all__ = ["AddNormExitCache", "LayerNormCache", "add_norm_exit", "add_norm_exit_backward",
           "add_norm_exit_forward", "layernorm", "layernorm_backward", "layernorm_forward"]
