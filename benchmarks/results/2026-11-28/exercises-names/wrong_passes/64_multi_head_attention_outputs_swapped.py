# ruff: noqa
"""Exercise multi_head_attention: the backward pass of multi-head attention. Write ``multi_head_attention_backward`` below.

Section 3.2.2: the queries, keys and values are projected (W_q, W_k, W_v, every head's
side by side), split into h heads, attended head by head, the heads merged back and
projected by W_o:

    head_i = Attention(x_q W_q^i, x_kv W_k^i, x_kv W_v^i)
    MultiHead(x_q, x_kv) = Concat(head_1, ..., head_h) W_o

    scratchformer exercise check multi_head_attention      grade it
    scratchformer exercise hint multi_head_attention       the next hint
    scratchformer exercise solution multi_head_attention   the engine's code, derivation

The derivation: docs/derivations.md#multi-head-attention (on the docs site: derivations.html#multi-head-attention).
What you write becomes MultiHeadAttention.backward while it is checked or trains: ``self`` is
the module, with its parameters in self.params and their gradients in
self.grads (ADD into them: +=), its sub-modules as attributes. The forward is
shown as the engine has it; the checker runs the engine's forward and compares
every input and parameter gradient with float64 central differences on these
inputs:
    cross-attention: T 4, S 7, H 2, d_k 3, d_v 5, source padding
    causal self-attention: T = S = 5, attention dropout 0.2
"""

from __future__ import annotations

from scratchformer.engine.nn.attention import MultiHeadAttentionCache, merge_heads, split_heads
from scratchformer.engine.ops.linear import linear

EXERCISE = "multi_head_attention"


# -- given: the forward pass, as in the engine (for reading; not run from here) ------------
def multi_head_attention_forward(self, x_q, x_kv, mask=None, rng=None):
    """x_q (B, T, D), x_kv (B, S, D), mask bool broadcastable to (B, H, T, S)  ->  (B, T, D).

    1. ``Q = split(x_q W_q)``, ``K = split(x_kv W_k)``, ``V = split(x_kv W_v)``
    2. ``O = attend(Q, K, V)``: scaled dot-product attention per head
    3. ``out = merge(O) W_o``
    """
    Q, c_q = self._project(x_q, "W_q")  # (B, H, T, Dh)
    K, c_k = self._project(x_kv, "W_k")  # (B, H, S, Dh)
    V, c_v = self._project(x_kv, "W_v")  # (B, H, S, Dv)
    O, c_attn = self.attend(Q, K, V, mask, rng)  # (B, H, T, Dv)
    out, c_o = self._output(O)  # (B, T, D)
    return out, MultiHeadAttentionCache(c_q, c_k, c_v, c_attn, c_o)


# -- yours: the backward pass --------------------------------------------------------------
def multi_head_attention_backward(self, dout, cache):
    """dout (B, T, D): the gradient of the loss with respect to the module's output.

    cache (a MultiHeadAttentionCache), one LinearCache per projection:
        cache.q_proj  x_q (B, T, D) @ W_q -> (B, T, H*Dh)
        cache.k_proj  x_kv (B, S, D) @ W_k -> (B, S, H*Dh)
        cache.v_proj  x_kv (B, S, D) @ W_v -> (B, S, H*Dv)
        cache.attn    the per-head attention's cache: for self.attend_backward
        cache.o_proj  the merged heads (B, T, H*Dv) @ W_o -> (B, T, D)

    Use linear.backward(dY, a LinearCache) -> (dX, dW, db) for the projections,
    self.attend_backward(dO, cache.attn) -> (dQ, dK, dV) for the heads' attention (each
    (B, H, T or S, Dh or Dv)), and split_heads / merge_heads (imported above) between them.
    self.h is the number of heads.

    Add the weights' gradients into self.grads["W_q"], ["W_k"], ["W_v"] and ["W_o"] (+=),
    and return (dx_q, dx_kv): (B, T, D) and (B, S, D). x_kv made both the keys and the
    values.
    """
    dO_m, dW_o, _ = linear.backward(dout, cache.o_proj)
    self.grads["W_o"] += dW_o
    dQ, dK, dV = self.attend_backward(split_heads(dO_m, self.h), cache.attn)
    dx_q, dW_q, _ = linear.backward(merge_heads(dQ), cache.q_proj)
    dx_k, dW_k, _ = linear.backward(merge_heads(dK), cache.k_proj)
    dx_v, dW_v, _ = linear.backward(merge_heads(dV), cache.v_proj)
    self.grads["W_q"] += dW_q
    self.grads["W_k"] += dW_k
    self.grads["W_v"] += dW_v
    return dx_k + dx_v, dx_q
