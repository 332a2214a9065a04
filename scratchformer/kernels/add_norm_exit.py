"""add_norm_exit: the exit of the paper's "Add & Norm" around a sub-layer,

    post-LN (the paper)   y = LayerNorm(x + dropout(s))
    pre-LN                y = x + dropout(s)                 (gamma None: no norm)

with ``x`` the residual stream and ``s`` the sub-layer's output: dropout, the residual
add and the LayerNorm, the three steps a GPU kernel fuses into one pass.

    reference   those steps through the dropout and layernorm tables (so whatever
                they choose, a learner's included, is what runs here)
    fused       the dropout and the residual add in the buffer of ``s`` (the caller
                gives it up: one (..., D) array less), then the LayerNorm's BLAS form;
                the mask drawn as the dropout op draws it: the default, and the NumPy
                form of what a GPU kernel does in one pass

Backward: ``dr = LayerNorm'(dy)`` (or ``dy``); the residual path's gradient is ``dx = dr``
and the sub-layer's ``ds = dropout'(dr)``. Returns ``(dx, ds, dgamma, dbeta)``
(``dgamma``, ``dbeta`` None without the norm). ``dx`` may be ``dy`` itself (pre-LN):
a caller adds into neither.

Dimension key: ``...`` any leading dims (B, T), ``D`` d_model.
Derivation: docs/derivations.md#add--norm-post-ln-and-pre-ln.
"""

from __future__ import annotations

from typing import NamedTuple

from scratchformer.kernels import dropout as _dropout
from scratchformer.kernels import layernorm as _layernorm
from scratchformer.kernels.cases import Case, Seed, randn
from scratchformer.kernels.table import Implementation, Schema, new_table
from scratchformer.ops.dropout import dropout_mask

SCHEMA = Schema(
    inputs=("x", "s", "gamma", "beta", "eps", "p_drop", "rng"),
    gradients=("dx", "ds", "dgamma", "dbeta"),
    donatable=("s",),
    parts=("dropout", "layernorm"),
)


def cases(r, dt):
    x, s = randn(r, (2, 3, 7), dt), randn(r, (2, 3, 7), dt)
    g, b = randn(r, (7,), dt), randn(r, (7,), dt)
    return [
        Case("post-LN, dropout 0.3", (x, s, g, b, 1e-5, 0.3), {"rng": Seed(2, counter=True)}),
        Case("post-LN, no dropout", (x, s, g, b, 1e-5)),
        Case("pre-LN, dropout 0.3", (x, s, None, None, 1e-5, 0.3), {"rng": Seed(3, counter=True)}),
    ]  # fmt: skip


class AddNormExitCache(NamedTuple):
    dropout: object  # the dropout table's cache
    norm: object  # the layernorm table's cache (None: pre-LN, no norm)


def add_norm_exit_forward(x, s, gamma, beta, eps: float = 1e-5, p_drop: float = 0.0, rng=None):
    """x, s (..., D); gamma, beta (D,) or None  ->  y (..., D).

    1. ``s' = dropout(s)``    2. ``r = x + s'``    3. ``y = LayerNorm(r)`` (post-LN only)
    """
    s_drop, c_drop = _dropout.forward(s, p_drop, rng)
    r = x + s_drop
    if gamma is None:
        return r, AddNormExitCache(c_drop, None)
    y, c_norm = _layernorm.forward(r, gamma, beta, eps)
    return y, AddNormExitCache(c_drop, c_norm)


def add_norm_exit_backward(dy, cache: AddNormExitCache):
    """3. ``dr, dgamma, dbeta = LayerNorm'(dy)`` (``dr = dy`` without the norm)
    2. ``dx = dr`` (the residual path)    1. ``ds = dropout'(dr)``

    Returns ``(dx, ds, dgamma, dbeta)``."""
    dgamma = dbeta = None
    dr = dy
    if cache.norm is not None:
        dr, dgamma, dbeta = _layernorm.backward(dy, cache.norm)
    return dr, _dropout.backward(dr, cache.dropout), dgamma, dbeta


class FusedCache(NamedTuple):
    keep: object  # (..., D) bool dropout mask, None when dropout was off
    scale: float  # 1 / (1 - p)
    norm: object  # the LayerNorm's (xhat, rstd, gamma), None without the norm


def fused_forward(x, s, gamma, beta, eps: float = 1e-5, p_drop: float = 0.0, rng=None):
    """``s' = dropout(s)`` and ``r = x + s'`` in s's buffer (s is given up), then
    ``LayerNorm(r)`` (post-LN)."""
    keep, scale = None, 1.0
    if rng is not None and p_drop > 0.0:
        drawn = dropout_mask(s.shape, p_drop, rng, s.dtype)  # the dropout op's draws
        keep, scale = drawn.mask, drawn.scale
        s *= keep
        s *= scale
    s += x  # r
    if gamma is None:
        return s, FusedCache(keep, scale, None)
    y, c_norm = _layernorm.blas_forward(s, gamma, beta, eps)
    return y, FusedCache(keep, scale, c_norm)


def fused_backward(dy, cache: FusedCache):
    """``dr = LayerNorm'(dy)`` (or dy), ``dx = dr``, ``ds = dr * keep * scale``."""
    dgamma = dbeta = None
    dr = dy
    if cache.norm is not None:
        dr, dgamma, dbeta = _layernorm.blas_backward(dy, cache.norm)
    if cache.keep is None:
        return dr, dr, dgamma, dbeta
    ds = dr * cache.keep
    ds *= cache.scale
    return dr, ds, dgamma, dbeta


TABLE = new_table("add_norm_exit", SCHEMA, add_norm_exit_forward, add_norm_exit_backward, cases)
TABLE.register(
    Implementation(
        "fused", fused_forward, fused_backward, default=True, donates=("s",),
        note="dropout and the residual add in s's buffer (given up), then the LayerNorm",
    )
)  # fmt: skip
forward, backward = TABLE.forward, TABLE.backward

__all__ = ["TABLE", "AddNormExitCache", "add_norm_exit_backward", "add_norm_exit_forward"]
