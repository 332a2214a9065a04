"""The attention core, and scaled dot-product attention built on it (section 3.2.1).

Every attention of the package is the same three steps after its logits ``Z``:

    A = softmax(Z, mask)      rows with nothing to see give zeros
    A' = dropout(A)           attention dropout
    O = A' V

That is the **attention core** (``attention_core_forward`` / ``attention_core_backward``),
written once here. The variants differ only in how they make ``Z`` and whether their
output reads ``A'`` once more:

    dense (the paper)    Z = Q K^T / sqrt(d_k)                        this file
    Shaw et al.          Z += Q E_k[idx]^T, O += scatter(A', idx) E_v   ops/relative_attention.py
    Music Transformer    Z += Skew(Q E_r^T)                             ops/relative_attention.py
    local (1-D blocks)   the dense steps on blocked queries and windows  nn/local_attention.py
    memory-efficient     the same steps on blocks of queries, recomputed  nn/attention.py

Dimension key: ``B`` batch, ``H`` heads, ``T`` queries, ``S`` keys, ``Dh`` d_k, ``Dv`` d_v;
``...`` any leading dims (the core also serves local attention's (B, H, nb, M, 2M)).
Derivations: docs/derivations.md#the-attention-core and #scaled-dot-product-attention.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from scratchformer.backend import xp
from scratchformer.ops.dropout import DropoutCache, dropout_backward, dropout_forward
from scratchformer.ops.softmax import SoftmaxCache, softmax_backward, softmax_forward


def causal_mask(T: int, S: int | None = None, offset: int = 0):
    """Bool (T, S): query t (at absolute position offset + t) may see keys 0..offset + t."""
    S = T if S is None else S
    q = xp.arange(T)[:, None] + offset
    k = xp.arange(S)[None, :]
    return k <= q


# -- the core -----------------------------------------------------------------------------
class AttentionCoreCache(NamedTuple):
    softmax: SoftmaxCache  # A (..., T, S), the weights before dropout
    A_drop: object  # (..., T, S) the weights that multiplied V (A itself without dropout)
    dropout: DropoutCache  # the attention dropout's mask (None when off)
    V: object  # (..., S, Dv)


def attention_core_forward(Z, V, mask=None, p_drop: float = 0.0, rng=None):
    """``O = dropout(softmax(Z, mask)) V``.

    Z (..., T, S) the logits (already scaled; a faster implementation may work in their
    buffer, so the caller gives them up), V (..., S, Dv), mask bool broadcastable to
    Z's shape, True where query t may attend to key s  ->  O (..., T, Dv).

    1. ``A = softmax(Z, mask)``; a row whose mask is all False gives zeros
    2. ``A' = dropout(A)``: on when ``rng`` is given and ``p_drop > 0``
    3. ``O = A' V``
    """
    A, sm_cache = softmax_forward(Z, mask)
    A_drop, drop_cache = dropout_forward(A, p_drop, rng)
    O = A_drop @ V  # (..., T, Dv)
    return O, AttentionCoreCache(sm_cache, A_drop, drop_cache, V)


def attention_core_backward(dO, cache: AttentionCoreCache, dA_drop=None):
    """Reverse of the core:

    3. ``O = A' V``          ->  ``dA' = dO V^T (+ dA_drop)``, ``dV = A'^T dO``
    2. ``A' = dropout(A)``   ->  ``dA = dA' * mask_drop``
    1. ``A = softmax(Z)``    ->  ``dZ = A * (dA - sum(dA * A, -1))``

    ``dA_drop`` (..., T, S) is the gradient of ``A'`` from a term of a variant's output
    that reads the weights again (Shaw's value term); None when there is none.
    Returns ``(dZ, dV)``. dV is taken with the post-dropout ``A'``, never ``A``.
    """
    dA = dO @ cache.V.swapaxes(-1, -2)  # (..., T, S) dA'
    if dA_drop is not None:
        dA = dA + dA_drop
    dV = cache.A_drop.swapaxes(-1, -2) @ dO  # (..., S, Dv)
    dA = dropout_backward(dA, cache.dropout)
    dZ = softmax_backward(dA, cache.softmax)
    return dZ, dV


# -- scaled dot-product attention -----------------------------------------------------------
class DotProductLogitsCache(NamedTuple):
    Q: object  # (B, H, T, Dh)
    K: object  # (B, H, S, Dh)
    scale: float  # 1 / sqrt(d_k)


def dot_product_logits_forward(Q, K):
    """The paper's logits: Q (B, H, T, Dh), K (B, H, S, Dh)  ->  ``Z = Q K^T / sqrt(d_k)``
    (B, H, T, S)."""
    scale = 1.0 / math.sqrt(Q.shape[-1])
    Z = Q @ K.swapaxes(-1, -2)  # (B, H, T, S)
    Z *= scale
    return Z, DotProductLogitsCache(Q, K, scale)


def dot_product_logits_backward(dZ, cache: DotProductLogitsCache):
    """``Z = s Q K^T``  ->  ``dQ = s dZ K``, ``dK = s dZ^T Q`` (not ``Q^T dZ``).
    Returns ``(dQ, dK)``."""
    dZ = dZ * cache.scale
    dQ = dZ @ cache.K  # (B, H, T, Dh)
    dK = dZ.swapaxes(-1, -2) @ cache.Q  # (B, H, S, Dh)
    return dQ, dK


class AttentionCache(NamedTuple):
    logits: DotProductLogitsCache  # Q, K and the scale
    core: AttentionCoreCache  # softmax, dropout and V


def attention_forward(Q, K, V, mask=None, p_drop: float = 0.0, rng=None):
    """Q (B, H, T, Dh), K (B, H, S, Dh), V (B, H, S, Dv), mask bool broadcastable to
    (B, H, T, S) with True where query t may attend to key s  ->  O (B, H, T, Dv).

    1. ``Z = Q K^T / sqrt(d_k)``
    2. ``O = core(Z, V)``: masked softmax, dropout, product with V

    Rows whose mask is all False (a query with nothing to attend to) output zeros.
    """
    Z, logits = dot_product_logits_forward(Q, K)
    O, core = attention_core_forward(Z, V, mask, p_drop, rng)
    return O, AttentionCache(logits, core)


def attention_backward(dO, cache: AttentionCache):
    """2. ``dZ, dV = core_backward(dO)``
    1. ``dQ, dK = logits_backward(dZ)``

    Returns ``(dQ, dK, dV)``.
    """
    dZ, dV = attention_core_backward(dO, cache.core)
    dQ, dK = dot_product_logits_backward(dZ, cache.logits)
    return dQ, dK, dV


__all__ = [
    "AttentionCache",
    "AttentionCoreCache",
    "DotProductLogitsCache",
    "attention_backward",
    "attention_core_backward",
    "attention_core_forward",
    "attention_forward",
    "causal_mask",
    "dot_product_logits_backward",
    "dot_product_logits_forward",
]
