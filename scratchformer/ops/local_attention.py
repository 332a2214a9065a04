"""Masked local block self-attention (Image Transformer, 1-D), forward and backward.

The sequence is cut into blocks of ``M`` positions (the last one padded). The queries
of block ``b`` attend to the keys of blocks ``b-1`` and ``b`` only, causally, as in
tensor2tensor's ``masked_local_attention_1d``:

    key j is visible from query i  <=>  j <= i  and  j // M >= i // M - 1  (and j real)

Each block sees a window of ``2M`` keys, so scores are (nb, M, 2M) per head: memory
O(L * M) instead of the O(L^2) of dense attention. With ``window(X)[b] = [X_{b-1}; X_b]``
(X_{-1} = 0):

    O_b = attention(Q_b, window(K)_b, window(V)_b, band_b)

that is, the scaled dot-product attention of ops/attention.py (its logits and the
attention core) on the blocked tensors: nothing of it is written again here. Backward:
attention's backward on the blocks, then ``window``'s adjoint folds the window gradient
back: ``dK_b = dKwin_b[M:] + dKwin_{b+1}[:M]``. Queries that do not line up with the
keys (decoding at an offset) use the dense op with the band as its mask.

Dimension key: ``B`` batch, ``H`` heads, ``L`` length, ``M`` block size,
``nb = ceil(L / M)`` blocks, ``W = 2M`` window, ``Dh`` d_k, ``Dv`` d_v.
Derivation: docs/derivations.md#local-block-attention.
"""

from __future__ import annotations

from typing import NamedTuple

from scratchformer.backend import xp
from scratchformer.ops.attention import AttentionCache, attention_backward, attention_forward


def band_mask(T: int, M: int, S: int | None = None, offset: int = 0):
    """The (T, S) bool band of local attention for queries at positions ``offset ..``
    over keys ``0 .. S-1``: key j visible from query i iff ``j <= p_i`` and
    ``j // M >= p_i // M - 1`` (``p_i = offset + i``): causal, at most one block back."""
    S = T if S is None else S
    p = xp.arange(T)[:, None] + offset
    j = xp.arange(S)[None, :]
    return (j <= p) & (j // M >= p // M - 1)


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
    attention: AttentionCache  # the dense op's cache (on blocks, or on the band mask)
    L: int  # the unpadded length (blocked form); None for the band form
    M: int  # block size


def _key_padding(mask, B: int, S: int):
    """A key-padding mask broadcastable to (B, 1, 1, S) as (B, S) bool, or None."""
    if mask is None:
        return None
    if mask.ndim >= 2 and mask.shape[-2] != 1:
        raise ValueError(
            f"local attention takes a key-padding mask (B, 1, 1, S), not {tuple(mask.shape)}: "
            "it builds its causal band itself"
        )
    return xp.broadcast_to(mask, (B, 1, 1, S))[:, 0, 0, :]


def local_attention_forward(
    Q, K, V, block: int, mask=None, p_drop: float = 0.0, rng=None, offset: int = 0
):
    """Q (B, H, T, Dh) at positions ``offset ..``, K (B, H, S, Dh), V (B, H, S, Dv);
    ``block`` M; ``mask`` key padding, bool broadcastable to (B, 1, 1, S) (True at real
    keys) or None: the causal band is built here  ->  O (B, H, T, Dv).

    Blocked form (queries and keys line up: T = S, offset 0, as in training):

    1. pad L to nb*M, cut into blocks; windows of keys/values [block b-1; block b]
    2. ``O_b = attention(Qb, Kwin, Vwin, band & real keys)`` (B, H, nb, M, 2M) scores
    3. un-block and drop the padding

    Band form (decoding: T new queries over S stored keys): dense attention with the
    (T, S) band mask of those positions; the same function, O(T S) memory.
    """
    B, H, T, _ = Q.shape
    S = K.shape[-2]
    M = int(block)
    keys = _key_padding(mask, B, S)  # (B, S) or None
    if T != S or offset:
        band = band_mask(T, M, S, offset)[None, None]  # (1, 1, T, S)
        if keys is not None:
            band = band & keys[:, None, None, :]
        O, cache = attention_forward(Q, K, V, band, p_drop, rng)
        return O, LocalAttentionCache(cache, None, M)
    nb = -(-T // M)
    Qb = _blocks(Q, M, nb)  # (B, H, nb, M, Dh)
    Kwin = _window(_blocks(K, M, nb))  # (B, H, nb, 2M, Dh)
    Vwin = _window(_blocks(V, M, nb))  # (B, H, nb, 2M, Dv)
    m = local_mask(T, M, keys, B)  # (B|1, 1, nb, M, 2M)
    Ob, cache = attention_forward(Qb, Kwin, Vwin, m, p_drop, rng)  # (B, H, nb, M, Dv)
    O = Ob.reshape(B, H, nb * M, -1)[:, :, :T]  # (B, H, L, Dv)
    return O, LocalAttentionCache(cache, T, M)


def local_attention_backward(dO, cache: LocalAttentionCache):
    """Reverse of the forward. Blocked form:

    3. ``dOb``: dO zero-padded and blocked
    2. ``dQb, dKwin, dVwin = attention_backward(dOb)``
    1. fold the windows back (``_window_backward``: ``dK_b = dKwin_b[M:] + dKwin_{b+1}[:M]``),
       un-block, drop the padding

    Band form: the dense op's backward. Returns ``(dQ, dK, dV)``.
    """
    if cache.L is None:
        return attention_backward(dO, cache.attention)
    B, H = dO.shape[:2]
    L, M = cache.L, cache.M
    nb = -(-L // M)
    dQb, dKwin, dVwin = attention_backward(_blocks(dO, M, nb), cache.attention)

    def unblock(Xb):
        return Xb.reshape(B, H, nb * M, -1)[:, :, :L]  # (B, H, L, D)

    return unblock(dQb), unblock(_window_backward(dKwin, M)), unblock(_window_backward(dVwin, M))


__all__ = [
    "LocalAttentionCache",
    "band_mask",
    "local_attention_backward",
    "local_attention_forward",
    "local_mask",
]
