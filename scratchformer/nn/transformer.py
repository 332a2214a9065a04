"""Encoder and decoder layers and stacks (section 3.1, Figure 1).

EncoderLayer:  self-attention, then FFN, each inside Add & Norm.
DecoderLayer:  masked self-attention, encoder-decoder (cross) attention, FFN.
Encoder/Decoder: positions + dropout on the (already scaled) token embeddings, N
layers, and for pre-LN a final LayerNorm.

Inference (decoding) has its own lean paths that build no backward caches:
``EncoderLayer.infer`` / ``Encoder.infer`` and ``DecoderLayer.step`` / ``Decoder.step``,
which advance a ``KVCache`` (the decoding state, "kv"; not a backward cache).

Dimension key: ``B`` batch, ``S`` source length, ``T`` target length, ``D`` d_model,
``H`` heads, ``Dh`` d_k, ``Dv`` d_v, ``K`` beams per sentence, ``R = B * K`` decoding
rows, ``C`` kv capacity (target positions).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from scratchformer import backend
from scratchformer.backend import xp
from scratchformer.errors import ScratchformerError
from scratchformer.nn.attention import (
    MultiHeadAttention,
    MultiHeadAttentionCache,
    self_attention_input_grad,
    set_attention_block,
)
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
from scratchformer.ops.layernorm import LayerNormCache, layernorm_forward
from scratchformer.ops.positional import PositionalCache


def _attention_kwargs(cfg):
    return dict(d_k=cfg.d_k, d_v=cfg.d_v, P_drop_attn=cfg.P_drop_attn)


def make_self_attention(cfg, rng, causal: bool) -> MultiHeadAttention:
    """The self-attention module ``cfg`` asks for (``cfg.attention``; an encoder uses
    ``cfg.encoder_attention`` when set): dense, relative (Shaw), relative_skew (Music
    Transformer) or local (Image Transformer). The causal-only variants refuse a
    non-causal stack rather than silently attending to the future."""
    from scratchformer.nn.local_attention import LocalMultiHeadAttention  # noqa: PLC0415
    from scratchformer.nn.relative_attention import (  # noqa: PLC0415
        RelativeMultiHeadAttention,
        SkewMultiHeadAttention,
    )

    kind = getattr(cfg, "attention", "dense")
    if not causal and getattr(cfg, "encoder_attention", None) is not None:
        kind = cfg.encoder_attention
    D, kw = cfg.d_model, _attention_kwargs(cfg)
    if kind == "dense":
        return MultiHeadAttention(D, cfg.h, rng=rng, **kw)
    if kind == "relative":
        k = cfg.max_relative_position
        return RelativeMultiHeadAttention(D, cfg.h, rng=rng, max_relative_position=k, **kw)
    if not causal:
        raise ValueError(
            f"attention={kind!r} is causal only (it needs the causal mask) and cannot serve "
            "an encoder: set encoder_attention='dense' or 'relative' in the config"
        )
    if kind == "relative_skew":
        k = cfg.max_relative_position
        return SkewMultiHeadAttention(D, cfg.h, rng=rng, max_relative_position=k, **kw)
    if kind == "local":
        return LocalMultiHeadAttention(D, cfg.h, rng=rng, block=cfg.local_block, **kw)
    raise ValueError(f"unknown attention {kind!r}")


def _init_self_kv(sa, rows: int, capacity: int, dtype):
    """Self-attention decoding buffers: ``capacity`` positions, or the ring of a local
    attention (``sa.kv_slots()``, 2 blocks)."""
    slots = sa.kv_slots() if hasattr(sa, "kv_slots") else capacity
    self_k = xp.zeros((rows, sa.h, slots, sa.d_k), dtype=dtype)
    self_v = xp.zeros((rows, sa.h, slots, sa.d_v), dtype=dtype)
    return self_k, self_v


def _self_attend_step(sa, a_in, kv, length: int):
    """Incremental self-attention of a_in (R, T, D) at positions ``length ..``: the
    variant's own ``step`` (relative positions, local ring) or the dense one."""
    if hasattr(sa, "step"):
        return sa.step(a_in, kv, length)
    return sa.infer(a_in, *sa.append_kv(a_in, kv, length))


# -- inference helpers: the forward math with dropout off and every cache dropped --------
def _layernorm_infer(norm: LayerNorm, x):
    return layernorm_forward(x, norm.params["gamma"], norm.params["beta"], norm.eps)[0]


def _sublayer_infer(addnorm: AddNorm, x, sublayer):
    """post-LN ``LN(x + sublayer(x))`` or pre-LN ``x + sublayer(LN(x))``, no dropout."""
    if addnorm.norm_first:
        return x + sublayer(_layernorm_infer(addnorm, x))
    return _layernorm_infer(addnorm, x + sublayer(x))


def _ffn_infer(ffn: PositionwiseFeedForward, x):
    """``act(x W_1 + b_1) W_2 + b_2``: (..., D) -> (..., D)."""
    p = ffn.params
    a, _ = ffn.act_forward(x @ p["W_1"] + p["b_1"])  # (..., F)
    return a @ p["W_2"] + p["b_2"]


class DecodeStateError(ScratchformerError):
    """A decoding step does not fit its kv (wrong number of rows, capacity exceeded)."""


@dataclass
class LayerKV:
    """One decoder layer's decoding state.

    self_k (R, H, C, Dh), self_v (R, H, C, Dv): preallocated buffers of the masked
        self-attention's keys/values; positions ``0 .. KVCache.length - 1`` are filled.
        A local-attention layer holds a ring of ``2 * local_block`` slots instead
        (position p in slot ``p % (2 * local_block)``, see nn/local_attention.py).
    cross_k, cross_v: None in a decoder-only language model.
    cross_k (B, H, S, Dh), cross_v (B, H, S, Dv): the encoder-decoder attention's
        keys/values, projected from the encoder output ONCE PER SENTENCE (not per beam).
        The K beams of a sentence share them: ``DecoderLayer.step`` folds the beams into
        the query axis, ``(B*K, T, D) -> (B, K*T, D)``, so the K beams are K more queries
        against the same (B, H, S, Dh) keys, with no copy and no recomputation.
    """

    self_k: object
    self_v: object
    cross_k: object
    cross_v: object


@dataclass
class KVCache:
    """The decoding state of a decoder stack, advanced one step at a time.

    Rows are sentence-major: row ``r`` is beam ``r % K`` of sentence ``r // K``
    (``K = beams``; greedy decoding has K = 1), so ``R = B * K``.

    layers     one ``LayerKV`` per decoder layer
    src_mask   (B, 1, 1, S) bool, True at real source tokens (cross-attention keys);
               None for a decoder-only language model (no cross-attention)
    beams      K, rows per sentence
    length     target positions already stored; the next step's inputs sit at
               positions ``length, length + 1, ...`` (the positional-encoding offset)

    limit      the most positions a step may reach (the position table's); local
               attention keeps only a ring of 2 blocks, so its buffers are shorter

    ``reorder(rows, sentences)`` is called after each beam-search step: new row ``i``
    continues old row ``rows[i]`` (a surviving beam's parent), and finished sentences
    can be dropped at the same time.
    """

    layers: list
    src_mask: object
    beams: int
    length: int = 0
    limit: int | None = None  # most target positions; None: the buffers' length

    @property
    def rows(self) -> int:
        """R = B * K."""
        return int(self.layers[0].self_k.shape[0])

    @property
    def sentences(self) -> int:
        """B, the sentences whose cross-attention keys are held."""
        if self.src_mask is None:
            return self.rows // self.beams
        return int(self.src_mask.shape[0])

    @property
    def capacity(self) -> int:
        """C, the most target positions a step may reach."""
        return int(self.layers[0].self_k.shape[2]) if self.limit is None else int(self.limit)

    def check_step(self, rows: int, T: int) -> None:
        """A step of ``T`` new positions for ``rows`` rows must fit this kv."""
        if rows != self.rows:
            raise DecodeStateError(f"step got {rows} rows, the kv holds {self.rows}")
        if self.length + T > self.capacity:
            raise DecodeStateError(
                f"step would fill position {self.length + T - 1}, beyond the kv capacity "
                f"of {self.capacity} positions"
            )

    def reorder(self, rows, sentences=None) -> None:
        """Keep, for each new row ``i``, the self-attention keys/values of old row ``rows[i]``.

        rows (R',) int: parent row of each new row (repeats allowed: two beams may grow
            from one parent), sentence-major with K rows per sentence, so new row ``i``
            must belong to new sentence ``i // K``.
        sentences (B',) int or None: old sentence of each new sentence (drop finished
            ones); None keeps all. R' must equal B' * K.

        Only the ``length`` filled positions are copied; an identity ``rows`` is free.
        """
        np = backend.np
        rows_h = np.asarray(backend.asnumpy(rows), dtype=np.int64).reshape(-1)
        n_sent = self.sentences if sentences is None else len(sentences)
        if n_sent > self.sentences:
            raise DecodeStateError(f"reorder: {n_sent} sentences kept of {self.sentences}")
        if rows_h.size != n_sent * self.beams:
            raise DecodeStateError(
                f"reorder: {rows_h.size} rows for {n_sent} sentences of {self.beams} beams"
            )
        if rows_h.size and (rows_h.min() < 0 or rows_h.max() >= self.rows):
            raise DecodeStateError(f"reorder: row index out of range for {self.rows} rows")
        if sentences is not None and self.src_mask is not None:
            sent = backend.asarray(np.asarray(backend.asnumpy(sentences), dtype=np.int64))
            self.src_mask = self.src_mask[sent]
            for lkv in self.layers:
                lkv.cross_k, lkv.cross_v = lkv.cross_k[sent], lkv.cross_v[sent]
        if rows_h.size == self.rows and np.array_equal(rows_h, np.arange(self.rows)):
            return
        idx, n = backend.asarray(rows_h), rows_h.size
        for lkv in self.layers:
            for name in ("self_k", "self_v"):
                buf = getattr(lkv, name)
                t = min(self.length, buf.shape[2])  # a local ring holds fewer slots
                # Fancy indexing copies first, so writing into the same buffer is safe.
                buf[:n, :, :t] = buf[idx, :, :t]
                setattr(lkv, name, buf[:n])


class SublayerCache(NamedTuple):
    enter: AddNormCache  # LayerNorm before the sub-layer (pre-LN) or nothing
    sublayer: object  # the sub-layer's own cache
    exit: AddNormCache  # dropout + residual (+ LayerNorm for post-LN)


class EncoderLayerCache(NamedTuple):
    self_attn: SublayerCache  # of MultiHeadAttentionCache
    ffn: SublayerCache  # of FeedForwardCache


class EncoderLayer(Module):
    """Self-attention and FFN. ``CausalLayer`` is the same with causal self-attention
    (the decoder-only language model's layer)."""

    causal = False

    def __init__(self, cfg, rng):
        super().__init__()
        D, pre = cfg.d_model, cfg.norm == "pre"
        self.self_attn = make_self_attention(cfg, rng, causal=self.causal)
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
        da_in = self_attention_input_grad(da_q, da_kv)
        return dx_res + self.self_attn_norm.enter_backward(da_in, c.enter)

    def infer(self, x, mask):
        """Inference forward (no dropout, no caches): x (B, S, D), mask (B, 1, 1, S)
        -> (B, S, D), equal to ``forward(x, mask)[0]``."""
        sa = self.self_attn

        def attend(a_in):
            return sa.infer(a_in, *sa.project_kv(a_in), mask)

        x = _sublayer_infer(self.self_attn_norm, x, attend)
        return _sublayer_infer(self.ffn_norm, x, lambda f_in: _ffn_infer(self.ffn, f_in))


class CausalLayer(EncoderLayer):
    """A decoder-only layer: causal self-attention and FFN (no cross-attention).

    ``forward``/``backward`` are EncoderLayer's (the caller passes the causal mask);
    ``step`` advances the decoding kv as ``DecoderLayer.step`` does."""

    causal = True

    def init_kv(self, rows: int, capacity: int, dtype) -> LayerKV:
        self_k, self_v = _init_self_kv(self.self_attn, rows, capacity, dtype)
        return LayerKV(self_k, self_v, None, None)

    def step(self, x, kv: LayerKV, length: int):
        """x (R, T, D) at positions ``length .. length + T - 1``  ->  (R, T, D)."""
        sa = self.self_attn
        x = _sublayer_infer(self.self_attn_norm, x, lambda a: _self_attend_step(sa, a, kv, length))
        return _sublayer_infer(self.ffn_norm, x, lambda f_in: _ffn_infer(self.ffn, f_in))


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
        da_in = self_attention_input_grad(da_q, da_kv)
        return dy_res + self.self_attn_norm.enter_backward(da_in, c.enter), dmemory

    def init_kv(self, memory, rows: int, capacity: int) -> LayerKV:
        """Empty self-attention buffers for ``rows`` rows and ``capacity`` positions, and
        the cross-attention keys/values of ``memory`` (B, S, D), computed here, once."""
        cross_k, cross_v = self.cross_attn.project_kv(memory)  # (B, H, S, Dh), (B, H, S, Dv)
        self_k, self_v = _init_self_kv(self.self_attn, rows, capacity, memory.dtype)
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
        sa = self.self_attn

        def self_attend(a_in):
            return _self_attend_step(sa, a_in, kv, length)

        def cross_attend(x_in):
            B = R // beams
            q = x_in.reshape(B, beams * T, D)  # (B, K*T, D): beams as extra queries
            out = self.cross_attn.infer(q, kv.cross_k, kv.cross_v, src_mask)  # (B, K*T, D)
            return out.reshape(R, T, D)

        y = _sublayer_infer(self.self_attn_norm, y, self_attend)
        y = _sublayer_infer(self.cross_attn_norm, y, cross_attend)
        return _sublayer_infer(self.ffn_norm, y, lambda f_in: _ffn_infer(self.ffn, f_in))


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

    def infer(self, x, mask):
        """Inference forward (no dropout, no caches): x (B, S, D) scaled token
        embeddings, mask (B, 1, 1, S)  ->  memory (B, S, D)."""
        x = self.pos.forward(x)[0]
        for layer in self.layers:
            x = layer.infer(x, mask)
        return _layernorm_infer(self.norm, x) if self.norm is not None else x


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

    def init_kv(self, memory, src_mask, beams: int = 1, capacity: int | None = None) -> KVCache:
        """A fresh decoding state for ``memory`` (B, S, D), ``src_mask`` (B, 1, 1, S) and
        ``beams`` rows per sentence, holding up to ``capacity`` target positions
        (default: the position table's ``max_len``). Cross-attention keys/values are
        computed here, once per sentence and layer."""
        capacity = self._kv_capacity(capacity)
        if beams < 1:
            raise DecodeStateError(f"beams must be >= 1, got {beams}")
        rows = memory.shape[0] * beams
        layers = [layer.init_kv(memory, rows, capacity) for layer in self.layers]
        return KVCache(layers, src_mask, beams, 0, capacity)

    def step(self, y, kv: KVCache):
        """y (R, T, D) scaled embeddings of the next T target tokens  ->  (R, T, D).

        Positions are ``kv.length .. kv.length + T - 1``; ``kv.length`` advances by T.
        """
        T = y.shape[1]
        kv.check_step(y.shape[0], T)
        y = self.pos.forward(y, kv.length)[0]
        for layer, lkv in zip(self.layers, kv.layers):
            y = layer.step(y, lkv, kv.length, kv.src_mask, kv.beams)
        kv.length += T
        return _layernorm_infer(self.norm, y) if self.norm is not None else y


class CausalStack(Encoder):
    """The decoder-only stack: positions, dropout, ``CausalLayer`` x N, final norm (pre-LN).

    ``forward(x, mask)`` as the encoder's, with a causal (B, 1, T, T) mask; decoding with
    ``init_kv`` / ``step`` as the decoder's, without cross-attention."""

    layer_class = CausalLayer

    def init_kv(self, rows: int, capacity: int | None = None, dtype=None) -> KVCache:
        capacity = self._kv_capacity(capacity)
        dtype = backend.get_dtype() if dtype is None else dtype
        layers = [layer.init_kv(rows, capacity, dtype) for layer in self.layers]
        return KVCache(layers, None, 1, 0, capacity)

    def step(self, x, kv: KVCache):
        """x (R, T, D) scaled embeddings of the next T tokens  ->  (R, T, D)."""
        T = x.shape[1]
        kv.check_step(x.shape[0], T)
        x = self.pos.forward(x, kv.length)[0]
        for layer, lkv in zip(self.layers, kv.layers):
            x = layer.step(x, lkv, kv.length)
        kv.length += T
        return _layernorm_infer(self.norm, x) if self.norm is not None else x


__all__ = [
    "CausalLayer",
    "CausalStack",
    "make_self_attention",
    "DecodeStateError",
    "KVCache",
    "LayerKV",
    "Decoder",
    "DecoderLayer",
    "Encoder",
    "EncoderLayer",
    "MultiHeadAttentionCache",
    "FeedForwardCache",
]
