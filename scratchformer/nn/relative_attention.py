"""Relative position self-attention modules: Shaw et al. and the Music Transformer skew.

Both keep ``MultiHeadAttention``'s projections, heads and ``W_o`` and replace only the
attention core (``attend`` / ``attend_backward``), which takes the position of the first
query (``offset``) so that ``infer`` and ``step`` (incremental decoding) reuse it.

    RelativeMultiHeadAttention   Shaw: ``E_k``, ``E_v`` (2k+1, Dh|Dv), shared by the heads
    SkewMultiHeadAttention       Music Transformer: ``E_r`` (H, k+1, Dh), one per head,
                                 causal only (decoder / language model self-attention)

Dimension key: ``B`` batch, ``T`` queries, ``S`` keys, ``D`` d_model, ``H`` heads,
``Dh`` d_k, ``Dv`` d_v, ``k`` max_relative_position, ``R`` decoding rows, ``C`` capacity.
"""

from __future__ import annotations

from scratchformer import backend
from scratchformer.nn.attention import MultiHeadAttention
from scratchformer.nn.module import normal
from scratchformer.ops.relative_attention import (
    shaw_attention_backward,
    shaw_attention_forward,
    skew_attention_backward,
    skew_attention_forward,
)


class RelativeMultiHeadAttention(MultiHeadAttention):
    """Shaw et al. (2018): relative distances clipped to +-k, learned key and value
    embeddings ``E_k`` (2k+1, Dh) and ``E_v`` (2k+1, Dv), shared by the heads.

    Works for any mask (encoder, decoder, language model). Queries sit at positions
    ``offset ..``, keys at 0 .. S-1.
    """

    def __init__(
        self,
        d_model,
        h,
        d_k=None,
        d_v=None,
        P_drop_attn=0.0,
        rng=None,
        max_relative_position: int = 16,
    ):
        rng = rng or backend.host_rng(0)
        super().__init__(d_model, h, d_k, d_v, P_drop_attn, rng)
        k = int(max_relative_position)
        if k < 1:
            raise ValueError(f"max_relative_position must be >= 1, got {k}")
        self.max_relative_position = k
        self.add_parameter("E_k", normal(rng, self.d_k**-0.5, (2 * k + 1, self.d_k)))
        self.add_parameter("E_v", normal(rng, self.d_v**-0.5, (2 * k + 1, self.d_v)))

    def attend(self, Q, K, V, mask=None, rng=None, offset: int = 0):
        p = self.params
        return shaw_attention_forward(
            Q, K, V, p["E_k"], p["E_v"], mask, self.P_drop_attn, rng, offset
        )

    def attend_backward(self, dO, cache):
        dQ, dK, dV, dE_k, dE_v = shaw_attention_backward(dO, cache)
        self.grads["E_k"] += dE_k
        self.grads["E_v"] += dE_v
        return dQ, dK, dV


class SkewMultiHeadAttention(MultiHeadAttention):
    """Music Transformer relative attention (Huang et al., 2018) with the skew trick.

    ``Z = s (Q K^T + Skew(Q Er_L^T))``: one learned ``E_r`` (H, k+1, Dh) per layer, row d
    for the distance i - j = d (clipped to k). Causal only: ``attend`` needs the causal
    mask. Queries that do not line up with the keys (decoding: ``offset`` > 0 or fewer
    queries than keys) read their relative logits by a gather instead of the skew
    (``ops.relative_attention.skew_attention_forward``).
    """

    def __init__(
        self,
        d_model,
        h,
        d_k=None,
        d_v=None,
        P_drop_attn=0.0,
        rng=None,
        max_relative_position: int = 16,
    ):
        rng = rng or backend.host_rng(0)
        super().__init__(d_model, h, d_k, d_v, P_drop_attn, rng)
        k = int(max_relative_position)
        if k < 1:
            raise ValueError(f"max_relative_position must be >= 1, got {k}")
        self.max_relative_position = k
        self.add_parameter("E_r", normal(rng, self.d_k**-0.5, (h, k + 1, self.d_k)))

    def attend(self, Q, K, V, mask=None, rng=None, offset: int = 0):
        E_r = self.params["E_r"]
        return skew_attention_forward(Q, K, V, E_r, mask, self.P_drop_attn, rng, offset)

    def attend_backward(self, dO, cache):
        dQ, dK, dV, dE_r = skew_attention_backward(dO, cache)
        self.grads["E_r"] += dE_r
        return dQ, dK, dV


__all__ = ["RelativeMultiHeadAttention", "SkewMultiHeadAttention"]
