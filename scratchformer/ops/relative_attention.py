"""Relative position self-attention, forward and backward, in two forms.

Shaw et al. (2018), "Self-Attention with Relative Position Representations":

    idx[i, j] = clip(j - i, -k, k) + k                      (T, S) ints in [0, 2k]
    Z[i, j]   = s (Q_i . K_j + Q_i . E_k[idx[i, j]])        s = 1 / sqrt(Dh)
    A         = softmax(Z, mask),  A' = dropout(A)
    O_i       = sum_j A'[i, j] (V_j + E_v[idx[i, j]])

``E_k`` (2k+1, Dh) and ``E_v`` (2k+1, Dv) are shared by the heads (as in the paper).
Nothing of size (T, S, Dh) is built: ``Q E_k^T`` is (T, 2k+1) per head and a gather by
``idx`` turns it into (T, S); the value term scatters ``A'`` into (T, 2k+1) buckets
(``A_rel``) and multiplies by ``E_v``.

Music Transformer (Huang et al., 2018), the "skew" form (causal only):

    Er_L[r]   = E_r[min(L-1-r, k)]       r = 0..L-1: row r is distance i - j = L-1-r
    rel       = Q Er_L^T                 (B, H, L, L)
    Z         = s (Q K^T + Skew(rel)),   Skew(rel)[i, j] = rel[i, L-1-(i-j)]  for j <= i

``E_r`` (H, k+1, Dh), one table per head, row d = the distance ``i - j`` (0..k); longer
distances use row k (clipped, as in Shaw; tensor2tensor pads them with zeros instead).
Skew = pad one zero column on the left, reshape (L, L+1) -> (L+1, L), drop the first
row: O(L) extra memory, against O(L^2 Dh) for the (L, L, Dh) tensor of relative
embeddings. Above the diagonal Skew(rel) is garbage (other rows' entries, or pad
zeros): the causal mask is mandatory. Its backward is the inverse re-indexing
(``skew_backward``): zero row on top, reshape back, drop the pad column. Queries that
do not line up with the keys (incremental decoding: queries at positions ``offset ..``
over S stored keys) read the same logits by a gather, ``gather(Q E_r^T, distance_index)``,
whose adjoint is ``scatter_relative``.

Dimension key: ``B`` batch, ``H`` heads, ``T`` queries, ``S`` keys, ``L`` length (T = S),
``Dh`` d_k, ``Dv`` d_v, ``R = 2k+1`` Shaw buckets, ``k`` max_relative_position.
Derivations: docs/derivations.md#relative-attention-shaw and
#relative-attention-with-the-skew-music-transformer.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from scratchformer import backend
from scratchformer.backend import xp
from scratchformer.ops.dropout import DropoutCache, dropout_backward, dropout_forward
from scratchformer.ops.softmax import SoftmaxCache, softmax_backward, softmax_forward


# -- index helpers -------------------------------------------------------------------------
def relative_index(T: int, S: int, k: int, offset: int = 0):
    """Shaw buckets: (T, S) int, ``clip(j - (offset + i), -k, k) + k``.

    Query ``i`` sits at position ``offset + i`` (incremental decoding), key ``j`` at ``j``.
    """
    q = xp.arange(T)[:, None] + offset
    kk = xp.arange(S)[None, :]
    return xp.clip(kk - q, -k, k) + k


def distance_index(T: int, S: int, k: int, offset: int = 0):
    """Music Transformer rows: (T, S) int, ``clip((offset + i) - j, 0, k)``.

    Keys after the query (j > i) map to row 0; they must be masked (causal attention).
    """
    q = xp.arange(T)[:, None] + offset
    kk = xp.arange(S)[None, :]
    return xp.clip(q - kk, 0, k)


def gather_relative(X, idx):
    """X (..., T, R), idx (T, S) int  ->  (..., T, S): ``out[..., i, j] = X[..., i, idx[i, j]]``."""
    rows = xp.arange(idx.shape[0])[:, None]  # (T, 1)
    return X[..., rows, idx]


def scatter_relative(Y, idx, R: int):
    """The adjoint of ``gather_relative``: Y (..., T, S)  ->  (..., T, R) with
    ``out[..., i, r] = sum_{j: idx[i, j] = r} Y[..., i, j]`` (repeated buckets add up:
    every key beyond +-k lands in the edge bucket)."""
    lead = Y.shape[:-2]
    T, S = idx.shape
    n = int(math.prod(lead))
    flat_idx = (xp.arange(T)[:, None] * R + idx).reshape(-1)  # (T*S,)
    values = Y.reshape(n, T * S).T  # (T*S, n)
    out = xp.zeros((T * R, n), dtype=Y.dtype)
    backend.scatter_add(out, flat_idx, xp.ascontiguousarray(values))
    return out.T.reshape(*lead, T, R)  # (..., T, R)


# -- Shaw et al. ---------------------------------------------------------------------------
class ShawAttentionCache(NamedTuple):
    Q: object  # (B, H, T, Dh)
    K: object  # (B, H, S, Dh)
    V: object  # (B, H, S, Dv)
    E_k: object  # (R, Dh) key relative embeddings, R = 2k+1
    E_v: object  # (R, Dv) value relative embeddings (None: no value term)
    idx: object  # (T, S) int buckets
    softmax: SoftmaxCache  # A (B, H, T, S) before dropout
    A_drop: object  # (B, H, T, S) after dropout (what multiplied V and E_v)
    A_rel: object  # (B, H, T, R) A_drop summed per bucket (None without E_v)
    dropout: DropoutCache
    scale: float  # 1 / sqrt(Dh)


def shaw_attention_forward(
    Q, K, V, E_k, E_v=None, mask=None, p_drop: float = 0.0, rng=None, offset: int = 0
):
    """Q (B, H, T, Dh), K (B, H, S, Dh), V (B, H, S, Dv), E_k (2k+1, Dh), E_v (2k+1, Dv)
    or None, mask bool broadcastable to (B, H, T, S)  ->  O (B, H, T, Dv).

    1. ``Z = s (Q K^T + gather(Q E_k^T, idx))``
    2. ``A = softmax(Z, mask)``, ``A' = dropout(A)``
    3. ``O = A' V + scatter(A', idx) E_v``
    """
    R = E_k.shape[0]
    k = (R - 1) // 2
    T, S = Q.shape[-2], K.shape[-2]
    idx = relative_index(T, S, k, offset)  # (T, S)
    scale = 1.0 / math.sqrt(Q.shape[-1])
    rel = Q @ E_k.T  # (B, H, T, R)
    scores = (Q @ K.swapaxes(-1, -2) + gather_relative(rel, idx)) * scale  # (B, H, T, S)
    A, sm_cache = softmax_forward(scores, mask)
    A_drop, drop_cache = dropout_forward(A, p_drop, rng)
    O = A_drop @ V  # (B, H, T, Dv)
    A_rel = None
    if E_v is not None:
        A_rel = scatter_relative(A_drop, idx, R)  # (B, H, T, R)
        O = O + A_rel @ E_v
    return O, ShawAttentionCache(Q, K, V, E_k, E_v, idx, sm_cache, A_drop, A_rel, drop_cache, scale)


def shaw_attention_backward(dO, cache: ShawAttentionCache):
    """Reverse of the forward:

    3. ``dA' = dO V^T + gather(dO E_v^T, idx)``, ``dV = A'^T dO``,
       ``dE_v = sum_{b,h,i} A_rel^T dO``  (A_rel = scatter(A', idx))
    2. ``dA = dA' * mask_drop``, ``dZ = A * (dA - sum(dA * A, -1))``
    1. with ``dZ' = s dZ``: ``dQ = dZ' K + scatter(dZ', idx) E_k``, ``dK = dZ'^T Q``,
       ``dE_k = sum_{b,h,i} scatter(dZ', idx)^T Q``

    Returns ``(dQ, dK, dV, dE_k, dE_v)`` (``dE_v`` None when there is no value term).
    """
    Q, K, V, E_k, E_v, idx, sm_cache, A_drop, A_rel, drop_cache, scale = cache
    R = E_k.shape[0]
    # 3. the output
    dA_drop = dO @ V.swapaxes(-1, -2)  # (B, H, T, S)
    dV = A_drop.swapaxes(-1, -2) @ dO  # (B, H, S, Dv)
    dE_v = None
    if E_v is not None:
        dA_drop = dA_drop + gather_relative(dO @ E_v.T, idx)  # (B, H, T, R) -> (B, H, T, S)
        dE_v = A_rel.reshape(-1, R).T @ dO.reshape(-1, dO.shape[-1])  # (R, Dv)
    # 2. dropout and softmax
    dZ = softmax_backward(dropout_backward(dA_drop, drop_cache), sm_cache)
    dZ *= scale
    # 1. the logits: content term and relative term
    dRel = scatter_relative(dZ, idx, R)  # (B, H, T, R)
    dQ = dZ @ K + dRel @ E_k  # (B, H, T, Dh)
    dK = dZ.swapaxes(-1, -2) @ Q  # (B, H, S, Dh)
    dE_k = dRel.reshape(-1, R).T @ Q.reshape(-1, Q.shape[-1])  # (R, Dh)
    return dQ, dK, dV, dE_k, dE_v


# -- Music Transformer: the skew ---------------------------------------------------------------
def skew_forward(rel):
    """rel (..., L, L) with column r = distance L-1-r  ->  (..., L, L) with
    ``out[..., i, j] = rel[..., i, L-1-(i-j)]`` for ``j <= i`` (garbage above the diagonal).

    Pad one zero column on the left (L, L+1), reshape to (L+1, L), drop the first row.
    """
    *lead, L, L2 = rel.shape
    if L != L2:
        raise ValueError(f"skew needs a square (L, L) relative matrix, got {(L, L2)}")
    pad = xp.zeros((*lead, L, 1), dtype=rel.dtype)
    padded = xp.concatenate([pad, rel], axis=-1)  # (..., L, L+1)
    return padded.reshape(*lead, L + 1, L)[..., 1:, :]  # (..., L, L)


def skew_backward(dout):
    """The adjoint of ``skew_forward``: the same three re-indexings undone in reverse.

    3. drop the first row  ->  put a zero row back on top       (..., L+1, L)
    2. reshape (L, L+1) -> (L+1, L)  ->  reshape back           (..., L, L+1)
    1. pad a zero column on the left  ->  drop that column      (..., L, L)

    Every entry of ``dout`` lands on the entry of ``rel`` it was read from; the garbage
    entries above the diagonal carry zero gradient once the causal mask has zeroed them
    (masked logits get zero gradient from the softmax).
    """
    *lead, L, _ = dout.shape
    d_padded = xp.zeros((*lead, L + 1, L), dtype=dout.dtype)
    d_padded[..., 1:, :] = dout
    return d_padded.reshape(*lead, L, L + 1)[..., 1:]  # (..., L, L)


def skew_table(E_r, L: int):
    """E_r (H, k+1, Dh)  ->  Er_L (H, L, Dh), ``Er_L[:, r] = E_r[:, min(L-1-r, k)]``."""
    k = E_r.shape[-2] - 1
    rows = xp.minimum(xp.arange(L - 1, -1, -1), k)  # (L,) distance of column r, clipped
    return E_r[:, rows, :], rows


class SkewAttentionCache(NamedTuple):
    Q: object  # (B, H, T, Dh)
    K: object  # (B, H, S, Dh)
    V: object  # (B, H, S, Dv)
    E_r: object  # (H, k+1, Dh) the relative embeddings
    Er_L: object  # skew form: (H, L, Dh) the per-length table gathered from E_r; else None
    rows: object  # skew form: (L,) int, the E_r row of each column of Er_L; else None
    idx: object  # gather form: (T, S) int distance rows (``distance_index``); else None
    softmax: SoftmaxCache  # A (B, H, T, S)
    A_drop: object  # (B, H, T, S)
    dropout: DropoutCache
    scale: float


def skew_attention_forward(Q, K, V, E_r, mask, p_drop: float = 0.0, rng=None, offset: int = 0):
    """Q (B, H, T, Dh), K (B, H, S, Dh), V (B, H, S, Dv), E_r (H, k+1, Dh), mask bool
    broadcastable to (B, H, T, S) that MUST hide every key after its query
    ->  O (B, H, T, Dv). Query ``i`` sits at position ``offset + i``, key ``j`` at ``j``.

    1. relative logits ``rel[i, j] = Q_i . E_r[min(offset + i - j, k)]`` for j <= offset + i:
       the skew form ``Skew(Q Er_L^T)`` when queries and keys line up (T = S, offset 0,
       training), else the gather ``gather(Q E_r^T, distance_index)`` (decoding)
    2. ``Z = s (Q K^T + rel)``
    3. ``A = softmax(Z, mask)``, ``A' = dropout(A)``, ``O = A' V``

    Without a mask every key must be at or before the first query (S <= offset + 1).
    """
    T, S = Q.shape[-2], K.shape[-2]
    if mask is None and S > offset + 1:
        raise ValueError("skew attention needs the causal mask: keys after a query are garbage")
    scale = 1.0 / math.sqrt(Q.shape[-1])
    Er_L = rows = idx = None
    if T == S and offset == 0:
        Er_L, rows = skew_table(E_r, S)  # (H, L, Dh)
        rel = skew_forward(Q @ Er_L.swapaxes(-1, -2))  # (B, H, L, L)
    else:
        idx = distance_index(T, S, E_r.shape[-2] - 1, offset)  # (T, S)
        rel = gather_relative(Q @ E_r.swapaxes(-1, -2), idx)  # (B, H, T, k+1) -> (B, H, T, S)
    scores = (Q @ K.swapaxes(-1, -2) + rel) * scale
    A, sm_cache = softmax_forward(scores, mask)
    A_drop, drop_cache = dropout_forward(A, p_drop, rng)
    O = A_drop @ V
    return O, SkewAttentionCache(Q, K, V, E_r, Er_L, rows, idx, sm_cache, A_drop, drop_cache, scale)


def skew_attention_backward(dO, cache: SkewAttentionCache):
    """Reverse of the forward:

    3. ``dA' = dO V^T``, ``dV = A'^T dO``; dropout; ``dZ = softmax_backward``; ``dZ' = s dZ``
    2. ``dK = dZ'^T Q``
    1. skew form: ``drel = SkewBackward(dZ')``, ``dQ = dZ' K + drel Er_L``,
       ``dEr_L = sum_b drel^T Q`` (H, L, Dh), ``dE_r[:, d] = sum of dEr_L[:, r]`` over the
       columns r with row d (scatter-add);
       gather form: ``dRel = scatter(dZ', idx)`` (B, H, T, k+1), ``dQ = dZ' K + dRel E_r``,
       ``dE_r = sum_b dRel^T Q``

    Returns ``(dQ, dK, dV, dE_r)``.
    """
    Q, K, V, E_r, Er_L, rows, idx, sm_cache, A_drop, drop_cache, scale = cache
    k1 = E_r.shape[-2]
    dA_drop = dO @ V.swapaxes(-1, -2)  # (B, H, T, S)
    dV = A_drop.swapaxes(-1, -2) @ dO  # (B, H, S, Dv)
    dZ = softmax_backward(dropout_backward(dA_drop, drop_cache), sm_cache)
    dZ *= scale
    dK = dZ.swapaxes(-1, -2) @ Q  # (B, H, S, Dh)
    if idx is not None:  # the gather form
        dRel = scatter_relative(dZ, idx, k1)  # (B, H, T, k+1)
        dQ = dZ @ K + dRel @ E_r  # (B, H, T, Dh)
        return dQ, dK, dV, (dRel.swapaxes(-1, -2) @ Q).sum(axis=0)  # (H, k+1, Dh)
    drel = skew_backward(dZ)  # (B, H, L, L)
    dQ = dZ @ K + drel @ Er_L  # (B, H, L, Dh)
    dEr_L = (drel.swapaxes(-1, -2) @ Q).sum(axis=0)  # (H, L, Dh)
    H, L, Dh = dEr_L.shape
    dE_r = xp.zeros((k1, H * Dh), dtype=dEr_L.dtype)
    backend.scatter_add(dE_r, rows, xp.ascontiguousarray(dEr_L.transpose(1, 0, 2)).reshape(L, -1))
    return dQ, dK, dV, dE_r.reshape(k1, H, Dh).transpose(1, 0, 2)  # (H, k+1, Dh)


__all__ = [
    "ShawAttentionCache",
    "SkewAttentionCache",
    "distance_index",
    "gather_relative",
    "relative_index",
    "scatter_relative",
    "shaw_attention_backward",
    "shaw_attention_forward",
    "skew_attention_backward",
    "skew_attention_forward",
    "skew_backward",
    "skew_forward",
    "skew_table",
]
