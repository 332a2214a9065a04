"""Memory-efficient scaled dot-product attention: queries in blocks, probabilities recomputed.

The same function as ``attention_forward`` (``O = dropout(softmax(s Q K^T, mask)) V``,
s = 1/sqrt(Dh)), computed ``block`` queries at a time, so that only a (B, H, block, S)
slice of the scores exists at any moment instead of the whole (B, H, T, S). The backward
pass needs the probabilities again; instead of keeping them (T*S numbers per head) the
forward keeps one number per query row, its log-sum-exp ``L = log sum_s exp(Z_s)`` (the
FlashAttention trick, Dao et al. 2022), and the backward recomputes each block's
``P = exp(Z - L)`` exactly. With ``Delta = rowsum(dO * O)`` (equal to
``rowsum(dP * P)``, see docs/derivations.md#memory-efficient-attention):

    dV = sum over blocks of P'^T dO          P' = P * dropout mask
    dP = dO V^T (* dropout mask)
    dZ = P * (dP - Delta)                    the softmax backward, without rowsum(dP * P)
    dQ = s dZ K,  dK = sum over blocks of s dZ^T Q

The pieces it shares with the dense op are the ops themselves: the in-place masked
softmax (``softmax_``, which also gives the row max and sum for L) and dropout
(``dropout_forward``, ``dropout_mask``, ``dropout_backward``). Attention dropout
regenerates each block's mask from a seed drawn once per forward (block b uses
``backend.rng(seed + b)``), so no (T, S) mask is stored either. The masks
therefore differ from the dense op's for the same generator; both are exact dropout.

Dimension key: ``B`` batch, ``H`` heads, ``T`` queries, ``S`` keys, ``Dh`` d_k,
``Dv`` d_v, ``M`` the query block.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from scratchformer import backend
from scratchformer.backend import xp
from scratchformer.ops.dropout import (
    dropout_backward,
    dropout_backward_,
    dropout_forward,
    dropout_mask,
)
from scratchformer.ops.softmax import softmax_


class BlockwiseAttentionCache(NamedTuple):
    Q: object  # (B, H, T, Dh)
    K: object  # (B, H, S, Dh)
    V: object  # (B, H, S, Dv)
    mask: object  # bool broadcastable to (B, H, T, S), or None
    O: object  # (B, H, T, Dv) the output (for Delta = rowsum(dO * O))
    lse: object  # (B, H, T, 1) log-sum-exp of each row's masked scores (0: nothing to see)
    block: int  # M, queries per block
    scale: float  # 1 / sqrt(d_k)
    p_drop: float  # attention dropout
    seed: int | None  # block b's dropout mask comes from backend.rng(seed + b); None: off


def _mask_rows(mask, i0: int, i1: int):
    """The rows ``i0:i1`` of a mask broadcastable to (..., T, S) (a row axis of 1 stays)."""
    if mask is None or mask.ndim < 2 or mask.shape[-2] == 1:
        return mask
    return mask[..., i0:i1, :]


def _block_rng(seed: int, b: int):
    """Block ``b``'s dropout generator: the same mask in forward and backward."""
    return backend.rng(seed + b)


def blockwise_attention_forward(Q, K, V, mask=None, block: int = 64, p_drop=0.0, rng=None):
    """Q (B, H, T, Dh), K (B, H, S, Dh), V (B, H, S, Dv), mask bool broadcastable to
    (B, H, T, S) (True: may attend)  ->  O (B, H, T, Dv), the same as ``attention_forward``.

    Rows whose mask is all False output zeros. Peak extra memory: one (B, H, M, S) block.
    """
    if int(block) < 1:
        raise ValueError(f"attention block must be >= 1, got {block}")
    if not 0.0 <= p_drop < 1.0:
        raise ValueError(f"dropout probability must be in [0, 1), got {p_drop}")
    block = int(block)
    T = Q.shape[-2]
    scale = 1.0 / math.sqrt(Q.shape[-1])
    dtype = xp.result_type(Q.dtype, K.dtype, V.dtype)
    O = xp.empty(Q.shape[:-1] + (V.shape[-1],), dtype=dtype)  # (B, H, T, Dv)
    lse = xp.empty(Q.shape[:-1] + (1,), dtype=dtype)  # (B, H, T, 1)
    seed = int(rng.integers(0, 2**62)) if rng is not None and p_drop > 0.0 else None
    Kt = K.swapaxes(-1, -2)  # (B, H, Dh, S)
    for b, i0 in enumerate(range(0, T, block)):
        i1 = min(i0 + block, T)
        Z = Q[..., i0:i1, :] @ Kt  # (B, H, M, S), fresh: worked on in place
        Z *= scale
        P, m, s = softmax_(Z, _mask_rows(mask, i0, i1))
        lse[..., i0:i1, :] = m + xp.log(s)
        if seed is not None:
            P, _ = dropout_forward(P, p_drop, _block_rng(seed, b))
        O[..., i0:i1, :] = P @ V  # (B, H, M, Dv)
    return O, BlockwiseAttentionCache(Q, K, V, mask, O, lse, block, scale, p_drop, seed)


def blockwise_attention_backward(dO, cache: BlockwiseAttentionCache):
    """Returns ``(dQ, dK, dV)``; per block, in the reverse order of the forward's steps:

    2. recompute ``P = exp(s Q K^T - L)`` (masked entries 0), ``P' = P * mask_drop``
    1. ``dV += P'^T dO``, ``dP = (dO V^T) * mask_drop``
    0. ``dZ = s P * (dP - Delta)``, ``dQ = dZ K``, ``dK += dZ^T Q``
    """
    Q, K, V, mask, O, lse, block, scale, p_drop, seed = cache
    T = Q.shape[-2]
    dtype = O.dtype
    dQ = xp.empty(Q.shape, dtype=dtype)
    dK = xp.zeros(K.shape, dtype=dtype)
    dV = xp.zeros(V.shape, dtype=dtype)
    delta = backend.rowdot(dO, O)[..., None]  # (B, H, T, 1) = rowsum(dP * P)
    Kt, Vt = K.swapaxes(-1, -2), V.swapaxes(-1, -2)
    for b, i0 in enumerate(range(0, T, block)):
        i1 = min(i0 + block, T)
        Qb, dOb = Q[..., i0:i1, :], dO[..., i0:i1, :]
        P = Qb @ Kt  # (B, H, M, S): the scores again ...
        P *= scale
        mb = _mask_rows(mask, i0, i1)
        if mb is not None:
            xp.copyto(P, -xp.inf, where=xp.logical_not(mb))
        P -= lse[..., i0:i1, :]
        xp.exp(P, out=P)  # ... and the forward's probabilities, exactly
        dP = dOb @ Vt  # (B, H, M, S)
        if seed is not None:  # the forward's mask, drawn again
            drop = dropout_mask(P.shape, p_drop, _block_rng(seed, b), P.dtype)
            dV += dropout_backward(P, drop).swapaxes(-1, -2) @ dOb  # P' = P * mask
            dP = dropout_backward_(dP, drop)
        else:
            dV += P.swapaxes(-1, -2) @ dOb
        dP -= delta[..., i0:i1, :]
        dP *= P
        dP *= scale  # dZ
        dQ[..., i0:i1, :] = dP @ K
        dK += dP.swapaxes(-1, -2) @ Qb
    return dQ, dK, dV


__all__ = [
    "BlockwiseAttentionCache",
    "blockwise_attention_backward",
    "blockwise_attention_forward",
]
