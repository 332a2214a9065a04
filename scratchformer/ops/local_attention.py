"""Masked local block self-attention (Image Transformer, 1-D), forward and backward.

The sequence is cut into blocks of ``M`` positions (the last one padded). The queries
of block ``b`` attend to the keys of blocks ``b-1`` and ``b`` only, causally, as in
tensor2tensor's ``masked_local_attention_1d``:

    key j is visible from query i  <=>  j <= i  and  j // M >= i // M - 1  (and j real)

Each block sees a window of ``2M`` keys, so scores are (nb, M, 2M) per head: memory
O(L * M) instead of the O(L^2) of dense attention. With ``window(X)[b] = [X_{b-1}; X_b]``
(X_{-1} = 0):

    Z_b = s Q_b window(K)_b^T,   A_b = softmax(Z_b, band_b),   O_b = dropout(A_b) window(V)_b

Backward: attention's backward inside each block, then ``window``'s adjoint folds the
window gradient back: ``dK_b = dKwin_b[M:] + dKwin_{b+1}[:M]``.

Dimension key: ``B`` batch, ``H`` heads, ``L`` length, ``M`` block size,
``nb = ceil(L / M)`` blocks, ``W = 2M`` window, ``Dh`` d_k, ``Dv`` d_v.
Derivation: docs/derivations.md#local-block-attention.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from scratchformer.backend import xp
from scratchformer.ops.dropout import DropoutCache, dropout_backward, dropout_forward
from scratchformer.ops.softmax import SoftmaxCache, softmax_backward, softmax_forward


def key_padding(mask, B: int, S: int):
    """The key-padding part of an attention mask, as (B, S) bool, or None.

    Local attention builds its causal band itself and reads only which keys are real:
    a (B, 1, 1, S) padding mask is used as is; of a (B, 1, T, S) or (T, S) causal mask
    (True at key <= query) the last query row is taken, which sees every real key.
    """
    if mask is None:
        return None
    m = mask.reshape(mask.shape[-2:]) if mask.ndim == 2 else mask[:, 0, -1, :]  # (B|1, S)
    return xp.broadcast_to(m.reshape(-1, S), (B, S))


def band_mask(L: int, M: int):
    """Dense (L, L) bool equivalent of local attention: causal and at most one block back."""
    i = xp.arange(L)[:, None]
    j = xp.arange(L)[None, :]
    return (j <= i) & (j // M >= i // M - 1)


def _window(Xb):
    """Xb (..., nb, M, D)  ->  (..., nb, 2M, D): each block preceded by the block before
    (zeros before block 0)."""
    prev = xp.zeros_like(Xb)
    prev[..., 1:, :, :] = Xb[..., :-1, :, :]
    return xp.concatenate([prev, Xb], axis=-2)


def _window_backward(dXwin, M: int):
    """The adjoint of ``_window``: (..., nb, 2M, D) -> (..., nb, M, D)."""
    dXb = dXwin[..., M:, :].copy()
    dXb[..., :-1, :, :] += dXwin[..., 1:, :M, :]
    return dXb


def _blocks(X, M: int, nb: int):
    """(B, H, L, D) -> zero-padded (B, H, nb, M, D)."""
    B, H, L, D = X.shape
    pad = nb * M - L
    if pad:
        X = xp.concatenate([X, xp.zeros((B, H, pad, D), dtype=X.dtype)], axis=2)
    return X.reshape(B, H, nb, M, D)


def local_mask(L: int, M: int, keys=None, B: int = 1):
    """The (B, 1, nb, M, 2M) bool mask of the blocked scores: causal band, real positions
    (< L) and, with ``keys`` (B, L) bool, real (non-pad) keys."""
    nb = -(-L // M)
    q = xp.arange(M)[:, None]  # position in the block
    w = xp.arange(2 * M)[None, :]  # position in the window; absolute (b-1) M + w
    b = xp.arange(nb)[:, None, None]
    pos = (b - 1) * M + w  # (nb, 1, 2M)
    m = (w <= q + M) & (pos >= 0) & (pos < L)  # (nb, M, 2M)
    m = m[None, None]  # (1, 1, nb, M, 2M)
    if keys is not None:
        kp = xp.zeros((keys.shape[0], nb * M), dtype=bool)
        kp[:, :L] = keys
        kwin = _window(kp.reshape(-1, nb, M, 1))[..., 0]  # (B, nb, 2M)
        m = m & kwin[:, None, :, None, :]
    return m


class LocalAttentionCache(NamedTuple):
    Qb: object  # (B, H, nb, M, Dh)
    Kwin: object  # (B, H, nb, 2M, Dh)
    Vwin: object  # (B, H, nb, 2M, Dv)
    softmax: SoftmaxCache  # A (B, H, nb, M, 2M)
    A_drop: object  # (B, H, nb, M, 2M)
    dropout: DropoutCache
    scale: float
    L: int  # the unpadded length
    M: int  # block size


def local_attention_forward(Q, K, V, block: int, mask=None, p_drop: float = 0.0, rng=None):
    """Q, K (B, H, L, Dh), V (B, H, L, Dv); ``block`` M; ``mask`` read as key padding
    (see ``key_padding``)  ->  O (B, H, L, Dv).

    1. pad L to nb*M, cut into blocks; windows of keys/values [block b-1; block b]
    2. ``Z = s Qb Kwin^T`` (B, H, nb, M, 2M), ``A = softmax(Z, band & real keys)``
    3. ``A' = dropout(A)``, ``O = A' Vwin``, un-block and drop the padding
    """
    B, H, L, _ = Q.shape
    if K.shape[-2] != L:
        raise ValueError("local attention is self-attention: queries and keys of one length")
    M = int(block)
    nb = -(-L // M)
    scale = 1.0 / math.sqrt(Q.shape[-1])
    Qb = _blocks(Q, M, nb)  # (B, H, nb, M, Dh)
    Kwin = _window(_blocks(K, M, nb))  # (B, H, nb, 2M, Dh)
    Vwin = _window(_blocks(V, M, nb))  # (B, H, nb, 2M, Dv)
    m = local_mask(L, M, key_padding(mask, B, L), B)  # (B|1, 1, nb, M, 2M)
    scores = (Qb @ Kwin.swapaxes(-1, -2)) * scale  # (B, H, nb, M, 2M)
    A, sm_cache = softmax_forward(scores, m)
    A_drop, drop_cache = dropout_forward(A, p_drop, rng)
    Ob = A_drop @ Vwin  # (B, H, nb, M, Dv)
    O = Ob.reshape(B, H, nb * M, -1)[:, :, :L]  # (B, H, L, Dv)
    return O, LocalAttentionCache(Qb, Kwin, Vwin, sm_cache, A_drop, drop_cache, scale, L, M)


def local_attention_backward(dO, cache: LocalAttentionCache):
    """Reverse of the forward:

    3. ``dA' = dOb Vwin^T``, ``dVwin = A'^T dOb`` (dOb: dO zero-padded and blocked)
    2. dropout, ``dZ = A * (dA - sum(dA * A, -1))``, ``dZ' = s dZ``
    1. ``dQb = dZ' Kwin``, ``dKwin = dZ'^T Qb``; fold windows back (``_window_backward``),
       un-block, drop the padding

    Returns ``(dQ, dK, dV)``.
    """
    Qb, Kwin, Vwin, sm_cache, A_drop, drop_cache, scale, L, M = cache
    B, H, nb = Qb.shape[:3]
    dOb = _blocks(dO, M, nb)  # (B, H, nb, M, Dv)
    dA_drop = dOb @ Vwin.swapaxes(-1, -2)  # (B, H, nb, M, 2M)
    dVwin = A_drop.swapaxes(-1, -2) @ dOb  # (B, H, nb, 2M, Dv)
    dZ = softmax_backward(dropout_backward(dA_drop, drop_cache), sm_cache)
    dZ *= scale
    dQb = dZ @ Kwin  # (B, H, nb, M, Dh)
    dKwin = dZ.swapaxes(-1, -2) @ Qb  # (B, H, nb, 2M, Dh)

    def unblock(Xb):
        return Xb.reshape(B, H, nb * M, -1)[:, :, :L]  # (B, H, L, D)

    dK = unblock(_window_backward(dKwin, M))
    dV = unblock(_window_backward(dVwin, M))
    return unblock(dQb), dK, dV


__all__ = [
    "LocalAttentionCache",
    "band_mask",
    "key_padding",
    "local_attention_backward",
    "local_attention_forward",
    "local_mask",
]
