"""The layer exercises: multi-head attention, the position-wise feed-forward network,
Add & Norm (post-LN and pre-LN), one encoder layer, one decoder layer with
cross-attention. Each is checked on tiny modules whose sizes all differ (T != S, d_k !=
d_v, h > 1), with padding and dropout on (masks replayed).

Dimension key: ``B`` batch, ``T`` queries (target), ``S`` keys (source), ``D`` d_model,
``H`` heads, ``Dh`` d_k, ``Dv`` d_v, ``F`` d_ff.
"""

from __future__ import annotations

from scratchformer import backend, kernels
from scratchformer.backend import xp
from scratchformer.exercises.layer import (
    AddNormBlock,
    LayerCase,
    LayerExercise,
    Method,
    add,
    method_mistake,
)
from scratchformer.models.config import TransformerConfig
from scratchformer.nn.attention import MultiHeadAttention, split_heads
from scratchformer.nn.layers import AddNorm, PositionwiseFeedForward
from scratchformer.nn.transformer import DecoderLayer, EncoderLayer, SelfAttentionLayer


def _randn(seed: int, shape, dtype):
    return backend.asarray(backend.host_rng(seed).standard_normal(shape), dtype=dtype)


def _padding(lengths: list[int], width: int):
    """(B, 1, 1, width) bool: True at the first ``lengths[b]`` positions of row b."""
    np = backend.np
    mask = np.arange(width)[None, :] < np.asarray(lengths)[:, None]
    return backend.asarray(mask[:, None, None, :])


def _always(where: str):
    return lambda model: where


# -- multi-head attention ----------------------------------------------------------------
def _mha(self, dout, cache, *, split=True, value_path=True, assign=False):
    dO_merged, dW_o, _ = kernels.linear.backward(dout, cache.o_proj)  # (B, T, H*Dv)
    add(self, "W_o", dW_o, assign)
    if split:
        dO = split_heads(dO_merged, self.h)
    else:  # the heads split by a reshape alone: (B, T, H*Dv) read as (B, H, T, Dv)
        B, T, HD = dO_merged.shape
        dO = dO_merged.reshape(B, self.h, T, HD // self.h)
    dQ, dK, dV = self.attend_backward(dO, cache.attn)
    dx_q = self._project_backward(dQ, cache.q_proj, "W_q")
    dx_kv = self._project_backward(dK, cache.k_proj, "W_k")
    if value_path:
        dx_kv = dx_kv + self._project_backward(dV, cache.v_proj, "W_v")
    else:
        self._project_backward(dV, cache.v_proj, "W_v")
    return dx_q, dx_kv


def _mha_cases():
    def cross(dtype):
        return _randn(1, (2, 4, 6), dtype), _randn(2, (2, 7, 6), dtype), _padding([7, 4], 7)

    def self_attention(dtype):
        x = _randn(3, (2, 5, 6), dtype)
        return x, x.copy(), None

    def module(causal):
        return lambda: MultiHeadAttention(
            6, 2, d_k=3, d_v=5, P_drop_attn=0.2, rng=backend.host_rng(7), causal=causal
        )

    return [
        LayerCase(
            "cross-attention: T 4, S 7, H 2, d_k 3, d_v 5, source padding", module(False), cross
        ),  # fmt: skip
        LayerCase(
            "causal self-attention: T = S = 5, attention dropout 0.2",
            module(True),
            self_attention,
            dropout_seed=5,
        ),  # fmt: skip
    ]


MULTI_HEAD_ATTENTION = LayerExercise(
    name="multi_head_attention",
    title="multi-head attention",
    summary="project, split into heads, attend, merge, project: MultiHeadAttention.backward",
    section="multi-head-attention",
    methods=(
        Method(
            MultiHeadAttention,
            "backward",
            "multi_head_attention_backward",
            "multi_head_attention_backward(self, dout, cache)",
            """\
dout (B, T, D): the gradient of the loss with respect to the module's output.

cache (a MultiHeadAttentionCache), one LinearCache per projection:
    cache.q_proj  x_q (B, T, D) @ W_q -> (B, T, H*Dh)
    cache.k_proj  x_kv (B, S, D) @ W_k -> (B, S, H*Dh)
    cache.v_proj  x_kv (B, S, D) @ W_v -> (B, S, H*Dv)
    cache.attn    the per-head attention's cache: for self.attend_backward
    cache.o_proj  the merged heads (B, T, H*Dv) @ W_o -> (B, T, D)

Use kernels.linear.backward(dY, a LinearCache) -> (dX, dW, db) for the projections,
self.attend_backward(dO, cache.attn) -> (dQ, dK, dV) for the heads' attention (each
(B, H, T or S, Dh or Dv)), and split_heads / merge_heads (imported above) between them.
self.h is the number of heads.

Add the weights' gradients into self.grads["W_q"], ["W_k"], ["W_v"] and ["W_o"] (+=),
and return (dx_q, dx_kv): (B, T, D) and (B, S, D). x_kv made both the keys and the
values.""",
        ),
    ),
    given=((MultiHeadAttention, "forward", "multi_head_attention_forward"),),
    intro="""\
Section 3.2.2: the queries, keys and values are projected (W_q, W_k, W_v, every head's
side by side), split into h heads, attended head by head, the heads merged back and
projected by W_o:

    head_i = Attention(x_q W_q^i, x_kv W_k^i, x_kv W_v^i)
    MultiHead(x_q, x_kv) = Concat(head_1, ..., head_h) W_o""",
    imports="""\
from scratchformer import kernels
from scratchformer.nn.attention import MultiHeadAttentionCache, merge_heads, split_heads""",
    cases=_mha_cases,
    inputs=("dx_q", "dx_kv"),
    helpers=((MultiHeadAttention, "_project_backward"),),
    hints=(
        "Undo the forward's steps in reverse: the output projection first "
        "(kernels.linear.backward with cache.o_proj) gives the merged heads' gradient "
        "(B, T, H*Dv) and dW_o.",
        "split_heads and merge_heads only move numbers: the gradient goes back through "
        "the inverse move. The merged heads' gradient is split the way the forward "
        "split its projections: split_heads(d, self.h), not a bare reshape.",
        "self.attend_backward gives dQ, dK, dV per head; merge each and run it back "
        "through its projection. Keys and values both came from x_kv: add the two "
        "paths (the sum rule).",
    ),
    mistakes=(
        method_mistake(
            "split-by-reshape",
            "the heads split by a plain reshape, without moving the head axis",
            "merge_heads moved the head axis next to the features before the reshape: "
            "its inverse is split_heads (docs/derivations.md#multi-head-attention)",
            multi_head_attention_backward=lambda self, d, c: _mha(self, d, c, split=False),
        ),
        method_mistake(
            "no-value-path",
            "dx_kv without the values' path: only the keys' gradient",
            "x_kv feeds both W_k and W_v: its gradient is the sum of the two paths "
            "(docs/derivations.md#conventions, the sum rule)",
            multi_head_attention_backward=lambda self, d, c: _mha(self, d, c, value_path=False),
        ),
        method_mistake(
            "grads-overwritten",
            "a gradient assigned (self.grads[...] = ...) instead of added (+=)",
            "gradients accumulate: a module called twice adds both calls' gradients "
            "(docs/derivations.md#conventions)",
            multi_head_attention_backward=lambda self, d, c: _mha(self, d, c, assign=True),
        ),
    ),
    uses=_always("every MultiHeadAttention: encoder and decoder self-attention, cross-attention"),
)


# -- the feed-forward network ------------------------------------------------------------
def _ffn(self, dout, cache, *, activation=True, dropout=True, assign=False):
    da, dW_2, db_2 = kernels.linear.backward(dout, cache.lin2)
    if dropout:
        da = self.dropout.backward(da, cache.drop)
    du = self.activation.backward(da, cache.act) if activation else da
    dx, dW_1, db_1 = kernels.linear.backward(du, cache.lin1)
    add(self, "W_2", dW_2)
    add(self, "b_2", db_2, assign)
    add(self, "W_1", dW_1)
    add(self, "b_1", db_1, assign)
    return dx


def _ffn_cases():
    def x(dtype):
        return (_randn(11, (2, 5, 6), dtype),)

    return [
        LayerCase(
            "ReLU, dropout 0.25 on the hidden layer: D 6, F 10",
            lambda: PositionwiseFeedForward(6, 10, "relu", 0.25, backend.host_rng(8)),
            x,
            dropout_seed=6,
        ),
        LayerCase(
            "GELU, no dropout",
            lambda: PositionwiseFeedForward(6, 10, "gelu", 0.0, backend.host_rng(9)),
            x,
        ),
    ]


FFN = LayerExercise(
    name="ffn",
    title="the position-wise feed-forward network",
    summary="act(x W_1 + b_1) W_2 + b_2 at every position: PositionwiseFeedForward.backward",
    section="add--norm-post-ln-and-pre-ln",
    methods=(
        Method(
            PositionwiseFeedForward,
            "backward",
            "ffn_backward",
            "ffn_backward(self, dout, cache)",
            """\
dout (B, T, D): the gradient of the loss with respect to the output.

cache (a FeedForwardCache):
    cache.lin1  x (B, T, D) @ W_1 + b_1 -> u (B, T, F)
    cache.act   the activation's cache: for self.activation.backward(da, cache.act)
    cache.drop  the hidden layer's dropout: for self.dropout.backward(da, cache.drop)
    cache.lin2  a' (B, T, F) @ W_2 + b_2 -> out (B, T, D)

Use kernels.linear.backward(dY, a LinearCache) -> (dX, dW, db). The activation's
backward may work in the buffer of the gradient you give it.
Add into self.grads["W_1"], ["b_1"], ["W_2"], ["b_2"] (+=) and return dx (B, T, D).""",
        ),
    ),
    given=((PositionwiseFeedForward, "forward", "ffn_forward"),),
    intro="""\
Section 3.3: the same two-layer network at every position, with an activation (the
paper's ReLU, or GELU) and, optionally, dropout on the hidden layer:

    u = x W_1 + b_1      a = act(u)      a' = dropout(a)      out = a' W_2 + b_2""",
    imports="""\
from scratchformer import kernels
from scratchformer.nn.layers import FeedForwardCache""",
    cases=_ffn_cases,
    inputs=("dx",),
    hints=(
        "Four steps forward, four back, in reverse: the second linear map, the dropout, "
        "the activation, the first linear map.",
        "Each step has its backward ready: kernels.linear.backward, self.dropout.backward, "
        "self.activation.backward. Pass each the cache of its own step.",
        "Every parameter is used at every position: kernels.linear.backward already sums "
        "over them. Add what it returns into self.grads.",
    ),
    mistakes=(
        method_mistake(
            "no-activation",
            "the activation's backward skipped: du = da",
            "a = act(u) has a derivative (ReLU's mask, GELU's slope) between the two "
            "linear maps (docs/derivations.md#activations)",
            ffn_backward=lambda self, d, c: _ffn(self, d, c, activation=False),
        ),
        method_mistake(
            "no-dropout",
            "the hidden layer's dropout skipped in backward",
            "a' = dropout(a): the gradient goes back through the same mask "
            "(docs/derivations.md#dropout)",
            ffn_backward=lambda self, d, c: _ffn(self, d, c, dropout=False),
        ),
        method_mistake(
            "grads-overwritten",
            "a bias gradient assigned (self.grads[...] = ...) instead of added (+=)",
            "gradients accumulate: a module called twice adds both calls' gradients "
            "(docs/derivations.md#conventions)",
            ffn_backward=lambda self, d, c: _ffn(self, d, c, assign=True),
        ),
    ),
    uses=_always("every feed-forward sub-layer"),
)


# -- Add & Norm --------------------------------------------------------------------------
def _exit(self, dy, cache, *, residual_norm=True, residual_dropout=False, sublayer_dropout=True):
    dr = dy if self.norm_first else self._norm_backward(dy, cache.norm)
    ds = self.dropout.backward(dr, cache.dropout) if sublayer_dropout else dr
    residual = dr if residual_norm else dy
    return (ds if residual_dropout else residual), ds


def _enter(self, ds_in, cache, *, norm=True):
    if self.norm_first and norm:
        return self._norm_backward(ds_in, cache.norm)
    return ds_in


def _add_norm_cases():
    def x(dtype):
        return (_randn(12, (2, 5, 6), dtype),)

    return [
        LayerCase("post-LN (the paper), residual dropout 0.2",
                  lambda: AddNormBlock(6, 0.2, False, backend.host_rng(10)), x, dropout_seed=7),
        LayerCase("pre-LN, residual dropout 0.2",
                  lambda: AddNormBlock(6, 0.2, True, backend.host_rng(10)), x, dropout_seed=7),
    ]  # fmt: skip


ADD_NORM = LayerExercise(
    name="add_norm",
    title="Add & Norm, post-LN and pre-LN",
    summary="the residual block around a sub-layer: AddNorm.exit_backward, enter_backward",
    section="add--norm-post-ln-and-pre-ln",
    methods=(
        Method(
            AddNorm,
            "exit_backward",
            "add_norm_exit_backward",
            "add_norm_exit_backward(self, dy, cache)",
            """\
dy (B, T, D): the gradient of the loss with respect to exit's output y.

cache (an AddNormCache, of this exit):
    cache.norm     the LayerNorm's cache (post-LN), None for pre-LN
    cache.dropout  the residual dropout's cache

self.norm_first is True for pre-LN. self._norm_backward(d, cache.norm) is the
LayerNorm's backward (it adds dgamma and dbeta into self.grads); self.dropout.backward(d,
cache.dropout) the dropout's.

Return (dx, ds): the gradient of exit's x along the residual path, and of the
sub-layer's output s.""",
        ),
        Method(
            AddNorm,
            "enter_backward",
            "add_norm_enter_backward",
            "add_norm_enter_backward(self, ds_in, cache)",
            """\
ds_in (B, T, D): the gradient of the loss with respect to enter's output (the
sub-layer's input).

cache (an AddNormCache, of this enter): cache.norm, the LayerNorm's cache (pre-LN),
None for post-LN.

Return dx: the gradient of x along the sub-layer's path (the caller adds the residual
path's, from exit_backward).""",
        ),
    ),
    given=((AddNorm, "enter", "add_norm_enter"), (AddNorm, "exit", "add_norm_exit")),
    intro="""\
The residual block around every sub-layer, split in two steps so any sub-layer fits
between them (s_in, c_in = enter(x); s = sublayer(s_in); y, c_out = exit(x, s)):

    post-LN (the paper):  y = LayerNorm(x + Dropout(Sublayer(x)))
    pre-LN:               y = x + Dropout(Sublayer(LayerNorm(x)))

It is checked around a linear sub-layer, y = exit(x, Linear(enter(x))), in both forms.""",
    imports="from scratchformer.nn.layers import AddNormCache",
    cases=_add_norm_cases,
    inputs=("dx",),
    helpers=((AddNorm, "_norm_backward"),),
    hints=(
        "Write both forms as a graph: x is used twice (the residual and the sub-layer's "
        "input), so its gradient is the sum of two paths. exit_backward gives the "
        "residual path, enter_backward the sub-layer's.",
        "Post-LN: everything that reaches y passes through the LayerNorm, so both paths "
        "start from the LayerNorm's backward of dy. Pre-LN: the LayerNorm is inside the "
        "sub-layer's path only, in enter.",
        "The residual dropout sits on the sub-layer's output s, not on the residual.",
    ),
    mistakes=(
        method_mistake(
            "residual-skips-norm",
            "post-LN: the residual path given dy instead of the LayerNorm's backward of dy",
            "in post-LN the residual x + s passes through the LayerNorm too: both paths "
            "start from its backward (docs/derivations.md#add--norm-post-ln-and-pre-ln)",
            add_norm_exit_backward=lambda self, d, c: _exit(self, d, c, residual_norm=False),
        ),
        method_mistake(
            "dropout-on-residual",
            "the residual dropout applied to the residual path too",
            "dropout is on the sub-layer's output only: y = ... x + Dropout(s) ... "
            "(docs/derivations.md#add--norm-post-ln-and-pre-ln)",
            add_norm_exit_backward=lambda self, d, c: _exit(self, d, c, residual_dropout=True),
        ),
        method_mistake(
            "sublayer-no-dropout",
            "the sub-layer's gradient not sent back through the residual dropout",
            "s reached the sum through Dropout(s): ds goes back through the same mask "
            "(docs/derivations.md#add--norm-post-ln-and-pre-ln)",
            add_norm_exit_backward=lambda self, d, c: _exit(self, d, c, sublayer_dropout=False),
        ),
        method_mistake(
            "pre-ln-enter-identity",
            "pre-LN: enter_backward skips the LayerNorm",
            "in pre-LN the sub-layer reads LayerNorm(x): its gradient goes back through "
            "the LayerNorm's backward (docs/derivations.md#add--norm-post-ln-and-pre-ln)",
            add_norm_enter_backward=lambda self, d, c: _enter(self, d, c, norm=False),
        ),
    ),
    uses=_always("every Add & Norm around every sub-layer"),
)


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
    )  # fmt: skip


def _layer_cases(cls, args, seed: int):
    return [
        LayerCase(f"{norm}-LN, h 2, d_k 3, d_v 5, padding, dropout 0.2 (attention 0.1)",
                  lambda norm=norm: cls(_config(norm), backend.host_rng(seed)), args,
                  dropout_seed=seed)
        for norm in ("post", "pre")
    ]  # fmt: skip


def _encoder_cases():
    return _layer_cases(
        EncoderLayer, lambda dtype: (_randn(13, (2, 6, 8), dtype), _padding([6, 4], 6)), 12
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
    imports="from scratchformer.nn.transformer import SelfAttentionLayerCache, SublayerCache",
    cases=_encoder_cases,
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
    uses=_always("every encoder layer"),
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
        y, memory = _randn(14, (2, 5, 8), dtype), _randn(15, (2, 7, 8), dtype)
        return y, memory, _padding([5, 4], 5), _padding([7, 4], 7)

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
    imports="from scratchformer.nn.transformer import DecoderLayerCache, SublayerCache",
    cases=_decoder_cases,
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
    uses=_always("every decoder layer"),
)

__all__ = ["ADD_NORM", "DECODER_LAYER", "ENCODER_LAYER", "FFN", "MULTI_HEAD_ATTENTION"]
