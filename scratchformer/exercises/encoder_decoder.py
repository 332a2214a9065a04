"""The whole-layer exercises: one encoder layer and one decoder layer with
cross-attention, each the composition of the sublayers of layers.py (checked on tiny
modules whose sizes all differ, with padding and dropout on, masks replayed).

Dimension key: ``B`` batch, ``T`` queries (target), ``S`` keys (source), ``D`` d_model.
"""

from __future__ import annotations

from scratchformer.engine import backend
from scratchformer.engine.backend import xp
from scratchformer.engine.models.config import TransformerConfig
from scratchformer.engine.nn.transformer import DecoderLayer, EncoderLayer, SelfAttentionLayer
from scratchformer.exercises import draw_layers
from scratchformer.exercises.layer import LayerCase, LayerExercise, Method, method_mistake
from scratchformer.exercises.layers import padding_mask, seeded_randn
from scratchformer.exercises.spec import always


# -- the encoder layer -------------------------------------------------------------------
def _encoder(self, dout, cache, *, kv_path=True, ffn_residual=True):
    c = cache.ffn
    dx, df = self.ffn_norm.exit_backward(dout, c.exit)
    sub = self.ffn_norm.enter_backward(self.ffn.backward(df, c.sublayer), c.enter)
    dx = dx + sub if ffn_residual else sub
    c = cache.self_attn
    dx_res, da = self.self_attn_norm.exit_backward(dx, c.exit)
    da_q, da_kv = self.self_attn.backward(da, c.sublayer)
    return dx_res + self.self_attn_norm.enter_backward(da_q + da_kv if kv_path else da_q, c.enter)


def _config(norm: str) -> TransformerConfig:
    return TransformerConfig(
        vocab_size=10, N=1, d_model=8, d_ff=12, h=2, d_k=3, d_v=5, P_drop=0.2,
        P_drop_attn=0.1, norm=norm, max_len=16,
    )


def _layer_cases(cls, args, seed: int):
    return [
        LayerCase(f"{norm}-LN, h 2, d_k 3, d_v 5, padding, dropout 0.2 (attention 0.1)",
                  lambda norm=norm: cls(_config(norm), backend.host_rng(seed)), args,
                  dropout_seed=seed)
        for norm in ("post", "pre")
    ]


def _encoder_cases():
    return _layer_cases(
        EncoderLayer,
        lambda dtype: (seeded_randn(13, (2, 6, 8), dtype), padding_mask([6, 4], 6)),
        12,
    )


_SUBLAYERS = """\
The layer's sub-modules: each X below has an X_norm, its AddNorm, around it.
    self.self_attn  MultiHeadAttention: backward(d, cache) -> (dx_q, dx_kv)
    self.ffn        PositionwiseFeedForward: backward(d, cache) -> dx
An AddNorm's exit_backward(dy, cache) -> (dx, ds): the residual path's gradient and
the sub-layer output's; its enter_backward(ds_in, cache) -> dx: the sub-layer path's."""

ENCODER_LAYER = LayerExercise(
    name="encoder_layer",
    title="one encoder layer",
    summary="self-attention and FFN, each in Add & Norm: EncoderLayer.backward",
    section="the-whole-model",
    methods=(
        Method(
            EncoderLayer,
            "backward",
            "encoder_layer_backward",
            "encoder_layer_backward(self, dout, cache)",
            f"""\
dout (B, S, D): the gradient of the loss with respect to the layer's output.

cache (a SelfAttentionLayerCache): cache.self_attn and cache.ffn, each a SublayerCache
with .enter (the AddNorm's enter), .sublayer (the sub-layer's own) and .exit (the
AddNorm's exit).

{_SUBLAYERS}

Return dx (B, S, D). The sub-modules add their parameters' gradients themselves.""",
        ),
    ),
    given=((SelfAttentionLayer, "forward", "encoder_layer_forward"),),
    intro="""\
One layer of the encoder (section 3.1): self-attention over the padded source, then the
feed-forward network, each inside its Add & Norm (post-LN or pre-LN):

    a_in = enter(x);  a = SelfAttention(a_in, a_in);  x = exit(x, a)
    f_in = enter(x);  f = FFN(f_in);                   x = exit(x, f)""",
    imports=("from scratchformer.engine.nn.transformer import SelfAttentionLayerCache, "
             "SublayerCache"),
    cases=_encoder_cases,
    drawn=draw_layers.encoder_layer,
    inputs=("dx",),
    hints=(
        "Go back through the two blocks in reverse: the FFN's block first. In each, "
        "exit_backward splits the gradient into the residual path and the sub-layer's.",
        "The sub-layer's path: the sub-layer's backward, then enter_backward. Add the "
        "residual path to it: that is the block input's gradient.",
        "In self-attention a_in is both the queries' and the keys'/values' input: its "
        "gradient is dx_q + dx_kv.",
    ),
    mistakes=(
        method_mistake(
            "query-path-only",
            "self-attention's input gradient from the queries only (dx_q, not dx_q + dx_kv)",
            "a_in feeds the queries and the keys and values: add both gradients "
            "(docs/derivations.md#conventions, the sum rule)",
            encoder_layer_backward=lambda self, d, c: _encoder(self, d, c, kv_path=False),
        ),
        method_mistake(
            "ffn-residual-dropped",
            "the residual path around the FFN dropped",
            "x reaches the FFN block's output twice: through the FFN and directly; add "
            "exit_backward's dx (docs/derivations.md#add--norm-post-ln-and-pre-ln)",
            encoder_layer_backward=lambda self, d, c: _encoder(self, d, c, ffn_residual=False),
        ),
    ),
    uses=always("every encoder layer"),
)


# -- the decoder layer -------------------------------------------------------------------
def _decoder(self, dout, cache, *, kv_path=True, cross_residual=True, memory=True):
    c = cache.ffn
    dy, df = self.ffn_norm.exit_backward(dout, c.exit)
    dy = dy + self.ffn_norm.enter_backward(self.ffn.backward(df, c.sublayer), c.enter)
    c = cache.cross_attn
    dy_res, dx = self.cross_attn_norm.exit_backward(dy, c.exit)
    dx_q, dmemory = self.cross_attn.backward(dx, c.sublayer)
    sub = self.cross_attn_norm.enter_backward(dx_q, c.enter)
    dy = dy_res + sub if cross_residual else sub
    c = cache.self_attn
    dy_res, da = self.self_attn_norm.exit_backward(dy, c.exit)
    da_q, da_kv = self.self_attn.backward(da, c.sublayer)
    dy = dy_res + self.self_attn_norm.enter_backward(da_q + da_kv if kv_path else da_q, c.enter)
    return dy, dmemory if memory else xp.zeros_like(dmemory)


def _decoder_cases():
    def args(dtype):
        y, memory = seeded_randn(14, (2, 5, 8), dtype), seeded_randn(15, (2, 7, 8), dtype)
        return y, memory, padding_mask([5, 4], 5), padding_mask([7, 4], 7)

    return _layer_cases(DecoderLayer, args, 13)


DECODER_LAYER = LayerExercise(
    name="decoder_layer",
    title="one decoder layer with cross-attention",
    summary="masked self-attention, cross-attention, FFN: DecoderLayer.backward",
    section="the-whole-model",
    methods=(
        Method(
            DecoderLayer,
            "backward",
            "decoder_layer_backward",
            "decoder_layer_backward(self, dout, cache)",
            f"""\
dout (B, T, D): the gradient of the loss with respect to the layer's output.

cache (a DecoderLayerCache): cache.self_attn, cache.cross_attn and cache.ffn, each a
SublayerCache with .enter, .sublayer and .exit.

{_SUBLAYERS}
    self.cross_attn MultiHeadAttention: queries from the decoder, keys and values
                    from the encoder's output (memory)

Return (dy, dmemory): (B, T, D) and (B, S, D). The sub-modules add their parameters'
gradients themselves.""",
        ),
    ),
    given=((DecoderLayer, "forward", "decoder_layer_forward"),),
    intro="""\
One layer of the decoder (section 3.1): masked (causal) self-attention over the target,
attention to the encoder's output (cross-attention), then the feed-forward network,
each inside its Add & Norm:

    a = SelfAttention(a_in, a_in)      x = CrossAttention(x_in, memory)      f = FFN(f_in)""",
    imports="from scratchformer.engine.nn.transformer import DecoderLayerCache, SublayerCache",
    cases=_decoder_cases,
    drawn=draw_layers.decoder_layer,
    inputs=("dy", "dmemory"),
    hints=(
        "Three blocks, back in reverse order: FFN, cross-attention, self-attention; each "
        "block as in the encoder layer (residual path + sub-layer path).",
        "Cross-attention's backward returns (dx_q, dx_kv): the queries came from the "
        "decoder (they continue down the layer), the keys and values from memory.",
        "Self-attention's input feeds its queries and its keys/values: add both.",
    ),
    mistakes=(
        method_mistake(
            "query-path-only",
            "self-attention's input gradient from the queries only (dx_q, not dx_q + dx_kv)",
            "the target feeds the queries and the keys and values of self-attention: add "
            "both (docs/derivations.md#conventions, the sum rule)",
            decoder_layer_backward=lambda self, d, c: _decoder(self, d, c, kv_path=False),
        ),
        method_mistake(
            "cross-residual-dropped",
            "the residual path around cross-attention dropped",
            "y reaches the cross-attention block's output twice: through the attention and "
            "directly (docs/derivations.md#add--norm-post-ln-and-pre-ln)",
            decoder_layer_backward=lambda self, d, c: _decoder(self, d, c, cross_residual=False),
        ),
        method_mistake(
            "no-memory-gradient",
            "no gradient for memory (the encoder's output treated as a constant)",
            "the keys and values of cross-attention are the encoder's output: its gradient "
            "is what trains the encoder (docs/derivations.md#the-whole-model)",
            decoder_layer_backward=lambda self, d, c: _decoder(self, d, c, memory=False),
        ),
    ),
    uses=always("every decoder layer"),
)


__all__ = ["DECODER_LAYER", "ENCODER_LAYER"]
