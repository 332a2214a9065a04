# ruff: noqa
"""Exercise decoder_layer: the backward pass of one decoder layer with cross-attention. Write ``decoder_layer_backward`` below.

One layer of the decoder (section 3.1): masked (causal) self-attention over the target,
attention to the encoder's output (cross-attention), then the feed-forward network,
each inside its Add & Norm:

    a = SelfAttention(a_in, a_in)      x = CrossAttention(x_in, memory)      f = FFN(f_in)

    scratchformer exercise check decoder_layer      grade it
    scratchformer exercise hint decoder_layer       the next hint
    scratchformer exercise solution decoder_layer   the engine's code, derivation

The derivation: docs/derivations.md#the-whole-model (on the docs site: derivations.html#the-whole-model).
What you write becomes DecoderLayer.backward while it is checked or trains: ``self`` is
the module, with its parameters in self.params and their gradients in
self.grads (ADD into them: +=), its sub-modules as attributes. The forward is
shown as the engine has it; the checker runs the engine's forward and compares
every input and parameter gradient with float64 central differences on these
inputs:
    post-LN, h 2, d_k 3, d_v 5, padding, dropout 0.2 (attention 0.1)
    pre-LN, h 2, d_k 3, d_v 5, padding, dropout 0.2 (attention 0.1)
"""

from __future__ import annotations

from scratchformer.engine.nn.transformer import DecoderLayerCache, SublayerCache

EXERCISE = "decoder_layer"


# -- given: the forward pass, as in the engine (for reading; not run from here) ------------
def decoder_layer_forward(self, y, memory, self_mask, cross_mask, rng=None):
    """y (B, T, D), memory (B, S, D), self_mask (B, 1, 1, T) target padding (the
    causal self-attention adds the causal part), cross_mask (B, 1, 1, S) source
    padding  ->  (B, T, D)."""
    a_in, c1 = self.self_attn_norm.enter(y)
    a, c2 = self.self_attn.forward(a_in, a_in, self_mask, rng)
    y, c3 = self.self_attn_norm.exit(y, a, rng)
    x_in, c4 = self.cross_attn_norm.enter(y)
    x, c5 = self.cross_attn.forward(x_in, memory, cross_mask, rng)
    y, c6 = self.cross_attn_norm.exit(y, x, rng)
    f_in, c7 = self.ffn_norm.enter(y)
    f, c8 = self.ffn.forward(f_in, rng)
    y, c9 = self.ffn_norm.exit(y, f, rng)
    return y, DecoderLayerCache(
        SublayerCache(c1, c2, c3), SublayerCache(c4, c5, c6), SublayerCache(c7, c8, c9)
    )


# -- yours: the backward pass --------------------------------------------------------------
def decoder_layer_backward(self, dout, cache):
    """dout (B, T, D): the gradient of the loss with respect to the layer's output.

    cache (a DecoderLayerCache): cache.self_attn, cache.cross_attn and cache.ffn, each a
    SublayerCache with .enter, .sublayer and .exit.

    The layer's sub-modules: each X below has an X_norm, its AddNorm, around it.
        self.self_attn  MultiHeadAttention: backward(d, cache) -> (dx_q, dx_kv)
        self.ffn        PositionwiseFeedForward: backward(d, cache) -> dx
    An AddNorm's exit_backward(dy, cache) -> (dx, ds): the residual path's gradient and
    the sub-layer output's; its enter_backward(ds_in, cache) -> dx: the sub-layer path's.
        self.cross_attn MultiHeadAttention: queries from the decoder, keys and values
                        from the encoder's output (memory)

    Return (dy, dmemory): (B, T, D) and (B, S, D). The sub-modules add their parameters'
    gradients themselves.
    """
    cs, cx, cf = cache.self_attn, cache.cross_attn, cache.ffn
    dy, df = self.ffn_norm.exit_backward(dout, cf.exit)
    dy = dy + self.ffn_norm.enter_backward(self.ffn.backward(df, cf.sublayer), cf.enter)
    dy, dxs = self.cross_attn_norm.exit_backward(dy, cx.exit)
    dx_q, dmemory = self.cross_attn.backward(dxs, cx.sublayer)
    dy = dy + self.cross_attn_norm.enter_backward(dx_q, cx.enter)
    dy, da = self.self_attn_norm.exit_backward(dy, cs.exit)
    da_q, da_kv = self.self_attn.backward(da, cs.sublayer)
    dy = dy + self.self_attn_norm.enter_backward(da_q, cs.enter)
    return dy, dmemory
