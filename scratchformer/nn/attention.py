"""Multi-head attention (section 3.2.2): self-attention and encoder-decoder attention.

    head_i = Attention(x_q W_q^i, x_kv W_k^i, x_kv W_v^i)
    MultiHead(x_q, x_kv) = Concat(head_1, ..., head_h) W_o

The per-head matrices are stored side by side: ``W_q`` (D, H*Dh), ``W_k`` (D, H*Dh),
``W_v`` (D, H*Dv), ``W_o`` (H*Dv, D); a reshape splits the heads, so there is no Python
loop over heads. No biases, as in the paper's equations.

Dimension key: ``B`` batch, ``T`` queries, ``S`` keys, ``D`` d_model, ``H`` heads,
``Dh`` d_k, ``Dv`` d_v.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from scratchformer import backend
from scratchformer.nn.module import Module, xavier_uniform
from scratchformer.ops.attention import AttentionCache, attention_backward, attention_forward
from scratchformer.ops.linear import LinearCache, linear_backward, linear_forward
from scratchformer.ops.softmax import softmax_forward


class MultiHeadAttentionCache(NamedTuple):
    q_proj: LinearCache  # x_q (B, T, D) @ W_q
    k_proj: LinearCache  # x_kv (B, S, D) @ W_k
    v_proj: LinearCache  # x_kv (B, S, D) @ W_v
    attn: AttentionCache  # per-head attention, Q (B, H, T, Dh) ...
    o_proj: LinearCache  # concatenated heads (B, T, H*Dv) @ W_o


def split_heads(x, h: int):
    """(B, T, H*Dh) -> (B, H, T, Dh)."""
    B, T, HD = x.shape
    return x.reshape(B, T, h, HD // h).transpose(0, 2, 1, 3)


def merge_heads(x):
    """(B, H, T, Dh) -> (B, T, H*Dh); the inverse of ``split_heads``."""
    B, H, T, Dh = x.shape
    return x.transpose(0, 2, 1, 3).reshape(B, T, H * Dh)


class MultiHeadAttention(Module):
    """Parameters ``W_q W_k W_v W_o``; d_k = d_v = d_model / h unless given (Table 3 A, B)."""

    def __init__(self, d_model, h, d_k=None, d_v=None, p_attn_drop=0.0, rng=None):
        super().__init__()
        if d_k is None and d_model % h:
            raise ValueError(f"d_model={d_model} is not divisible by h={h}: give d_k explicitly")
        rng = rng or backend.host_rng(0)
        self.h = h
        self.d_k = d_model // h if d_k is None else d_k
        self.d_v = d_model // h if d_v is None else d_v
        self.p_attn_drop = p_attn_drop
        self.add_parameter("W_q", xavier_uniform(rng, d_model, h * self.d_k))
        self.add_parameter("W_k", xavier_uniform(rng, d_model, h * self.d_k))
        self.add_parameter("W_v", xavier_uniform(rng, d_model, h * self.d_v))
        self.add_parameter("W_o", xavier_uniform(rng, h * self.d_v, d_model))

    def forward(self, x_q, x_kv, mask=None, rng=None):
        """x_q (B, T, D), x_kv (B, S, D), mask bool broadcastable to (B, H, T, S)  ->  (B, T, D).

        Self-attention passes the same array as ``x_q`` and ``x_kv``.
        """
        p = self.params
        q, c_q = linear_forward(x_q, p["W_q"])  # (B, T, H*Dh)
        k, c_k = linear_forward(x_kv, p["W_k"])  # (B, S, H*Dh)
        v, c_v = linear_forward(x_kv, p["W_v"])  # (B, S, H*Dv)
        Q, K, V = split_heads(q, self.h), split_heads(k, self.h), split_heads(v, self.h)
        O, c_attn = self.attend(Q, K, V, mask, rng)  # (B, H, T, Dv)
        out, c_o = linear_forward(merge_heads(O), p["W_o"])  # (B, T, D)
        return out, MultiHeadAttentionCache(c_q, c_k, c_v, c_attn, c_o)

    def backward(self, dout, cache: MultiHeadAttentionCache):
        """Returns ``(dx_q, dx_kv)``; for self-attention the caller adds the two."""
        g = self.grads
        dO_merged, dW_o, _ = linear_backward(dout, cache.o_proj)  # (B, T, H*Dv)
        dQ, dK, dV = self.attend_backward(split_heads(dO_merged, self.h), cache.attn)
        dx_q, dW_q, _ = linear_backward(merge_heads(dQ), cache.q_proj)
        dx_k, dW_k, _ = linear_backward(merge_heads(dK), cache.k_proj)
        dx_v, dW_v, _ = linear_backward(merge_heads(dV), cache.v_proj)
        g["W_o"] += dW_o
        g["W_q"] += dW_q
        g["W_k"] += dW_k
        g["W_v"] += dW_v
        return dx_q, dx_k + dx_v

    # -- the attention core: what variants (relative, local) replace -------------------
    def attend(self, Q, K, V, mask=None, rng=None):
        """The per-head attention core between the projections: scaled dot-product
        attention here. Q (B, H, T, Dh), K (B, H, S, Dh), V (B, H, S, Dv) -> (B, H, T, Dv).

        Subclasses (relative positions, local blocks) override ``attend`` and
        ``attend_backward`` and keep the projections, heads and ``W_o`` as they are.
        """
        return attention_forward(Q, K, V, mask, self.p_attn_drop, rng)

    def attend_backward(self, dO, cache):
        """Returns ``(dQ, dK, dV)``; a subclass with parameters of its own adds into
        ``self.grads`` here."""
        return attention_backward(dO, cache)

    # -- inference (decoding): no dropout, no backward caches ---------------------------
    def project_kv(self, x_kv):
        """The keys and values of ``x_kv``, split into heads, for ``infer``.

        x_kv (B, S, D)  ->  K (B, H, S, Dh), V (B, H, S, Dv).

        Decoding calls this once per new target position (self-attention, appended to
        the kv) and once per sentence for the encoder output (cross-attention).
        """
        p = self.params
        K = split_heads(x_kv @ p["W_k"], self.h)  # (B, H, S, Dh)
        V = split_heads(x_kv @ p["W_v"], self.h)  # (B, H, S, Dv)
        return K, V

    def infer(self, x_q, K, V, mask=None):
        """Attention of the queries of ``x_q`` over given keys and values, inference only.

        ``softmax(Q K^T / sqrt(Dh), mask) V W_o`` with ``Q = split(x_q W_q)``: the same
        math as ``forward`` with dropout off, but keys/values come from the caller (the
        decoding kv) and nothing is kept for a backward pass.

        x_q (B, T, D), K (B, H, S, Dh), V (B, H, S, Dv), mask bool broadcastable to
        (B, H, T, S)  ->  (B, T, D).
        """
        Q = split_heads(x_q @ self.params["W_q"], self.h)  # (B, H, T, Dh)
        scores = (Q @ K.swapaxes(-1, -2)) * (1.0 / math.sqrt(self.d_k))  # (B, H, T, S)
        A, _ = softmax_forward(scores, mask)  # the SoftmaxCache is only A itself
        return merge_heads(A @ V) @ self.params["W_o"]  # (B, T, H*Dv) -> (B, T, D)
