"""Scaled dot-product attention (section 3.2.1 of the paper), forward and backward.

``A = softmax(Q K^T / sqrt(d_k), mask)``, ``A' = dropout(A)``, ``O = A' V``.

The softmax and dropout steps are the derived pairs of ops/softmax.py and ops/dropout.py
in their in-place forms (``softmax_``, ``softmax_backward_``, ``dropout_backward_``): the
same operations in the buffer of scores the op owns, bitwise equal to the pure pairs
(tests/ops/test_inplace_pairs.py composes this op from the pure pairs and compares).

Dimension key: ``B`` batch, ``H`` heads, ``T`` queries, ``S`` keys, ``Dh`` d_k, ``Dv`` d_v.
Derivation: docs/derivations.md#scaled-dot-product-attention.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from scratchformer.backend import xp
from scratchformer.ops.dropout import DropoutCache, dropout_backward_, dropout_forward
from scratchformer.ops.softmax import SoftmaxCache, softmax_, softmax_backward_


class AttentionCache(NamedTuple):
    Q: object  # (B, H, T, Dh)
    K: object  # (B, H, S, Dh)
    V: object  # (B, H, S, Dv)
    softmax: SoftmaxCache  # A (B, H, T, S), the weights before dropout
    A_drop: object  # (B, H, T, S), the weights that multiplied V (after dropout)
    dropout: DropoutCache  # mask of the attention dropout (None when off)
    scale: float  # 1 / sqrt(d_k)


def causal_mask(T: int, S: int | None = None, offset: int = 0):
    """Bool (T, S): query t (at absolute position offset + t) may see keys 0..offset + t."""
    S = T if S is None else S
    q = xp.arange(T)[:, None] + offset
    k = xp.arange(S)[None, :]
    return k <= q


def attention_forward(Q, K, V, mask=None, p_drop: float = 0.0, rng=None):
    """Q (B, H, T, Dh), K (B, H, S, Dh), V (B, H, S, Dv), mask bool broadcastable to
    (B, H, T, S) with True where query t may attend to key s  ->  O (B, H, T, Dv).

    Rows whose mask is all False (a query with nothing to attend to) output zeros.
    """
    scale = 1.0 / math.sqrt(Q.shape[-1])
    scores = Q @ K.swapaxes(-1, -2)  # (B, H, T, S), a fresh array: worked on in place
    scores *= scale
    A, _, _ = softmax_(scores, mask)  # in scores' buffer
    A_drop, drop_cache = dropout_forward(A, p_drop, rng)
    O = A_drop @ V  # (B, H, T, Dv)
    return O, AttentionCache(Q, K, V, SoftmaxCache(A), A_drop, drop_cache, scale)


def attention_backward(dO, cache: AttentionCache):
    """Reverse of the forward, step by step:

    3. ``O = A' V``          ->  ``dA' = dO V^T``, ``dV = A'^T dO`` (the post-dropout A')
    2. ``A' = dropout(A)``   ->  ``dA = dA' * mask``
    1. ``A = softmax(Z)``    ->  ``dZ = A * (dA - sum(dA * A, -1))``
    0. ``Z = s Q K^T``       ->  ``dQ = s dZ K``, ``dK = s dZ^T Q`` (not ``Q^T dZ``)

    Returns ``(dQ, dK, dV)``. Steps 2 and 1 work in the buffer of ``dA'`` (one (B, H, T, S)
    array in all).
    """
    Q, K, V, sm_cache, A_drop, drop_cache, scale = cache
    dA = dO @ V.swapaxes(-1, -2)  # (B, H, T, S) dA', fresh
    dV = A_drop.swapaxes(-1, -2) @ dO  # (B, H, S, Dv)
    dA = dropout_backward_(dA, drop_cache)
    dZ = softmax_backward_(dA, sm_cache.P)
    dZ *= scale
    dQ = dZ @ K  # (B, H, T, Dh)
    dK = dZ.swapaxes(-1, -2) @ Q  # (B, H, S, Dh)
    return dQ, dK, dV
