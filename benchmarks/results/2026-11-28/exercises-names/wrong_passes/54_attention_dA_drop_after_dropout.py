# ruff: noqa
"""Exercise attention: the backward pass of scaled dot-product attention. Write ``attention_backward`` below.

Section 3.2.1 of the paper, batched over examples and heads, with a mask (padding, or
the decoder's causal mask) and attention dropout, in the two steps every attention of
the engine is made of:

    logits:  Z = Q K^T / sqrt(d_k)
    core:    A = softmax(Z, mask)      A' = dropout(A)      O = A' V

Write both backward passes: ``attention_core_backward`` (the product with V, dropout,
the softmax) and ``dot_product_logits_backward``. They are graded together through
``attention_backward`` below, and once with a term of the output that reads A' again
(the core's ``dA_drop``, as Shaw's relative values do). In training, your core runs in
every attention: dense, relative, local and memory-efficient.

    scratchformer exercise check attention      grade it
    scratchformer exercise hint attention       the next hint
    scratchformer exercise solution attention   the engine's code and derivation

The derivation: docs/derivations.md#scaled-dot-product-attention (on the docs site: derivations.html#scaled-dot-product-attention).
The forward is given as the engine has it (scratchformer/engine/ops/attention.py); the
checker runs the engine's forward and compares your backward with float64
central differences of sum(out * dout) on these inputs:
    masked, an empty row
    dropout 0.25
    no mask
    a value term reading A' (dA_drop), dropout 0.25

``xp`` is NumPy (CuPy on a GPU): xp.zeros, xp.sum, xp.exp, ... as with np.
"""

from __future__ import annotations

import math

from scratchformer.engine.backend import xp
from scratchformer.engine.ops.attention import (
    AttentionCache,
    AttentionCoreCache,
    DotProductLogitsCache,
)
from scratchformer.engine.ops.dropout import dropout
from scratchformer.engine.ops.softmax import softmax
from typing import NamedTuple

EXERCISE = "attention"


# -- given: the forward pass and how your two backward passes compose ----------------------
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


def dot_product_logits_forward(Q, K):
    """The paper's logits: Q (B, H, T, Dh), K (B, H, S, Dh)  ->  ``Z = Q K^T / sqrt(d_k)``
    (B, H, T, S)."""
    scale = 1.0 / math.sqrt(Q.shape[-1])
    Z = Q @ K.swapaxes(-1, -2)  # (B, H, T, S)
    Z *= scale
    return Z, DotProductLogitsCache(Q, K, scale)


def attention_core_forward(Z, V, mask=None, p_drop: float = 0.0, rng=None):
    """``O = dropout(softmax(Z, mask)) V``.

    Z (..., T, S) the logits (already scaled; a faster implementation may work in their
    buffer, so the caller gives them up), V (..., S, Dv), mask bool broadcastable to
    Z's shape, True where query t may attend to key s  ->  O (..., T, Dv).

    1. ``A = softmax(Z, mask)``; a row whose mask is all False gives zeros
    2. ``A' = dropout(A)``: on when ``rng`` is given and ``p_drop > 0``
    3. ``O = A' V``
    """
    A, sm_cache = softmax.forward(Z, mask)
    A_drop, drop_cache = dropout.forward(A, p_drop, rng)
    O = A_drop @ V  # (..., T, Dv)
    return O, AttentionCoreCache(sm_cache, A_drop, drop_cache, V)


def attention_backward(dO, cache: AttentionCache):
    """2. ``dZ, dV = core_backward(dO)``
    1. ``dQ, dK = logits_backward(dZ)``

    Returns ``(dQ, dK, dV)``.
    """
    dZ, dV = attention_core_backward(dO, cache.core)
    dQ, dK = dot_product_logits_backward(dZ, cache.logits)
    return dQ, dK, dV


class ValueTermCache(NamedTuple):
    attention: object  # the attention's cache (an AttentionCache)
    W: object  # (S, Dv) the value term's matrix


def attention_with_value_term_forward(Q, K, V, W, mask=None, p_drop: float = 0.0, rng=None):
    """Attention with a term of the output that reads the weights A' again, as Shaw's
    relative values do: ``O = A' V + A' W``, W (S, Dv) shared by the heads."""
    O, cache = attention_forward(Q, K, V, mask, p_drop, rng)
    return O + cache.core.A_drop @ W, ValueTermCache(cache, W)


# -- yours: the two backward passes --------------------------------------------------------
def attention_core_backward(dO, cache, dA_drop=None):
    """The attention core's backward: ``O = A' V`` with ``A' = dropout(A)``, ``A = softmax(Z)``.

    dO (B, H, T, Dv): the gradient of the loss with respect to ``O``.
    dA_drop (B, H, T, S) or None: a gradient of ``A'`` from elsewhere (a variant whose
        output reads A' again, as Shaw's value term does): add it to what ``O = A' V``
        gives ``A'``. None for plain attention.

    cache (an AttentionCoreCache), what the core's forward kept:
        cache.softmax.P      (B, H, T, S)   A = softmax(Z, mask): masked entries are 0
        cache.A_drop         (B, H, T, S)   A' = dropout(A), what multiplied V (A itself
                                            when dropout was off)
        cache.dropout.mask   (B, H, T, S) bool, or None when dropout was off
        cache.dropout.scale  float          1 / (1 - p)
        cache.V              (B, H, S, Dv)  the values

    Return ``(dZ, dV)``: dZ (B, H, T, S) like the logits, dV (B, H, S, Dv). Nothing sums
    over B or H: each (b, h) is its own attention. T, S, Dh and Dv all differ here.
    """
    P = cache.softmax.P
    dA = dO @ cache.V.swapaxes(-1, -2)
    if cache.dropout.mask is not None:
        dA = dA * cache.dropout.mask * cache.dropout.scale
    if dA_drop is not None:
        dA = dA + dA_drop
    dV = cache.A_drop.swapaxes(-1, -2) @ dO
    dZ = P * (dA - (dA * P).sum(axis=-1, keepdims=True))
    return dZ, dV


def dot_product_logits_backward(dZ, cache):
    """The paper's logits' backward: ``Z = s Q K^T``, ``s = 1 / sqrt(d_k)``.

    dZ (B, H, T, S): the gradient of the loss with respect to the logits ``Z``.

    cache (a DotProductLogitsCache):
        cache.Q      (B, H, T, Dh)  the queries
        cache.K      (B, H, S, Dh)  the keys
        cache.scale  float          1 / sqrt(d_k)

    Return ``(dQ, dK)`` like Q and K.
    """
    dZs = dZ * cache.scale
    dQ = dZs @ cache.K
    dK = dZs.swapaxes(-1, -2) @ cache.Q
    return dQ, dK
