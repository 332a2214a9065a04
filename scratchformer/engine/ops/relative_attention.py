"""Relative position self-attention: what each of two variants adds to the attention core.

Only the variants' own terms are here, as forward/backward pairs; the softmax, the
dropout and the product with V are the attention core of ops/attention.py, and the
attention modules (nn/relative_attention.py) compose the two:

    Shaw:               Z = shaw_logits(Q, K, E_k);  O = core(Z, V);  O = shaw_values(O, A')
    Music Transformer:  Z = skew_logits(Q, K, E_r);  O = core(Z, V)

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

Each term's reference pair is what runs (float16 activations: its emulated float16
form, ops/float16.py); ``shaw_logits`` declares the accessor ``idx`` (the (T, S)
buckets), which the value term reads.

Dimension key: ``B`` batch, ``H`` heads, ``T`` queries, ``S`` keys, ``L`` length (T = S),
``Dh`` d_k, ``Dv`` d_v, ``R = 2k+1`` Shaw buckets, ``k`` max_relative_position.
Derivations: docs/derivations.md#relative-attention-shaw and
#relative-attention-with-the-skew-music-transformer.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from scratchformer.engine import device
from scratchformer.engine.backend import xp
from scratchformer.engine.dispatch import Op
from scratchformer.engine.ops import float16
from scratchformer.engine.ops.cases import Case, qkv, randn


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
    device.scatter_add(out, flat_idx, xp.ascontiguousarray(values))  # (T*R, n)
    return out.T.reshape(*lead, T, R)  # (..., T, R)


# -- Shaw et al. ---------------------------------------------------------------------------
class ShawLogitsCache(NamedTuple):
    Q: object  # (B, H, T, Dh)
    K: object  # (B, H, S, Dh)
    E_k: object  # (R, Dh) key relative embeddings, R = 2k+1
    idx: object  # (T, S) int buckets
    scale: float  # 1 / sqrt(Dh)


def shaw_logits_forward(Q, K, E_k, offset: int = 0):
    """Q (B, H, T, Dh) at positions ``offset ..``, K (B, H, S, Dh), E_k (2k+1, Dh)
    ->  Z (B, H, T, S):

    ``Z = s (Q K^T + gather(Q E_k^T, idx))``, ``idx = relative_index(T, S, k, offset)``.
    """
    R = E_k.shape[0]
    T, S = Q.shape[-2], K.shape[-2]
    idx = relative_index(T, S, (R - 1) // 2, offset)  # (T, S)
    scale = 1.0 / math.sqrt(Q.shape[-1])
    rel = Q @ E_k.T  # (B, H, T, R)
    Z = (Q @ K.swapaxes(-1, -2) + gather_relative(rel, idx)) * scale  # (B, H, T, S)
    return Z, ShawLogitsCache(Q, K, E_k, idx, scale)


def shaw_logits_backward(dZ, cache: ShawLogitsCache):
    """With ``dZ' = s dZ``: the content term gives ``dQ = dZ' K``, ``dK = dZ'^T Q``; the
    relative term ``gather(R)`` gives ``dR = scatter(dZ', idx)`` (B, H, T, 2k+1), then
    ``R = Q E_k^T`` gives ``dQ += dR E_k`` and ``dE_k = sum_{b,h} dR^T Q``.

    Returns ``(dQ, dK, dE_k)``.
    """
    Q, K, E_k, idx, scale = cache
    R = E_k.shape[0]
    dZ = dZ * scale
    dRel = scatter_relative(dZ, idx, R)  # (B, H, T, R)
    dQ = dZ @ K + dRel @ E_k  # (B, H, T, Dh)
    dK = dZ.swapaxes(-1, -2) @ Q  # (B, H, S, Dh)
    dE_k = dRel.reshape(-1, R).T @ Q.reshape(-1, Q.shape[-1])  # (R, Dh)
    return dQ, dK, dE_k


class ShawValuesCache(NamedTuple):
    A_rel: object  # (B, H, T, R) the post-dropout weights summed per bucket
    E_v: object  # (R, Dv) value relative embeddings
    idx: object  # (T, S) int buckets


def shaw_values_forward(O, A_drop, E_v, idx):
    """The value term: O (B, H, T, Dv) the core's ``A' V``, A_drop (B, H, T, S) its
    post-dropout weights, E_v (2k+1, Dv), idx (T, S)  ->  O + scatter(A', idx) E_v.

    ``O_i = sum_j A'_ij (V_j + E_v[idx_ij])``: the sum over keys of one bucket first
    (``A_rel``, (B, H, T, 2k+1)), then one product with ``E_v``.
    """
    A_rel = scatter_relative(A_drop, idx, E_v.shape[0])  # (B, H, T, R)
    return O + A_rel @ E_v, ShawValuesCache(A_rel, E_v, idx)


def shaw_values_backward(dO, cache: ShawValuesCache):
    """``dE_v = sum_{b,h,i} A_rel^T dO`` and, through the scatter, the extra gradient of
    the weights ``dA' = gather(dO E_v^T, idx)`` (the core adds it to its ``dO V^T``).

    Returns ``(dA_drop, dE_v)``.
    """
    A_rel, E_v, idx = cache
    R = E_v.shape[0]
    dE_v = A_rel.reshape(-1, R).T @ dO.reshape(-1, dO.shape[-1])  # (R, Dv)
    return gather_relative(dO @ E_v.T, idx), dE_v  # (B, H, T, R) -> (B, H, T, S)


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


class SkewLogitsCache(NamedTuple):
    Q: object  # (B, H, T, Dh)
    K: object  # (B, H, S, Dh)
    E_r: object  # (H, k+1, Dh) the relative embeddings
    Er_L: object  # skew form: (H, L, Dh) the per-length table gathered from E_r; else None
    rows: object  # skew form: (L,) int, the E_r row of each column of Er_L; else None
    idx: object  # gather form: (T, S) int distance rows (``distance_index``); else None
    scale: float


def skew_logits_forward(Q, K, E_r, offset: int = 0):
    """Q (B, H, T, Dh) at positions ``offset ..``, K (B, H, S, Dh), E_r (H, k+1, Dh)
    ->  Z (B, H, T, S), valid on and below the causal diagonal only (the causal mask
    is mandatory: above it the skew leaves other rows' entries).

    ``Z = s (Q K^T + rel)`` with ``rel[i, j] = Q_i . E_r[min(offset + i - j, k)]``:
    the skew form ``Skew(Q Er_L^T)`` when queries and keys line up (T = S, offset 0,
    training), else the gather ``gather(Q E_r^T, distance_index)`` (decoding).
    """
    T, S = Q.shape[-2], K.shape[-2]
    scale = 1.0 / math.sqrt(Q.shape[-1])
    Er_L = rows = idx = None
    if T == S and offset == 0:
        Er_L, rows = skew_table(E_r, S)  # (H, L, Dh)
        rel = skew_forward(Q @ Er_L.swapaxes(-1, -2))  # (B, H, L, L)
    else:
        idx = distance_index(T, S, E_r.shape[-2] - 1, offset)  # (T, S)
        rel = gather_relative(Q @ E_r.swapaxes(-1, -2), idx)  # (B, H, T, k+1) -> (B, H, T, S)
    Z = (Q @ K.swapaxes(-1, -2) + rel) * scale
    return Z, SkewLogitsCache(Q, K, E_r, Er_L, rows, idx, scale)


def skew_logits_backward(dZ, cache: SkewLogitsCache):
    """With ``dZ' = s dZ``: ``dK = dZ'^T Q``, and

    skew form: ``drel = SkewBackward(dZ')``, ``dQ = dZ' K + drel Er_L``,
    ``dEr_L = sum_b drel^T Q`` (H, L, Dh), ``dE_r[:, d] = sum of dEr_L[:, r]`` over the
    columns r with row d (scatter-add);
    gather form: ``dRel = scatter(dZ', idx)`` (B, H, T, k+1), ``dQ = dZ' K + dRel E_r``,
    ``dE_r = sum_b dRel^T Q``.

    Returns ``(dQ, dK, dE_r)``.
    """
    Q, K, E_r, Er_L, rows, idx, scale = cache
    k1 = E_r.shape[-2]
    dZ = dZ * scale
    dK = dZ.swapaxes(-1, -2) @ Q  # (B, H, S, Dh)
    if idx is not None:  # the gather form
        dRel = scatter_relative(dZ, idx, k1)  # (B, H, T, k+1)
        dQ = dZ @ K + dRel @ E_r  # (B, H, T, Dh)
        return dQ, dK, (dRel.swapaxes(-1, -2) @ Q).sum(axis=0)  # (H, k+1, Dh)
    drel = skew_backward(dZ)  # (B, H, L, L)
    dQ = dZ @ K + drel @ Er_L  # (B, H, L, Dh)
    dEr_L = (drel.swapaxes(-1, -2) @ Q).sum(axis=0)  # (H, L, Dh)
    H, L, Dh = dEr_L.shape
    dEr_rows = xp.ascontiguousarray(dEr_L.transpose(1, 0, 2)).reshape(L, H * Dh)  # (L, H*Dh)
    dE_r = xp.zeros((k1, H * Dh), dtype=dEr_L.dtype)
    device.scatter_add(dE_r, rows, dEr_rows)  # (k+1, H*Dh): clipped rows add up
    return dQ, dK, dE_r.reshape(k1, H, Dh).transpose(1, 0, 2)  # (H, k+1, Dh)


# -- the parity cases and the registration ---------------------------------------------------
def shaw_logits_cases(r, dt):
    Q, K, _ = qkv(r, dt)
    E_k = randn(r, (5, 4), dt)
    return [Case("k 2, offset 0", (Q, K, E_k)), Case("k 2, offset 2", (Q, K, E_k, 2))]


def shaw_values_cases(r, dt):
    O, A, E_v = randn(r, (2, 3, 5, 6), dt), randn(r, (2, 3, 5, 7), dt), randn(r, (5, 6), dt)
    return [Case("k 2, offset 2", (O, A, E_v, relative_index(5, 7, 2, 2)))]


def skew_logits_cases(r, dt):
    Q, K, _ = qkv(r, dt, T=6, S=6)
    Qd, Kd, _ = qkv(r, dt, T=2, S=6)
    E_r = randn(r, (3, 3, 4), dt)
    return [Case("skew form, L 6, k 2", (Q, K, E_r)), Case("gather form", (Qd, Kd, E_r, 4))]


shaw_logits = Op("shaw_logits", shaw_logits_forward, shaw_logits_backward,
                 inputs=("Q", "K", "E_k", "offset"), gradients=("dQ", "dK", "dE_k"),
                 accessors={"idx": lambda c: c.idx}, cases=shaw_logits_cases)
float16.register(shaw_logits, products=True)
# the gradient of O passes through unchanged (O + ...): the backward returns the others
shaw_values = Op("shaw_values", shaw_values_forward, shaw_values_backward,
                 inputs=("O", "A_drop", "E_v", "idx"), gradients=("dA_drop", "dE_v"),
                 cases=shaw_values_cases)
float16.register(shaw_values, products=True)
skew_logits = Op("skew_logits", skew_logits_forward, skew_logits_backward,
                 inputs=("Q", "K", "E_r", "offset"), gradients=("dQ", "dK", "dE_r"),
                 cases=skew_logits_cases)
float16.register(skew_logits, products=True)

__all__ = [
    "ShawLogitsCache",
    "ShawValuesCache",
    "SkewLogitsCache",
    "distance_index",
    "gather_relative",
    "relative_index",
    "scatter_relative",
    "shaw_logits",
    "shaw_logits_backward",
    "shaw_logits_forward",
    "shaw_values",
    "shaw_values_backward",
    "shaw_values_forward",
    "skew_backward",
    "skew_forward",
    "skew_logits",
    "skew_logits_backward",
    "skew_logits_forward",
    "skew_table",
]
