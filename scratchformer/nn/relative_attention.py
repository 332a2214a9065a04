"""Relative position self-attention modules: Shaw et al. and the Music Transformer skew.

Both keep ``MultiHeadAttention``'s projections, heads and ``W_o`` and replace only the
attention core (``attend`` / ``attend_backward``) and the inference path (``infer`` with
the query positions, ``step`` for incremental decoding).

    RelativeMultiHeadAttention   Shaw: ``E_k``, ``E_v`` (2k+1, Dh|Dv), shared by the heads
    SkewMultiHeadAttention       Music Transformer: ``E_r`` (H, k+1, Dh), one per head,
                                 causal only (decoder / language model self-attention)

Dimension key: ``B`` batch, ``T`` queries, ``S`` keys, ``D`` d_model, ``H`` heads,
``Dh`` d_k, ``Dv`` d_v, ``k`` max_relative_position, ``R`` decoding rows, ``C`` capacity.
"""

from __future__ import annotations

from scratchformer import backend
from scratchformer.nn.attention import MultiHeadAttention, merge_heads, split_heads
from scratchformer.nn.module import normal
from scratchformer.ops.relative_attention import (
    distance_index,
    gather_relative,
    shaw_attention_backward,
    shaw_attention_forward,
    skew_attention_backward,
    skew_attention_forward,
)
from scratchformer.ops.softmax import softmax_forward


def _project_q(mha: MultiHeadAttention, x_q):
    """x_q (B, T, D)  ->  Q (B, H, T, Dh), inference only."""
    return split_heads(x_q @ mha.params["W_q"], mha.h)


class RelativeMultiHeadAttention(MultiHeadAttention):
    """Shaw et al. (2018): relative distances clipped to +-k, learned key and value
    embeddings ``E_k`` (2k+1, Dh) and ``E_v`` (2k+1, Dv), shared by the heads.

    Works for any mask (encoder, decoder, language model). ``infer``/``step`` take the
    position of the first query (``offset``); keys are at positions 0 .. S-1.
    """

    causal_only = False

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

    def attend(self, Q, K, V, mask=None, rng=None):
        p = self.params
        return shaw_attention_forward(Q, K, V, p["E_k"], p["E_v"], mask, self.P_drop_attn, rng)

    def attend_backward(self, dO, cache):
        dQ, dK, dV, dE_k, dE_v = shaw_attention_backward(dO, cache)
        self.grads["E_k"] += dE_k
        self.grads["E_v"] += dE_v
        return dQ, dK, dV

    def infer(self, x_q, K, V, mask=None, offset: int = 0):
        """As ``MultiHeadAttention.infer``, with query ``t`` at position ``offset + t``."""
        p = self.params
        Q = _project_q(self, x_q)  # (B, H, T, Dh)
        O, _ = shaw_attention_forward(Q, K, V, p["E_k"], p["E_v"], mask, offset=offset)
        return merge_heads(O) @ p["W_o"]  # (B, T, D)

    def step(self, a_in, lkv, length: int):
        """Incremental self-attention of a_in (R, T, D) at positions ``length ..``."""
        K, V, mask = self.append_kv(a_in, lkv, length)
        return self.infer(a_in, K, V, mask, offset=length)


class SkewMultiHeadAttention(MultiHeadAttention):
    """Music Transformer relative attention (Huang et al., 2018) with the skew trick.

    ``Z = s (Q K^T + Skew(Q Er_L^T))``: one learned ``E_r`` (H, k+1, Dh) per layer, row d
    for the distance i - j = d (clipped to k). Causal only: ``attend`` needs the causal
    mask. Decoding uses the same math without the skew: one new query against the
    stored keys reads its relative logits by a gather (``distance_index``).
    """

    causal_only = True

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

    def attend(self, Q, K, V, mask=None, rng=None):
        return skew_attention_forward(Q, K, V, self.params["E_r"], mask, self.P_drop_attn, rng)

    def attend_backward(self, dO, cache):
        dQ, dK, dV, dE_r = skew_attention_backward(dO, cache)
        self.grads["E_r"] += dE_r
        return dQ, dK, dV

    def infer(self, x_q, K, V, mask=None, offset: int = 0):
        """Queries at ``offset ..`` over keys at ``0 .. S-1``, no skew (a gather instead).

        The caller's mask must hide keys after each query (one query at the end of the
        stored keys needs none)."""
        p = self.params
        Q = _project_q(self, x_q)  # (B, H, T, Dh)
        T, S = Q.shape[-2], K.shape[-2]
        scale = 1.0 / self.d_k**0.5
        rel = Q @ p["E_r"].swapaxes(-1, -2)  # (B, H, T, k+1)
        idx = distance_index(T, S, self.max_relative_position, offset)  # (T, S)
        scores = (Q @ K.swapaxes(-1, -2) + gather_relative(rel, idx)) * scale  # (B, H, T, S)
        A, _ = softmax_forward(scores, mask)
        return merge_heads(A @ V) @ p["W_o"]  # (B, T, D)

    def step(self, a_in, lkv, length: int):
        K, V, mask = self.append_kv(a_in, lkv, length)
        return self.infer(a_in, K, V, mask, offset=length)


__all__ = ["RelativeMultiHeadAttention", "SkewMultiHeadAttention"]
