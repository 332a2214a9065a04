"""Masked local block self-attention (Image Transformer 1-D) as a module.

``LocalMultiHeadAttention`` keeps ``MultiHeadAttention``'s projections, heads, ``W_o``,
logits and attention core, and changes only the shape the core sees: the queries of
block ``b`` (of ``local_block`` positions) attend to a window of the keys of blocks
``b-1`` and ``b``, causally (the re-indexings are ops/local_attention.py's):

    1. ``Qb = blocks(Q)``, ``Kwin = window(blocks(K))``, ``Vwin = window(blocks(V))``
    2. ``Ob = attend(Qb, Kwin, Vwin, band)``: the paper's logits and the attention core
       on (B, H, nb, M, 2M) scores, through their tables
    3. ``O = unblock(Ob)``

Backward: the same steps in reverse, ``window``'s adjoint folding each window's
gradient back onto its two blocks. No parameters of its own. Decoding at an offset
(queries at positions ``offset ..`` over the stored keys) is the same function, through
the band mask on the dense (T, S) scores.

Dimension key: ``B`` batch, ``T`` queries, ``S`` keys, ``L`` length, ``D`` d_model, ``H``
heads, ``Dh`` d_k, ``Dv`` d_v, ``M`` block, ``nb`` blocks.
"""

from __future__ import annotations

from typing import NamedTuple

from scratchformer.engine import backend
from scratchformer.engine.nn.attention import MultiHeadAttention, register_attention
from scratchformer.engine.ops.local_attention import (
    band_mask,
    blocks,
    key_padding,
    local_mask,
    unblock,
    window_backward,
    window_forward,
)


class LocalAttendCache(NamedTuple):
    attend: object  # the blocked attention's cache (an AttendCache on the blocks)
    L: int  # the unpadded length


@register_attention
class LocalMultiHeadAttention(MultiHeadAttention):
    """Self-attention over the current and the previous block of ``local_block``
    positions; causal only (the band is causal by construction)."""

    kind = "local"
    causal_only = True
    config_keys = ("local_block",)
    blockwise = False

    def __init__(self, d_model, h, d_k=None, d_v=None, P_drop_attn=0.0, rng=None,
                 causal: bool = True, local_block: int = 64, bias: bool = False):
        rng = rng or backend.host_rng(0)
        super().__init__(d_model, h, d_k, d_v, P_drop_attn, rng, causal, bias)
        if int(local_block) < 1:
            raise ValueError(f"local block size must be >= 1, got {local_block}")
        self.local_block = int(local_block)

    def attend(self, Q, K, V, mask=None, rng=None, offset: int = 0):
        """``mask`` is key padding, bool broadcastable to (B, 1, 1, S) (True at real
        keys), or None: the causal band is built here. Q (B, H, T, Dh) at positions
        ``offset ..``, K (B, H, S, Dh), V (B, H, S, Dv)  ->  (B, H, T, Dv)."""
        B, _, T, _ = Q.shape
        S = K.shape[-2]
        M = self.local_block
        keys = key_padding(mask, B, S)  # (B, S) or None
        if T != S or offset:  # decoding: the band on the dense scores
            band = band_mask(T, M, S, offset)[None, None]  # (1, 1, T, S)
            if keys is not None:
                band = band & keys[:, None, None, :]
            return self.attend_masked(Q, K, V, band, rng, offset)
        Qb = blocks(Q, M)  # (B, H, nb, M, Dh)
        Kwin = window_forward(blocks(K, M))  # (B, H, nb, 2M, Dh)
        Vwin = window_forward(blocks(V, M))  # (B, H, nb, 2M, Dv)
        Ob, cache = self.attend_masked(Qb, Kwin, Vwin, local_mask(T, M, keys, B), rng)
        return unblock(Ob, T), LocalAttendCache(cache, T)  # (B, H, L, Dv)

    def attend_backward(self, dO, cache):
        """3. ``dOb = blocks(dO)``  2. the blocked attention's backward  1. the windows
        folded back (``window_backward``), un-blocked."""
        if not isinstance(cache, LocalAttendCache):  # the band form
            return super().attend_backward(dO, cache)
        M = self.local_block
        dQb, dKwin, dVwin = super().attend_backward(blocks(dO, M), cache.attend)
        dK = unblock(window_backward(dKwin, M), cache.L)
        dV = unblock(window_backward(dVwin, M), cache.L)
        return unblock(dQb, cache.L), dK, dV

    def weights(self, cache):
        """Local attention keeps its weights per block: no (T, S) map."""
        return None


__all__ = ["LocalAttendCache", "LocalMultiHeadAttention"]
