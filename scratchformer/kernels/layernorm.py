"""layernorm: ``gamma * (x - mean) / sqrt(var + eps) + beta`` over the last axis
(ops/layernorm.py).

    reference   ops/layernorm.py: means as means
    blas        the same formulas with every reduction over a row as a BLAS product (a
                matrix-vector product with a (D,) vector of 1/D, the variance as a row
                dot product, the sums over rows as products with a vector of ones):
                NumPy's reductions over short rows are several times slower; two
                (..., D) arrays made in the forward, the default
    stats       the cache of a GPU kernel (llm.c's): the input and two numbers per row,
                the mean and 1/std; the backward makes xhat again from them. Shows
                that an implementation's cache is its own

Dimension key: ``...`` any leading dims, ``D`` the normalised width.
"""

from __future__ import annotations

from typing import NamedTuple

from scratchformer import device
from scratchformer.backend import xp
from scratchformer.kernels.cases import Case, randn
from scratchformer.kernels.table import Implementation, Schema, new_table
from scratchformer.ops import layernorm as _op

SCHEMA = Schema(inputs=("x", "gamma", "beta", "eps"), gradients=("dx", "dgamma", "dbeta"))


def cases(r, dt):
    x, g, b = randn(r, (2, 3, 7), dt), randn(r, (7,), dt), randn(r, (7,), dt)
    return [Case("D 7", (x, g, b, 1e-5))]


def blas_forward(x, gamma, beta, eps: float = 1e-5):
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
    return out, _op.LayerNormCache(xhat, rstd, gamma)


def blas_backward(dout, cache: _op.LayerNormCache):
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


class StatsCache(NamedTuple):
    x: object  # (..., D) the input
    mu: object  # (..., 1) its row means
    rstd: object  # (..., 1) 1 / sqrt(var + eps)
    gamma: object  # (D,)


def stats_forward(x, gamma, beta, eps: float = 1e-5):
    """The reference's forward keeping (x, mean, rstd) instead of xhat."""
    mu = x.mean(axis=-1, keepdims=True)  # (..., 1)
    xc = x - mu  # (..., D)
    rstd = 1.0 / xp.sqrt((xc * xc).mean(axis=-1, keepdims=True) + eps)  # (..., 1)
    out = gamma * (xc * rstd) + beta
    return out, StatsCache(x, mu, rstd, gamma)


def stats_backward(dout, cache: StatsCache):
    """``xhat = (x - mu) rstd`` made again, then the reference's closed form."""
    x, mu, rstd, gamma = cache
    return _op.layernorm_backward(dout, _op.LayerNormCache((x - mu) * rstd, rstd, gamma))


TABLE = new_table("layernorm", SCHEMA, _op.layernorm_forward, _op.layernorm_backward, cases)
TABLE.register(
    Implementation(
        "blas", blas_forward, blas_backward, default=True,
        note="the row reductions as BLAS products (several times faster on short rows)",
    )
)  # fmt: skip
TABLE.register(
    Implementation(
        "stats", stats_forward, stats_backward, exact=True,
        note="keeps the input, the mean and 1/std per row (a GPU kernel's cache)",
    )
)  # fmt: skip
forward, backward = TABLE.forward, TABLE.backward
