"""Masked local block self-attention (Image Transformer, 1-D): its re-indexings.

The sequence is cut into blocks of ``M`` positions (the last one padded). The queries
of block ``b`` attend to the keys of blocks ``b-1`` and ``b`` only, causally, as in
tensor2tensor's ``masked_local_attention_1d``:

    key j is visible from query i  <=>  j <= i  and  j // M >= i // M - 1  (and j real)

Each block sees a window of ``2M`` keys, so scores are (nb, M, 2M) per head: memory
O(L * M) instead of the O(L^2) of dense attention. With ``window(X)[b] = [X_{b-1}; X_b]``
(X_{-1} = 0):

    O_b = attention(Q_b, window(K)_b, window(V)_b, band_b)

that is, the paper's logits and the attention core on the blocked tensors: the module
(nn/local_attention.py) calls them through their tables around these re-indexings,
so nothing of the attention is written again. Backward: the attention's backward on the
blocks, then ``window``'s adjoint folds the window gradient back:
``dK_b = dKwin_b[M:] + dKwin_{b+1}[:M]``. Queries that do not line up with the keys
(decoding at an offset) use dense attention with the band as its mask (``band_mask``).

Dimension key: ``B`` batch, ``H`` heads, ``L`` length, ``M`` block size,
``nb = ceil(L / M)`` blocks, ``W = 2M`` window, ``D`` any feature width.
Derivation: docs/derivations.md#local-block-attention.
"""

from __future__ import annotations

from scratchformer.engine.backend import xp


def band_mask(T: int, M: int, S: int | None = None, offset: int = 0):
    """The (T, S) bool band of local attention for queries at positions ``offset ..``
    over keys ``0 .. S-1``: key j visible from query i iff ``j <= p_i`` and
    ``j // M >= p_i // M - 1`` (``p_i = offset + i``): causal, at most one block back."""
    S = T if S is None else S
    p = xp.arange(T)[:, None] + offset
    j = xp.arange(S)[None, :]
    return (j <= p) & (j // M >= p // M - 1)


def window_forward(Xb):
    """Xb (..., nb, M, D)  ->  (..., nb, 2M, D): each block preceded by the block before
    (zeros before block 0)."""
    prev = xp.zeros_like(Xb)
    prev[..., 1:, :, :] = Xb[..., :-1, :, :]
    return xp.concatenate([prev, Xb], axis=-2)


def window_backward(dXwin, M: int):
    """The adjoint of ``window_forward``: (..., nb, 2M, D) -> (..., nb, M, D)."""
    dXb = dXwin[..., M:, :].copy()
    dXb[..., :-1, :, :] += dXwin[..., 1:, :M, :]
    return dXb


def blocks(X, M: int):
    """(B, H, L, D) -> zero-padded (B, H, nb, M, D), nb = ceil(L / M)."""
    B, H, L, D = X.shape
    nb = -(-L // M)
    pad = nb * M - L
    if pad:
        X = xp.concatenate([X, xp.zeros((B, H, pad, D), dtype=X.dtype)], axis=2)
    return X.reshape(B, H, nb, M, D)


def unblock(Xb, L: int):
    """The inverse of ``blocks`` (and its adjoint): (B, H, nb, M, D) -> (B, H, L, D)."""
    B, H, nb, M, D = Xb.shape
    return Xb.reshape(B, H, nb * M, D)[:, :, :L]


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
        kwin = window_forward(kp.reshape(-1, nb, M, 1))[..., 0]  # (B, nb, 2M)
        m = m & kwin[:, None, :, None, :]
    return m


def key_padding(mask, B: int, S: int):
    """A key-padding mask broadcastable to (B, 1, 1, S) as (B, S) bool, or None."""
    if mask is None:
        return None
    if mask.ndim >= 2 and mask.shape[-2] != 1:
        raise ValueError(
            f"local attention takes a key-padding mask (B, 1, 1, S), not {tuple(mask.shape)}: "
            "it builds its causal band itself"
        )
    return xp.broadcast_to(mask, (B, 1, 1, S))[:, 0, 0, :]


__all__ = [
    "band_mask",
    "blocks",
    "key_padding",
    "local_mask",
    "unblock",
    "window_backward",
    "window_forward",
]
