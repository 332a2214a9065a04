"""Masked local block self-attention (Image Transformer 1-D) as a module.

``LocalMultiHeadAttention`` keeps ``MultiHeadAttention``'s projections, heads and
``W_o`` and replaces the per-head attention with ops/local_attention.py: the queries of
block ``b`` (of ``local_block`` positions) see the keys of blocks ``b-1`` and ``b``,
causally. No parameters of its own. Decoding at an offset (queries at positions
``offset ..`` over the stored keys) is the same function, through the band mask.

Dimension key: ``B`` batch, ``T`` queries, ``S`` keys, ``D`` d_model, ``H`` heads,
``Dh`` d_k, ``Dv`` d_v.
"""

from __future__ import annotations

from scratchformer import backend, kernels
from scratchformer.nn.attention import MultiHeadAttention, register_attention


@register_attention
class LocalMultiHeadAttention(MultiHeadAttention):
    """Self-attention over the current and the previous block of ``local_block``
    positions; causal only (the band is causal by construction)."""

    kind = "local"
    causal_only = True
    config_keys = ("local_block",)
    blockwise = False

    def __init__(self, d_model, h, d_k=None, d_v=None, P_drop_attn=0.0, rng=None,
                 causal: bool = True, local_block: int = 64):  # fmt: skip
        super().__init__(d_model, h, d_k, d_v, P_drop_attn, rng or backend.host_rng(0), causal)
        if int(local_block) < 1:
            raise ValueError(f"local block size must be >= 1, got {local_block}")
        self.local_block = int(local_block)

    def attend(self, Q, K, V, mask=None, rng=None, offset: int = 0):
        """``mask`` is key padding, bool broadcastable to (B, 1, 1, S) (True at real
        keys), or None: the causal band is built inside (ops/local_attention.py)."""
        return kernels.local_attention.forward(
            Q, K, V, self.local_block, mask, self.P_drop_attn, rng, offset
        )

    def attend_backward(self, dO, cache):
        return kernels.local_attention.backward(dO, cache)


__all__ = ["LocalMultiHeadAttention"]
