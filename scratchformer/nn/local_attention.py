"""Masked local block self-attention (Image Transformer 1-D) as a module.

``LocalMultiHeadAttention`` keeps ``MultiHeadAttention``'s projections, heads and
``W_o`` and replaces the attention core: the queries of block ``b`` (of ``block``
positions) see the keys of blocks ``b-1`` and ``b``, causally. No parameters of its own.

Decoding keeps only the last ``2 * block`` keys/values per row, in a ring buffer: the
key of position ``p`` lives in slot ``p % (2 * block)``, and the query at position ``p``
sees the slots holding positions ``max(0, (p // block - 1) * block) .. p``.

Dimension key: ``B`` batch, ``T`` new positions, ``D`` d_model, ``H`` heads, ``Dh`` d_k,
``Dv`` d_v, ``M`` block, ``W = 2M`` ring slots, ``R`` decoding rows.
"""

from __future__ import annotations

from scratchformer import backend
from scratchformer.backend import xp
from scratchformer.nn.attention import MultiHeadAttention
from scratchformer.ops.attention import attention_forward
from scratchformer.ops.local_attention import local_attention_backward, local_attention_forward


class LocalMultiHeadAttention(MultiHeadAttention):
    """Self-attention over the current and the previous block of ``block`` positions."""

    def __init__(self, d_model, h, d_k=None, d_v=None, P_drop_attn=0.0, rng=None, block=64):
        super().__init__(d_model, h, d_k, d_v, P_drop_attn, rng or backend.host_rng(0))
        if int(block) < 1:
            raise ValueError(f"local block size must be >= 1, got {block}")
        self.block = int(block)

    def attend(self, Q, K, V, mask=None, rng=None, offset: int = 0):
        """Whole sequences only (queries and keys of one length, positions from 0):
        ``mask`` is read as key padding (ops.local_attention.key_padding), the causal
        band is built inside. Decoding goes through ``step``."""
        if offset:
            raise ValueError("local attention decodes through step(), not at an offset")
        return local_attention_forward(Q, K, V, self.block, mask, self.P_drop_attn, rng)

    def attend_backward(self, dO, cache):
        return local_attention_backward(dO, cache)

    # -- decoding: a ring buffer of the last 2 blocks ------------------------------------
    def kv_slots(self, capacity: int) -> int:
        """Key/value slots a decoding row needs: 2 blocks, whatever the length."""
        return 2 * self.block

    def step(self, x_new, lkv, length: int):
        """x_new (R, T, D) at positions ``length .. length + T - 1``  ->  (R, T, D).

        One position at a time (a later position would overwrite a ring slot that an
        earlier query of the same block still needs): dense attention of that query over
        the ring, masked to the slots its band can see.
        """
        T = x_new.shape[1]
        W = lkv.self_k.shape[2]  # 2M ring slots
        M = self.block
        Q, _ = self._project(x_new, "W_q")  # (R, H, T, Dh)
        K_new, V_new = self.project_kv(x_new)  # (R, H, T, Dh), (R, H, T, Dv)
        slots = xp.arange(W)
        outs = []
        for t in range(T):
            p = length + t
            lkv.self_k[:, :, p % W] = K_new[:, :, t]
            lkv.self_v[:, :, p % W] = V_new[:, :, t]
            pos = p - (p - slots) % W  # (W,) the position each slot holds (< 0: empty)
            visible = pos >= max(0, (p // M - 1) * M)  # (W,)
            O_t, _ = attention_forward(Q[:, :, t : t + 1], lkv.self_k, lkv.self_v, visible)
            outs.append(O_t)  # (R, H, 1, Dv)
        return self._output(xp.concatenate(outs, axis=2))[0]  # (R, H, T, Dv) -> (R, T, D)


__all__ = ["LocalMultiHeadAttention"]
