"""Encoder and decoder layers and stacks (section 3.1, Figure 1).

EncoderLayer:  self-attention, then FFN, each inside Add & Norm.
DecoderLayer:  masked self-attention, encoder-decoder (cross) attention, FFN.
Encoder/Decoder: positions + dropout on the (already scaled) token embeddings, N
layers, and for pre-LN a final LayerNorm.

Dimension key: ``B`` batch, ``S`` source length, ``T`` target length, ``D`` d_model.
"""

from __future__ import annotations

from typing import NamedTuple

from scratchformer.nn.attention import MultiHeadAttention, MultiHeadAttentionCache
from scratchformer.nn.layers import (
    AddNorm,
    AddNormCache,
    Dropout,
    FeedForwardCache,
    LayerNorm,
    PositionalEncoding,
    PositionwiseFeedForward,
)
from scratchformer.nn.module import Module, ModuleList
from scratchformer.ops.dropout import DropoutCache
from scratchformer.ops.layernorm import LayerNormCache
from scratchformer.ops.positional import PositionalCache


def _attention_kwargs(cfg):
    return dict(d_k=cfg.d_k, d_v=cfg.d_v, p_attn_drop=cfg.P_drop_attn)


class SublayerCache(NamedTuple):
    enter: AddNormCache  # LayerNorm before the sub-layer (pre-LN) or nothing
    sublayer: object  # the sub-layer's own cache
    exit: AddNormCache  # dropout + residual (+ LayerNorm for post-LN)


class EncoderLayerCache(NamedTuple):
    self_attn: SublayerCache  # of MultiHeadAttentionCache
    ffn: SublayerCache  # of FeedForwardCache


class EncoderLayer(Module):
    def __init__(self, cfg, rng):
        super().__init__()
        D, pre = cfg.d_model, cfg.norm == "pre"
        self.self_attn = MultiHeadAttention(D, cfg.h, rng=rng, **_attention_kwargs(cfg))
        self.self_attn_norm = AddNorm(D, cfg.P_drop, pre, cfg.ln_eps)
        self.ffn = PositionwiseFeedForward(D, cfg.d_ff, cfg.activation, cfg.P_drop_ffn, rng)
        self.ffn_norm = AddNorm(D, cfg.P_drop, pre, cfg.ln_eps)

    def forward(self, x, mask, rng=None):
        """x (B, S, D), mask (B, 1, 1, S) True at real tokens  ->  (B, S, D)."""
        a_in, c1 = self.self_attn_norm.enter(x)
        a, c2 = self.self_attn.forward(a_in, a_in, mask, rng)
        x, c3 = self.self_attn_norm.exit(x, a, rng)
        f_in, c4 = self.ffn_norm.enter(x)
        f, c5 = self.ffn.forward(f_in, rng)
        x, c6 = self.ffn_norm.exit(x, f, rng)
        return x, EncoderLayerCache(SublayerCache(c1, c2, c3), SublayerCache(c4, c5, c6))

    def backward(self, dout, cache: EncoderLayerCache):
        c = cache.ffn
        dx, df = self.ffn_norm.exit_backward(dout, c.exit)
        dx = dx + self.ffn_norm.enter_backward(self.ffn.backward(df, c.sublayer), c.enter)
        c = cache.self_attn
        dx_res, da = self.self_attn_norm.exit_backward(dx, c.exit)
        da_q, da_kv = self.self_attn.backward(da, c.sublayer)
        return dx_res + self.self_attn_norm.enter_backward(da_q + da_kv, c.enter)


class DecoderLayerCache(NamedTuple):
    self_attn: SublayerCache  # of MultiHeadAttentionCache (masked)
    cross_attn: SublayerCache  # of MultiHeadAttentionCache (queries from the decoder)
    ffn: SublayerCache  # of FeedForwardCache


class DecoderLayer(Module):
    def __init__(self, cfg, rng):
        super().__init__()
        D, pre = cfg.d_model, cfg.norm == "pre"
        self.self_attn = MultiHeadAttention(D, cfg.h, rng=rng, **_attention_kwargs(cfg))
        self.self_attn_norm = AddNorm(D, cfg.P_drop, pre, cfg.ln_eps)
        self.cross_attn = MultiHeadAttention(D, cfg.h, rng=rng, **_attention_kwargs(cfg))
        self.cross_attn_norm = AddNorm(D, cfg.P_drop, pre, cfg.ln_eps)
        self.ffn = PositionwiseFeedForward(D, cfg.d_ff, cfg.activation, cfg.P_drop_ffn, rng)
        self.ffn_norm = AddNorm(D, cfg.P_drop, pre, cfg.ln_eps)

    def forward(self, y, memory, self_mask, cross_mask, rng=None):
        """y (B, T, D), memory (B, S, D), self_mask (B, 1, T, T) causal and padding,
        cross_mask (B, 1, 1, S) source padding  ->  (B, T, D)."""
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
        """Returns ``(dy, dmemory)``."""
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


class StackCache(NamedTuple):
    positions: PositionalCache  # adding positions to the embeddings
    dropout: DropoutCache  # dropout on embeddings + positions
    layers: list  # one cache per layer
    norm: LayerNormCache | None  # final LayerNorm (pre-LN only)


class _Stack(Module):
    """Shared by Encoder and Decoder: positions, embedding dropout, layers, final norm."""

    layer_class: type = EncoderLayer

    def __init__(self, cfg, n_layers, rng):
        super().__init__()
        self.pos = PositionalEncoding(cfg.max_len, cfg.d_model, cfg.positions, rng)
        self.dropout = Dropout(cfg.P_drop)
        self.layers = ModuleList(self.layer_class(cfg, rng) for _ in range(n_layers))
        self.norm = LayerNorm(cfg.d_model, cfg.ln_eps) if cfg.norm == "pre" else None

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


class Encoder(_Stack):
    layer_class = EncoderLayer

    def forward(self, x, mask, rng=None):
        """x (B, S, D) scaled token embeddings, mask (B, 1, 1, S)  ->  memory (B, S, D)."""
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


__all__ = [
    "Decoder",
    "DecoderLayer",
    "Encoder",
    "EncoderLayer",
    "MultiHeadAttentionCache",
    "FeedForwardCache",
]
