"""Relative position self-attention modules: Shaw et al. and the Music Transformer skew.

Both keep ``MultiHeadAttention``'s projections, heads and ``W_o``, and its attention
core; each writes only its own logits (and Shaw its value term), from the pairs of
ops/relative_attention.py through their tables. The logits take the position of the
first query (``offset``), so that ``infer`` and ``step`` (incremental decoding) and
memory-efficient attention's blocks of queries reuse them.

    RelativeMultiHeadAttention   Shaw: ``E_k``, ``E_v`` (2k+1, Dh|Dv), shared by the heads
    SkewMultiHeadAttention       Music Transformer: ``E_r`` (H, k+1, Dh), one per head,
                                 causal only (decoder / language model self-attention)

Dimension key: ``B`` batch, ``T`` queries, ``S`` keys, ``D`` d_model, ``H`` heads,
``Dh`` d_k, ``Dv`` d_v, ``k`` max_relative_position.
"""

from __future__ import annotations

from scratchformer.engine import backend
from scratchformer.engine.nn.attention import MultiHeadAttention, register_attention
from scratchformer.engine.nn.module import normal
from scratchformer.engine.ops.attention import attention_core
from scratchformer.engine.ops.relative_attention import shaw_logits, shaw_values, skew_logits


class RelativeAttentionBase(MultiHeadAttention):
    """What both relative variants share: the largest distance ``k``
    (``max_relative_position``, a config key) and their learned tables of relative
    embeddings, declared by each variant as ``tables(k) -> {name: (scale, shape)}`` and
    drawn from ``N(0, scale^2)`` in that order."""

    config_keys = ("max_relative_position",)

    def __init__(self, d_model, h, d_k=None, d_v=None, P_drop_attn=0.0, rng=None,
                 causal: bool | None = None, max_relative_position: int = 16,
                 bias: bool = False):
        rng = rng or backend.host_rng(0)
        causal = self.causal_only if causal is None else causal
        super().__init__(d_model, h, d_k, d_v, P_drop_attn, rng, causal, bias)
        k = int(max_relative_position)
        if k < 1:
            raise ValueError(f"max_relative_position must be >= 1, got {k}")
        self.max_relative_position = k
        for name, (scale, shape) in self.tables(k).items():
            self.add_parameter(name, normal(rng, scale, shape))

    def tables(self, k: int) -> dict:
        raise NotImplementedError


@register_attention
class RelativeMultiHeadAttention(RelativeAttentionBase):
    """Shaw et al. (2018): relative distances clipped to +-k, learned key and value
    embeddings ``E_k`` (2k+1, Dh) and ``E_v`` (2k+1, Dv), shared by the heads.

    ``Z = s (Q K^T + gather(Q E_k^T, idx))``; ``O = A' V + scatter(A', idx) E_v``.
    Works for any mask (encoder, decoder, language model). Queries sit at positions
    ``offset ..``, keys at 0 .. S-1.
    """

    kind = "relative"

    def tables(self, k: int) -> dict:
        return {"E_k": (self.d_k**-0.5, (2 * k + 1, self.d_k)),
                "E_v": (self.d_v**-0.5, (2 * k + 1, self.d_v))}

    def logits(self, Q, K, offset: int = 0):
        return shaw_logits.forward(Q, K, self.params["E_k"], offset)

    def logits_backward(self, dZ, cache):
        dQ, dK, dE_k = shaw_logits.backward(dZ, cache)
        self.grads["E_k"] += dE_k
        return dQ, dK

    def values(self, O, core, logits_cache):
        A_drop = attention_core.read(core, "dropped_weights")  # (B, H, T, S)
        idx = shaw_logits.read(logits_cache, "idx")  # (T, S)
        return shaw_values.forward(O, A_drop, self.params["E_v"], idx)

    def values_backward(self, dO, cache):
        dA_drop, dE_v = shaw_values.backward(dO, cache)
        self.grads["E_v"] += dE_v
        return dA_drop


@register_attention
class SkewMultiHeadAttention(RelativeAttentionBase):
    """Music Transformer relative attention (Huang et al., 2018) with the skew trick.

    ``Z = s (Q K^T + Skew(Q Er_L^T))``: one learned ``E_r`` (H, k+1, Dh) per layer, row d
    for the distance i - j = d (clipped to k). Causal only: above the diagonal the skew
    leaves other rows' entries, which the causal mask removes. Queries that do not line
    up with the keys (decoding: ``offset`` > 0 or fewer queries than keys) read their
    relative logits by a gather instead of the skew (``skew_logits_forward``).
    """

    kind = "relative_skew"
    causal_only = True

    def tables(self, k: int) -> dict:
        return {"E_r": (self.d_k**-0.5, (self.h, k + 1, self.d_k))}

    def logits(self, Q, K, offset: int = 0):
        return skew_logits.forward(Q, K, self.params["E_r"], offset)

    def logits_backward(self, dZ, cache):
        dQ, dK, dE_r = skew_logits.backward(dZ, cache)
        self.grads["E_r"] += dE_r
        return dQ, dK


__all__ = ["RelativeMultiHeadAttention", "SkewMultiHeadAttention"]
