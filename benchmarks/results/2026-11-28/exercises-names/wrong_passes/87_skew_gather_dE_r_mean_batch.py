# ruff: noqa
"""Exercise skew: the backward pass of the Music Transformer's relative logits with the skew. Write ``skew_logits_backward`` below.

Huang et al. (2018): a learned embedding per head of each distance i - j (clipped to k),
read for all pairs at once by the skew: Skew(rel)[i, j] = rel[i, L-1-(i-j)], done by
padding a zero column on the left, reshaping (L, L+1) -> (L+1, L) and dropping the first
row (skew_forward, below). Queries that do not line up with the keys (decoding) read the
same logits by a gather instead: write both branches.

    scratchformer exercise check skew      grade it
    scratchformer exercise hint skew       the next hint
    scratchformer exercise solution skew   the engine's code and derivation

The derivation: docs/derivations.md#relative-attention-with-the-skew-music-transformer (on the docs site: derivations.html#relative-attention-with-the-skew-music-transformer).
The forward is given as the engine has it (scratchformer/engine/ops/relative_attention.py); the
checker runs the engine's forward and compares your backward with float64
central differences of sum(out * dout) on these inputs:
    skew form, L 6, k 2
    gather form

``xp`` is NumPy (CuPy on a GPU): xp.zeros, xp.sum, xp.exp, ... as with np.
"""

from __future__ import annotations

import math

from scratchformer.engine.backend import xp
from scratchformer.engine import device  # device.segment_sum(idx, rows, K): equal indices add up
from scratchformer.engine.ops.relative_attention import (
    SkewLogitsCache,
    distance_index,
    gather_relative,
    skew_table,
)

EXERCISE = "skew"


# -- given: the forward pass, as in the engine ---------------------------------------------
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


# -- yours: the backward pass --------------------------------------------------------------
def skew_logits_backward(dZ, cache):
    """dZ (B, H, T, S): the gradient of the loss with respect to the logits ``Z``.

    cache (a SkewLogitsCache):
        cache.Q      (B, H, T, Dh)
        cache.K      (B, H, S, Dh)
        cache.E_r    (H, k+1, Dh)   one table per head, row d = the distance i - j (<= k)
        cache.Er_L   (H, L, Dh)     skew form (T = S = L): E_r[:, rows], else None
        cache.rows   (L,) int       skew form: the E_r row of each column of Er_L, else None
        cache.idx    (T, S) int     gather form: distance_index(...), else None
        cache.scale  float          1 / sqrt(Dh)

    Return ``(dQ, dK, dE_r)`` like Q, K and E_r.
    """
    Q, K, E_r = cache.Q, cache.K, cache.E_r
    n_rows = E_r.shape[-2]
    dZs = dZ * cache.scale
    dQ = dZs @ K
    dK = dZs.swapaxes(-1, -2) @ Q
    Q4 = Q.reshape(-1, *Q.shape[-3:])  # (B, H, T, Dh)
    if cache.Er_L is not None:

        *lead, L, _ = dZs.shape
        d_padded = xp.zeros((*lead, L + 1, L), dtype=dZs.dtype)
        d_padded[..., 1:, :] = dZs
        drel = d_padded.reshape(*lead, L, L + 1)[..., 1:]
        dQ = dQ + drel @ cache.Er_L
        dEr_L = xp.einsum("bhtc,bhtd->hcd", drel.reshape(-1, *drel.shape[-3:]), Q4)
        onehot = (cache.rows[:, None] == xp.arange(n_rows)).astype(dZ.dtype)
        dE_r = xp.einsum("hcd,cr->hrd", dEr_L, onehot)
    else:

        onehot = (cache.idx[..., None] == xp.arange(n_rows)).astype(dZ.dtype)
        dR = xp.einsum("...ts,tsr->...tr", dZs, onehot)
        dQ = dQ + dR @ E_r
        dE_r = xp.einsum("bhtr,bhtd->hrd", dR.reshape(-1, *dR.shape[-3:]), Q4) / Q4.shape[0]
    return dQ, dK, dE_r
