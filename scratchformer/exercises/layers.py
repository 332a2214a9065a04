"""The layer exercises: multi-head attention, the position-wise feed-forward network and
Add & Norm (post-LN and pre-LN); the whole encoder and decoder layers, built of them,
follow in encoder_decoder.py. Each is checked on tiny modules whose sizes all differ (T != S, d_k !=
d_v, h > 1), with padding and dropout on (masks replayed).

Dimension key: ``B`` batch, ``T`` queries (target), ``S`` keys (source), ``D`` d_model,
``H`` heads, ``Dh`` d_k, ``Dv`` d_v, ``F`` d_ff.
"""

from __future__ import annotations

from typing import NamedTuple

from scratchformer.engine import backend
from scratchformer.engine.nn.attention import MultiHeadAttention, split_heads
from scratchformer.engine.nn.layers import AddNorm, PositionwiseFeedForward
from scratchformer.engine.ops.linear import linear
from scratchformer.exercises import draw_layers
from scratchformer.exercises.draw import padding_mask
from scratchformer.exercises.layer import (
    AddNormBlock,
    LayerCase,
    LayerExercise,
    Method,
    add,
    method_mistake,
)
from scratchformer.exercises.spec import always


def seeded_randn(seed: int, shape, dtype):
    return backend.asarray(backend.host_rng(seed).standard_normal(shape), dtype=dtype)


# -- multi-head attention ----------------------------------------------------------------
def _mha(self, dout, cache, *, split=True, value_path=True, assign=False):
    dO_merged, dW_o, _ = linear.backward(dout, cache.o_proj)  # (B, T, H*Dv)
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
        return (
            seeded_randn(1, (2, 4, 6), dtype),
            seeded_randn(2, (2, 7, 6), dtype),
            padding_mask([7, 4], 7),
        )

    def self_attention(dtype):
        x = seeded_randn(3, (2, 5, 6), dtype)
        return x, x.copy(), None

    def module(causal):
        return lambda: MultiHeadAttention(
            6, 2, d_k=3, d_v=5, P_drop_attn=0.2, rng=backend.host_rng(7), causal=causal
        )

    return [
        LayerCase(
            "cross-attention: T 4, S 7, H 2, d_k 3, d_v 5, source padding", module(False), cross
        ),
        LayerCase(
            "causal self-attention: T = S = 5, attention dropout 0.2",
            module(True),
            self_attention,
            dropout_seed=5,
        ),
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

Use linear.backward(dY, a LinearCache) -> (dX, dW, db) for the projections,
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
from scratchformer.engine.nn.attention import MultiHeadAttentionCache, merge_heads, split_heads
from scratchformer.engine.ops.linear import linear""",
    cases=_mha_cases,
    drawn=draw_layers.multi_head_attention,
    inputs=("dx_q", "dx_kv"),
    helpers=((MultiHeadAttention, "_project_backward"),),
    hints=(
        "Undo the forward's steps in reverse: the output projection first "
        "(linear.backward with cache.o_proj) gives the merged heads' gradient "
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
    uses=always("every MultiHeadAttention: encoder and decoder self-attention, cross-attention"),
)


# -- the feed-forward network ------------------------------------------------------------
def _ffn(self, dout, cache, *, activation=True, dropout=True, assign=False):
    da, dW_2, db_2 = linear.backward(dout, cache.lin2)
    if dropout:
        da = self.dropout.backward(da, cache.drop)
    du = self.activation.backward(da, cache.act) if activation else da
    dx, dW_1, db_1 = linear.backward(du, cache.lin1)
    add(self, "W_2", dW_2)
    add(self, "b_2", db_2, assign)
    add(self, "W_1", dW_1)
    add(self, "b_1", db_1, assign)
    return dx


def _ffn_cases():
    def x(dtype):
        return (seeded_randn(11, (2, 5, 6), dtype),)

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

Use linear.backward(dY, a LinearCache) -> (dX, dW, db). The activation's
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
from scratchformer.engine.nn.layers import FeedForwardCache
from scratchformer.engine.ops.linear import linear""",
    cases=_ffn_cases,
    drawn=draw_layers.ffn,
    inputs=("dx",),
    hints=(
        "Four steps forward, four back, in reverse: the second linear map, the dropout, "
        "the activation, the first linear map.",
        "Each step has its backward ready: linear.backward, self.dropout.backward, "
        "self.activation.backward. Pass each the cache of its own step.",
        "Every parameter is used at every position: linear.backward already sums "
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
    uses=always("every feed-forward sub-layer"),
)


# -- Add & Norm --------------------------------------------------------------------------
class ExitCache(NamedTuple):
    norm: object  # the LayerNorm's cache (post-LN), None for pre-LN
    dropout: object  # the residual dropout's cache


def add_norm_exit(self, x, s, rng=None):
    """``LayerNorm(x + Dropout(s))`` (post-LN) or ``x + Dropout(s)`` (pre-LN), step by
    step (the engine runs these steps as one op, add_norm_exit)."""
    s_drop, c_drop = self.dropout.forward(s, rng)
    r = x + s_drop
    if self.norm_first:
        return r, ExitCache(None, c_drop)
    y, c_norm = self._norm(r)
    return y, ExitCache(c_norm, c_drop)


def add_norm_exit_backward(self, dy, cache):
    """Returns ``(dx, ds)``: the residual path's gradient and the sub-layer output's."""
    dr = dy if self.norm_first else self._norm_backward(dy, cache.norm)
    return dr, self.dropout.backward(dr, cache.dropout)


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
        return (seeded_randn(12, (2, 5, 6), dtype),)

    return [
        LayerCase("post-LN (the paper), residual dropout 0.2",
                  lambda: AddNormBlock(6, 0.2, False, backend.host_rng(10)), x, dropout_seed=7),
        LayerCase("pre-LN, residual dropout 0.2",
                  lambda: AddNormBlock(6, 0.2, True, backend.host_rng(10)), x, dropout_seed=7),
    ]


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

cache (an ExitCache, of this exit):
    cache.norm     the LayerNorm's cache (post-LN), None for pre-LN
    cache.dropout  the residual dropout's cache

self.norm_first is True for pre-LN. self._norm_backward(d, cache.norm) is the
LayerNorm's backward (it adds dgamma and dbeta into self.grads); self.dropout.backward(d,
cache.dropout) the dropout's.

Return (dx, ds): the gradient of exit's x along the residual path, and of the
sub-layer's output s.""",
            engine=add_norm_exit_backward,
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
    forwards={(AddNorm, "exit"): add_norm_exit},
    intro="""\
The residual block around every sub-layer, split in two steps so any sub-layer fits
between them (s_in, c_in = enter(x); s = sublayer(s_in); y, c_out = exit(x, s)):

    post-LN (the paper):  y = LayerNorm(x + Dropout(Sublayer(x)))
    pre-LN:               y = x + Dropout(Sublayer(LayerNorm(x)))

It is checked around a linear sub-layer, y = exit(x, Linear(enter(x))), in both forms.""",
    imports="from scratchformer.engine.nn.layers import AddNormCache",
    cases=_add_norm_cases,
    drawn=draw_layers.add_norm,
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
    uses=always("every Add & Norm around every sub-layer"),
)


__all__ = ["ADD_NORM", "FFN", "MULTI_HEAD_ATTENTION", "padding_mask", "seeded_randn"]
