# ruff: noqa
"""Exercise encoder_layer: the backward pass of one encoder layer. Write ``encoder_layer_backward`` below.

One layer of the encoder (section 3.1): self-attention over the padded source, then the
feed-forward network, each inside its Add & Norm (post-LN or pre-LN):

    a_in = enter(x);  a = SelfAttention(a_in, a_in);  x = exit(x, a)
    f_in = enter(x);  f = FFN(f_in);                   x = exit(x, f)

    scratchformer exercise check encoder_layer      grade it
    scratchformer exercise hint encoder_layer       the next hint
    scratchformer exercise solution encoder_layer   the engine's code, derivation

The derivation: docs/derivations.md#the-whole-model (on the docs site: derivations.html#the-whole-model).
What you write becomes EncoderLayer.backward while it is checked or trains: ``self`` is
the module, with its parameters in self.params and their gradients in
self.grads (ADD into them: +=), its sub-modules as attributes. The forward is
shown as the engine has it; the checker runs the engine's forward and compares
every input and parameter gradient with float64 central differences on these
inputs:
    post-LN, h 2, d_k 3, d_v 5, padding, dropout 0.2 (attention 0.1)
    pre-LN, h 2, d_k 3, d_v 5, padding, dropout 0.2 (attention 0.1)
"""

from __future__ import annotations

from scratchformer.engine.nn.transformer import SelfAttentionLayerCache, SublayerCache

EXERCISE = "encoder_layer"


# -- given: the forward pass, as in the engine (for reading; not run from here) ------------
def encoder_layer_forward(self, x, mask, rng=None):
    """x (B, S, D), mask bool broadcastable to (B, 1, S, S) (padding: (B, 1, 1, S))
    ->  (B, S, D)."""
    a_in, c1 = self.self_attn_norm.enter(x)
    a, c2 = self.self_attn.forward(a_in, a_in, mask, rng)
    x, c3 = self.self_attn_norm.exit(x, a, rng)
    f_in, c4 = self.ffn_norm.enter(x)
    f, c5 = self.ffn.forward(f_in, rng)
    x, c6 = self.ffn_norm.exit(x, f, rng)
    return x, SelfAttentionLayerCache(SublayerCache(c1, c2, c3), SublayerCache(c4, c5, c6))


# -- yours: the backward pass --------------------------------------------------------------
def encoder_layer_backward(self, dout, cache):
    """dout (B, S, D): the gradient of the loss with respect to the layer's output.

    cache (a SelfAttentionLayerCache): cache.self_attn and cache.ffn, each a SublayerCache
    with .enter (the AddNorm's enter), .sublayer (the sub-layer's own) and .exit (the
    AddNorm's exit).

    The layer's sub-modules: each X below has an X_norm, its AddNorm, around it.
        self.self_attn  MultiHeadAttention: backward(d, cache) -> (dx_q, dx_kv)
        self.ffn        PositionwiseFeedForward: backward(d, cache) -> dx
    An AddNorm's exit_backward(dy, cache) -> (dx, ds): the residual path's gradient and
    the sub-layer output's; its enter_backward(ds_in, cache) -> dx: the sub-layer path's.

    Return dx (B, S, D). The sub-modules add their parameters' gradients themselves.
    """
    ca, cf = cache.self_attn, cache.ffn
    dx, df = self.ffn_norm.exit_backward(dout, cf.exit)
    dx = self.ffn_norm.enter_backward(self.ffn.backward(df, cf.sublayer), cf.enter)
    dx, da = self.self_attn_norm.exit_backward(dx, ca.exit)
    da_q, da_kv = self.self_attn.backward(da, ca.sublayer)
    return dx + self.self_attn_norm.enter_backward(da_q + da_kv, ca.enter)
