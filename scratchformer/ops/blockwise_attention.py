"""Memory-efficient scaled dot-product attention: the core on blocks of queries, the
probabilities recomputed in the backward pass.

The same function as ``attention_forward`` (``O = dropout(softmax(s Q K^T, mask)) V``,
s = 1/sqrt(Dh)), computed ``block`` queries at a time: each block of logits
``Z_b = s Q_b K^T`` goes through the attention core (ops/attention.py), so only a
(B, H, block, S) slice of the scores exists at any moment instead of the whole
(B, H, T, S). The backward pass needs the probabilities again; instead of keeping them
(T*S numbers per head) the forward keeps one number per query row, its log-sum-exp
``L = log sum_s exp(Z_s)`` over the visible keys (the FlashAttention trick, Dao et al.
2022), and the backward recomputes each block's ``P = exp(Z - L)`` exactly, rebuilds the
core's cache from it and runs the core's backward:

    P_b = exp(s Q_b K^T - L_b)  (masked entries 0),   P'_b = P_b * dropout mask
    dZ_b, dV_b = core_backward(dO_b)        dV = sum over blocks of dV_b
    dQ_b = s dZ_b K,   dK = sum over blocks of s dZ_b^T Q_b

Each block holds whole rows of keys, so the core's ``sum(dA * A, -1)`` is computed over
the full row; a kernel that also tiles the keys (FlashAttention) uses the equal
``rowsum(dO * O)`` instead (docs/derivations.md#memory-efficient-attention).

Attention dropout draws each block's mask from the generator in turn, and the cache keeps
a fork of the generator as it was before the first block (``device.fork``: a copy of its
state, not a new seeding), from which the backward draws the same masks again in the same
order: no (T, S) mask is stored either. The masks differ from the dense op's for the same
generator (drawn block by block, not all at once); both are exact dropout.

Dimension key: ``B`` batch, ``H`` heads, ``T`` queries, ``S`` keys, ``Dh`` d_k,
``Dv`` d_v, ``M`` the query block.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from scratchformer import device
from scratchformer.backend import xp
from scratchformer.ops.attention import (
    AttentionCoreCache,
    attention_core_backward,
    attention_core_forward,
)
from scratchformer.ops.dropout import DropoutCache, dropout_backward, dropout_mask
from scratchformer.ops.softmax import SoftmaxCache


class BlockwiseAttentionCache(NamedTuple):
    Q: object  # (B, H, T, Dh)
    K: object  # (B, H, S, Dh)
    V: object  # (B, H, S, Dv)
    mask: object  # bool broadcastable to (B, H, T, S), or None
    lse: object  # (B, H, T, 1) log-sum-exp of each row's visible logits (0: nothing to see)
    block: int  # M, queries per block
    scale: float  # 1 / sqrt(d_k)
    p_drop: float  # attention dropout
    replay: object  # the dropout generator as it was before block 0 (None: dropout off)


def _mask_rows(mask, i0: int, i1: int):
    """The rows ``i0:i1`` of a mask broadcastable to (..., T, S) (a row axis of 1 stays)."""
    if mask is None or mask.ndim < 2 or mask.shape[-2] == 1:
        return mask
    return mask[..., i0:i1, :]


def _log_sum_exp(Z, mask):
    """(..., M, S) logits  ->  (..., M, 1) ``log sum exp`` over the visible keys; 0 for a
    row with none (its probabilities are all 0, whatever L is). One (..., M, S) temporary,
    worked on in place."""
    E = xp.where(mask, Z, -xp.inf) if mask is not None else Z.copy()
    m = E.max(axis=-1, keepdims=True)  # (..., M, 1)
    m = xp.where(xp.isneginf(m), 0.0, m)
    E -= m
    xp.exp(E, out=E)
    s = E.sum(axis=-1, keepdims=True)
    return m + xp.log(xp.where(s == 0, 1.0, s))


def blockwise_attention_forward(
    Q, K, V, mask=None, block: int = 64, p_drop=0.0, rng=None, core=attention_core_forward
):
    """Q (B, H, T, Dh), K (B, H, S, Dh), V (B, H, S, Dv), mask bool broadcastable to
    (B, H, T, S) (True: may attend)  ->  O (B, H, T, Dv), the same as ``attention_forward``.

    Per block of ``block`` queries: ``Z_b = s Q_b K^T``, ``L_b = logsumexp(Z_b)``,
    ``O_b = core(Z_b, V)``. Rows whose mask is all False output zeros. Peak extra
    memory: one (B, H, M, S) block. ``core``: the attention core's forward run on each
    block (the reference; the kernel seam passes its in-place form, and the matching
    backward to ``blockwise_attention_backward``).
    """
    block = int(block)
    T = Q.shape[-2]
    scale = 1.0 / math.sqrt(Q.shape[-1])
    dtype = xp.result_type(Q.dtype, K.dtype, V.dtype)
    O = xp.empty(Q.shape[:-1] + (V.shape[-1],), dtype=dtype)  # (B, H, T, Dv)
    lse = xp.empty(Q.shape[:-1] + (1,), dtype=dtype)  # (B, H, T, 1)
    on = rng is not None and p_drop > 0.0
    replay = device.fork(rng) if on else None  # the masks are drawn again from this copy
    Kt = K.swapaxes(-1, -2)  # (B, H, Dh, S)
    for i0 in range(0, T, block):
        i1 = min(i0 + block, T)
        mb = _mask_rows(mask, i0, i1)
        Z = Q[..., i0:i1, :] @ Kt  # (B, H, M, S)
        Z *= scale
        lse[..., i0:i1, :] = _log_sum_exp(Z, mb)
        O[..., i0:i1, :], _ = core(Z, V, mb, p_drop, rng if on else None)
    return O, BlockwiseAttentionCache(Q, K, V, mask, lse, block, scale, p_drop, replay)


def _recomputed_core(cache: BlockwiseAttentionCache, i0: int, i1: int, replay):
    """The core cache of the block of rows ``i0:i1``, rebuilt: ``P = exp(s Q_b K^T - L_b)``
    (masked entries 0, exactly the forward's probabilities) and, with dropout, its mask
    drawn again from ``replay`` (the blocks are visited in the forward's order)."""
    P = cache.Q[..., i0:i1, :] @ cache.K.swapaxes(-1, -2)  # (B, H, M, S): the scores again
    P *= cache.scale  # fresh: worked on in place
    mb = _mask_rows(cache.mask, i0, i1)
    if mb is not None:
        xp.copyto(P, -xp.inf, where=xp.logical_not(mb))
    P -= cache.lse[..., i0:i1, :]
    xp.exp(P, out=P)
    drop = DropoutCache(None)
    if replay is not None:
        drop = dropout_mask(P.shape, cache.p_drop, replay, P.dtype)
    return AttentionCoreCache(SoftmaxCache(P), dropout_backward(P, drop), drop, cache.V)


def blockwise_attention_backward(
    dO, cache: BlockwiseAttentionCache, core_backward=attention_core_backward
):
    """Returns ``(dQ, dK, dV)``; per block, the forward's steps in reverse
    (``core_backward``: the backward of the core the forward ran):

    2. the core's cache recomputed (``_recomputed_core``)
    1. ``dZ_b, dV_b = core_backward(dO_b)``; ``dV += dV_b``
    0. ``dZ_b *= s``; ``dQ_b = dZ_b K``, ``dK += dZ_b^T Q_b``
    """
    Q, K, V = cache.Q, cache.K, cache.V
    T = Q.shape[-2]
    dQ = xp.empty(Q.shape, dtype=dO.dtype)
    dK = xp.zeros(K.shape, dtype=dO.dtype)
    dV = xp.zeros(V.shape, dtype=dO.dtype)
    replay = None if cache.replay is None else device.fork(cache.replay)
    for i0 in range(0, T, cache.block):
        i1 = min(i0 + cache.block, T)
        core = _recomputed_core(cache, i0, i1, replay)
        dZ, dV_b = core_backward(dO[..., i0:i1, :], core)
        dV += dV_b
        del core, dV_b  # the block's probabilities are done with: one block less held
        dZ *= cache.scale
        dQ[..., i0:i1, :] = dZ @ K
        dK += dZ.swapaxes(-1, -2) @ Q[..., i0:i1, :]
    return dQ, dK, dV


__all__ = [
    "BlockwiseAttentionCache",
    "blockwise_attention_backward",
    "blockwise_attention_forward",
]
