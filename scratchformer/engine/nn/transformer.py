"""Encoder and decoder layers and stacks (section 3.1, Figure 1).

EncoderLayer:  self-attention, then FFN, each inside Add & Norm.
DecoderLayer:  masked self-attention, encoder-decoder (cross) attention, FFN.
Encoder/Decoder: positions + dropout on the (already scaled) token embeddings, N
layers, and for pre-LN a final LayerNorm.

Inference runs the same forward code with dropout off and drops each cache as soon as
it is made: ``Encoder.infer`` layer by layer, and ``DecoderLayer.step`` /
``Decoder.step``, which advance a ``KVCache`` (nn/kv.py, the decoding state).

Dimension key: ``B`` batch, ``S`` source length, ``T`` target length, ``D`` d_model,
``H`` heads, ``Dh`` d_k, ``Dv`` d_v, ``K`` beams per sentence, ``R = B * K`` decoding
rows, ``C`` kv capacity (target positions).
"""

from __future__ import annotations

from typing import NamedTuple

from scratchformer.engine import backend
from scratchformer.engine.nn.attention import (
    MultiHeadAttention,
    attention_variant,
    set_attention_block,
)
from scratchformer.engine.nn.kv import DecodeStateError, KVCache, LayerKV, init_self_kv
from scratchformer.engine.nn.layers import (
    AddNorm,
    AddNormCache,
    Dropout,
    FeedForwardCache,
    LayerNorm,
    PositionalEncoding,
    PositionwiseFeedForward,
)
from scratchformer.engine.nn.module import Module, ModuleList


def make_self_attention(cfg, rng, causal: bool) -> MultiHeadAttention:
    """The self-attention module ``cfg`` asks for: the variant ``cfg.attention``
    (an encoder uses ``cfg.encoder_attention`` when set), made from the config. A
    causal-only variant refuses a non-causal stack rather than attend to the future."""
    kind = cfg.attention
    if not causal and cfg.encoder_attention is not None:
        kind = cfg.encoder_attention
    return attention_variant(kind).from_config(cfg, rng, causal=causal)


def _sublayer_infer(addnorm: AddNorm, x, sublayer):
    """Add & Norm around ``sublayer`` at inference: the training forward's ``enter`` and
    ``exit`` with dropout off and their caches dropped, so post-LN ``LN(x + sublayer(x))``
    and pre-LN ``x + sublayer(LN(x))`` are computed by the same code as in training."""
    s_in, _ = addnorm.enter(x)
    return addnorm.exit(x, sublayer(s_in))[0]


def _ffn_infer(ffn: PositionwiseFeedForward):
    """The feed-forward sub-layer at inference: its forward, dropout off, cache dropped."""
    return lambda f_in: ffn.forward(f_in)[0]


class SublayerCache(NamedTuple):
    enter: AddNormCache  # LayerNorm before the sub-layer (pre-LN) or nothing
    sublayer: object  # the sub-layer's own cache
    exit: AddNormCache  # dropout + residual (+ LayerNorm for post-LN)


class SelfAttentionLayerCache(NamedTuple):
    self_attn: SublayerCache  # of MultiHeadAttentionCache
    ffn: SublayerCache  # of FeedForwardCache


class SelfAttentionLayer(Module):
    """Self-attention and FFN, each inside Add & Norm: the encoder's layer
    (``EncoderLayer``) and, with causal self-attention, the decoder-only language
    model's (``CausalLayer``, whose self-attention is causal). The caller passes the
    padding mask; a causal layer's attention adds the causal part itself."""

    causal = False

    def __init__(self, cfg, rng):
        super().__init__()
        D, pre = cfg.d_model, cfg.norm == "pre"
        self.self_attn = make_self_attention(cfg, rng, causal=self.causal)
        self.self_attn_norm = AddNorm(D, cfg.P_drop, pre, cfg.ln_eps)
        self.ffn = PositionwiseFeedForward(D, cfg.d_ff, cfg.activation, cfg.P_drop_ffn, rng)
        self.ffn_norm = AddNorm(D, cfg.P_drop, pre, cfg.ln_eps)

    def forward(self, x, mask, rng=None):
        """x (B, S, D), mask bool broadcastable to (B, 1, S, S) (padding: (B, 1, 1, S))
        ->  (B, S, D)."""
        a_in, c1 = self.self_attn_norm.enter(x)
        a, c2 = self.self_attn.forward(a_in, a_in, mask, rng)
        x, c3 = self.self_attn_norm.exit(x, a, rng)
        f_in, c4 = self.ffn_norm.enter(x)
        f, c5 = self.ffn.forward(f_in, rng)
        x, c6 = self.ffn_norm.exit(x, f, rng)
        return x, SelfAttentionLayerCache(SublayerCache(c1, c2, c3), SublayerCache(c4, c5, c6))

    def backward(self, dout, cache: SelfAttentionLayerCache):
        """The forward's six steps in reverse; ``a_in`` fed both the queries and the
        keys/values of self-attention, so its gradient is the sum of both."""
        c = cache.ffn
        dx, df = self.ffn_norm.exit_backward(dout, c.exit)
        dx = dx + self.ffn_norm.enter_backward(self.ffn.backward(df, c.sublayer), c.enter)
        c = cache.self_attn
        dx_res, da = self.self_attn_norm.exit_backward(dx, c.exit)
        da_q, da_kv = self.self_attn.backward(da, c.sublayer)
        return dx_res + self.self_attn_norm.enter_backward(da_q + da_kv, c.enter)


class EncoderLayer(SelfAttentionLayer):
    """The encoder's layer: self-attention over the whole (padded) source."""


class CausalLayer(SelfAttentionLayer):
    """A decoder-only layer: causal self-attention and FFN (no cross-attention), with
    incremental decoding (``init_kv`` / ``step``) as ``DecoderLayer``'s."""

    causal = True

    def init_kv(self, rows: int, capacity: int, dtype) -> LayerKV:
        self_k, self_v = init_self_kv(self.self_attn, rows, capacity, dtype)
        return LayerKV(self_k, self_v, None, None)

    def step(self, x, kv: LayerKV, length: int):
        """x (R, T, D) at positions ``length .. length + T - 1``  ->  (R, T, D)."""
        x = _sublayer_infer(self.self_attn_norm, x, lambda a: self.self_attn.step(a, kv, length))
        return _sublayer_infer(self.ffn_norm, x, _ffn_infer(self.ffn))


class DecoderLayerCache(NamedTuple):
    self_attn: SublayerCache  # of MultiHeadAttentionCache (masked)
    cross_attn: SublayerCache  # of MultiHeadAttentionCache (queries from the decoder)
    ffn: SublayerCache  # of FeedForwardCache


class DecoderLayer(Module):
    def __init__(self, cfg, rng):
        super().__init__()
        D, pre = cfg.d_model, cfg.norm == "pre"
        self.self_attn = make_self_attention(cfg, rng, causal=True)
        self.self_attn_norm = AddNorm(D, cfg.P_drop, pre, cfg.ln_eps)
        self.cross_attn = MultiHeadAttention.from_config(cfg, rng)
        self.cross_attn_norm = AddNorm(D, cfg.P_drop, pre, cfg.ln_eps)
        self.ffn = PositionwiseFeedForward(D, cfg.d_ff, cfg.activation, cfg.P_drop_ffn, rng)
        self.ffn_norm = AddNorm(D, cfg.P_drop, pre, cfg.ln_eps)

    def forward(self, y, memory, self_mask, cross_mask, rng=None):
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

    def backward(self, dout, cache: DecoderLayerCache):
        """Returns ``(dy, dmemory)``: the forward's nine steps in reverse."""
        c = cache.ffn
        dy, df = self.ffn_norm.exit_backward(dout, c.exit)
        dy = dy + self.ffn_norm.enter_backward(self.ffn.backward(df, c.sublayer), c.enter)
        c = cache.cross_attn
        dy_res, dx = self.cross_attn_norm.exit_backward(dy, c.exit)
        dx_q, dmemory = self.cross_attn.backward(dx, c.sublayer)
        dy = dy_res + self.cross_attn_norm.enter_backward(dx_q, c.enter)
        c = cache.self_attn
        dy_res, da = self.self_attn_norm.exit_backward(dy, c.exit)
        da_q, da_kv = self.self_attn.backward(da, c.sublayer)
        return dy_res + self.self_attn_norm.enter_backward(da_q + da_kv, c.enter), dmemory

    def init_kv(self, memory, rows: int, capacity: int) -> LayerKV:
        """Empty self-attention buffers for ``rows`` rows and ``capacity`` positions, and
        the cross-attention keys/values of ``memory`` (B, S, D), computed here, once."""
        cross_k, cross_v = self.cross_attn.project_kv(memory)  # (B, H, S, Dh), (B, H, S, Dv)
        self_k, self_v = init_self_kv(self.self_attn, rows, capacity, memory.dtype)
        return LayerKV(self_k, self_v, cross_k, cross_v)

    def step(self, y, kv: LayerKV, length: int, src_mask, beams: int):
        """Advance one layer by ``T`` new target positions, inference only.

        y (R, T, D): the layer input at positions ``length .. length + T - 1``, R = B * K
        kv: this layer's state; the new keys/values are written at ``length ..``
        src_mask (B, 1, 1, S); beams K  ->  (R, T, D)

        1. self-attention: project the new positions' K/V, store them in the buffer,
           attend over positions ``0 .. length + T - 1`` (causal within the new block);
        2. cross-attention: queries reshaped (R, T, D) -> (B, K*T, D) against the
           sentence's shared keys (B, H, S, Dh), then back;
        3. the feed-forward network. Each inside its Add & Norm, dropout off.
        """
        R, T, D = y.shape

        def cross_attend(x_in):
            B = R // beams
            q = x_in.reshape(B, beams * T, D)  # (B, K*T, D): beams as extra queries
            out = self.cross_attn.infer(q, kv.cross_k, kv.cross_v, src_mask)  # (B, K*T, D)
            return out.reshape(R, T, D)

        y = _sublayer_infer(self.self_attn_norm, y, lambda a: self.self_attn.step(a, kv, length))
        y = _sublayer_infer(self.cross_attn_norm, y, cross_attend)
        return _sublayer_infer(self.ffn_norm, y, _ffn_infer(self.ffn))


class StackCache(NamedTuple):
    positions: object  # positional's: adding positions to the embeddings
    dropout: object  # dropout's: dropout on embeddings + positions
    layers: list  # one cache per layer
    norm: object  # layernorm's (or None): final LayerNorm (pre-LN only)


class _Stack(Module):
    """What every stack has: positions, embedding dropout, N layers of ``layer_class``,
    and for pre-LN a final LayerNorm."""

    layer_class: type

    def __init__(self, cfg, n_layers, rng):
        super().__init__()
        self.pos = PositionalEncoding(cfg.max_len, cfg.d_model, cfg.positions, rng)
        self.dropout = Dropout(cfg.P_drop)
        self.layers = ModuleList(self.layer_class(cfg, rng) for _ in range(n_layers))
        self.norm = LayerNorm(cfg.d_model, cfg.ln_eps) if cfg.norm == "pre" else None
        set_attention_block(self.layers, getattr(cfg, "attention_block", None))

    def _kv_capacity(self, capacity):
        """A kv's capacity in positions: ``max_len`` by default, never beyond it."""
        capacity = self.pos.max_len if capacity is None else int(capacity)
        if not 1 <= capacity <= self.pos.max_len:
            raise DecodeStateError(
                f"kv capacity {capacity} must be in [1, {self.pos.max_len}] (config.max_len)"
            )
        return capacity

    def _enter(self, x, rng, offset=0):
        x, c_pos = self.pos.forward(x, offset)
        x, c_drop = self.dropout.forward(x, rng)
        return x, c_pos, c_drop

    def _exit(self, x):
        return self.norm.forward(x) if self.norm is not None else (x, None)

    def _exit_backward(self, dout, cache: StackCache):
        return self.norm.backward(dout, cache.norm) if self.norm is not None else dout

    def _enter_backward(self, dx, cache: StackCache):
        return self.pos.backward(self.dropout.backward(dx, cache.dropout), cache.positions)


class SelfAttentionStack(_Stack):
    """A stack of ``SelfAttentionLayer``s: the encoder, and the decoder-only language
    model's ``CausalStack``."""

    def forward(self, x, mask, rng=None):
        """x (B, L, D) scaled token embeddings, mask bool broadcastable to (B, 1, L, L)
        (padding: (B, 1, 1, L))  ->  (B, L, D)."""
        x, c_pos, c_drop = self._enter(x, rng)
        caches = []
        for layer in self.layers:
            x, c = layer.forward(x, mask, rng)
            caches.append(c)
        x, c_norm = self._exit(x)
        return x, StackCache(c_pos, c_drop, caches, c_norm)

    def backward(self, dout, cache: StackCache):
        dx = self._exit_backward(dout, cache)
        for layer, c in zip(reversed(self.layers), reversed(cache.layers)):
            dx = layer.backward(dx, c)
        return self._enter_backward(dx, cache)

    def infer(self, x, mask):
        """``forward(x, mask)[0]`` with dropout off, each layer's cache dropped as soon as
        the layer returns (so only one layer's activations are alive at a time)."""
        x, _, _ = self._enter(x, None)
        for layer in self.layers:
            x, _ = layer.forward(x, mask)
        return self._exit(x)[0]


class Encoder(SelfAttentionStack):
    """Source embeddings to memory: ``forward(x, src_mask)`` with a (B, 1, 1, S) padding
    mask."""

    layer_class = EncoderLayer


class Decoder(_Stack):
    layer_class = DecoderLayer

    def forward(self, y, memory, self_mask, cross_mask, rng=None):
        """y (B, T, D) scaled token embeddings, memory (B, S, D)  ->  (B, T, D)."""
        y, c_pos, c_drop = self._enter(y, rng)
        caches = []
        for layer in self.layers:
            y, c = layer.forward(y, memory, self_mask, cross_mask, rng)
            caches.append(c)
        y, c_norm = self._exit(y)
        return y, StackCache(c_pos, c_drop, caches, c_norm)

    def backward(self, dout, cache: StackCache):
        """Returns ``(dy, dmemory)``; every layer's cross-attention adds into dmemory."""
        dy = self._exit_backward(dout, cache)
        dmemory = 0.0
        for layer, c in zip(reversed(self.layers), reversed(cache.layers)):
            dy, dm = layer.backward(dy, c)
            dmemory = dmemory + dm
        return self._enter_backward(dy, cache), dmemory

    def init_kv(self, memory, src_mask, beams: int = 1, capacity: int | None = None,
                padded: bool = True) -> KVCache:
        """A fresh decoding state for ``memory`` (B, S, D), ``src_mask`` (B, 1, 1, S) and
        ``beams`` rows per sentence, holding up to ``capacity`` target positions
        (default: the position table's ``max_len``); ``padded``: whether any source may
        be padded (False: cross-attention runs without its mask). Cross-attention
        keys/values are computed here, once per sentence and layer."""
        capacity = self._kv_capacity(capacity)
        if beams < 1:
            raise DecodeStateError(f"beams must be >= 1, got {beams}")
        rows = memory.shape[0] * beams
        layers = [layer.init_kv(memory, rows, capacity) for layer in self.layers]
        return KVCache(layers, src_mask, beams, padded=padded)

    def step(self, y, kv: KVCache):
        """y (R, T, D) scaled embeddings of the next T target tokens  ->  (R, T, D).

        Positions are ``kv.length .. kv.length + T - 1``; ``kv.length`` advances by T.
        """
        T = y.shape[1]
        kv.check_step(y.shape[0], T)
        y, _, _ = self._enter(y, None, kv.length)
        for layer, lkv in zip(self.layers, kv.layers):
            y = layer.step(y, lkv, kv.length, kv.cross_mask, kv.beams)
        kv.length += T
        return self._exit(y)[0]


class CausalStack(SelfAttentionStack):
    """The decoder-only stack: positions, dropout, ``CausalLayer`` x N, final norm (pre-LN).

    ``forward(x, mask)`` with a (B, 1, 1, T) padding mask (its attention is causal);
    decoding with ``init_kv`` /
    ``step`` as the decoder's, without cross-attention."""

    layer_class = CausalLayer

    def init_kv(self, rows: int, capacity: int | None = None, dtype=None) -> KVCache:
        capacity = self._kv_capacity(capacity)
        dtype = backend.get_dtype() if dtype is None else dtype
        layers = [layer.init_kv(rows, capacity, dtype) for layer in self.layers]
        return KVCache(layers, None, 1)

    def step(self, x, kv: KVCache):
        """x (R, T, D) scaled embeddings of the next T tokens  ->  (R, T, D)."""
        T = x.shape[1]
        kv.check_step(x.shape[0], T)
        x, _, _ = self._enter(x, None, kv.length)
        for layer, lkv in zip(self.layers, kv.layers):
            x = layer.step(x, lkv, kv.length)
        kv.length += T
        return self._exit(x)[0]


__all__ = [
    "CausalLayer",
    "CausalStack",
    "Decoder",
    "DecoderLayer",
    "Encoder",
    "EncoderLayer",
    "FeedForwardCache",
    "SelfAttentionLayer",
    "SelfAttentionStack",
    "StackCache",
    "make_self_attention",
]
