# ruff: noqa
"""Exercise shaw: the backward pass of Shaw's relative attention logits. Write ``shaw_logits_backward`` below.

Shaw et al. (2018): the logits get a term for the distance between query and key,
clipped to +-k, from a table E_k of 2k+1 rows shared by the heads:

    idx[i, j] = clip(j - i, -k, k) + k          Z = s (Q K^T + gather(Q E_k^T, idx))

gather(X, idx)[..., i, j] = X[..., i, idx[i, j]]. Every key farther than k lands in an
edge bucket: buckets repeat along a row.

    scratchformer exercise check shaw      grade it
    scratchformer exercise hint shaw       the next hint
    scratchformer exercise solution shaw   the engine's code and derivation

The derivation: docs/derivations.md#relative-attention-shaw (on the docs site: derivations.html#relative-attention-shaw).
The forward is given as the engine has it (scratchformer/engine/ops/relative_attention.py); the
checker runs the engine's forward and compares your backward with float64
central differences of sum(out * dout) on these inputs:
    k 2, offset 0
    k 2, offset 2

``xp`` is NumPy (CuPy on a GPU): xp.zeros, xp.sum, xp.exp, ... as with np.
"""

from __future__ import annotations

import math

from scratchformer.engine.backend import xp
from scratchformer.engine import device  # device.segment_sum(idx, rows, K): equal indices add up
from scratchformer.engine.ops.relative_attention import ShawLogitsCache, relative_index

EXERCISE = "shaw"


# -- given: the forward pass, as in the engine ---------------------------------------------
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


def gather_relative(X, idx):
    """X (..., T, R), idx (T, S) int  ->  (..., T, S): ``out[..., i, j] = X[..., i, idx[i, j]]``."""
    rows = xp.arange(idx.shape[0])[:, None]  # (T, 1)
    return X[..., rows, idx]


# -- yours: the backward pass --------------------------------------------------------------
def shaw_logits_backward(dZ, cache):
    """dZ (B, H, T, S): the gradient of the loss with respect to the logits ``Z``.

    cache (a ShawLogitsCache):
        cache.Q      (B, H, T, Dh)
        cache.K      (B, H, S, Dh)
        cache.E_k    (R, Dh)   R = 2k + 1 relative key embeddings, shared by the heads
        cache.idx    (T, S)    int buckets in [0, R)
        cache.scale  float     1 / sqrt(Dh)

    Return ``(dQ, dK, dE_k)`` like Q, K and E_k.
    """
    Q, K, E_k, idx = cache.Q, cache.K, cache.E_k, cache.idx
    R = E_k.shape[0]
    dZs = dZ * cache.scale
    dQ = dZs @ K
    dK = dZs.swapaxes(-1, -2) @ Q
    onehot = (idx[..., None] == xp.arange(R)).astype(dZ.dtype)  # (T, S, R)

    T, S = idx.shape
    dR = xp.zeros((*dZ.shape[:-1], R), dtype=dZ.dtype)
    rows = xp.arange(T)[:, None]
    dR[..., rows, idx] += dZs
    dQ = dQ + dR @ E_k
    dE_k = dR.reshape(-1, R).T @ Q.reshape(-1, Q.shape[-1])
    return dQ, dK, dE_k
