"""Modules and inputs of sizes drawn afresh on every run of ``check`` (the layers'
counterpart of draw.py): a batch of 1 and a batch of more, with d_model, the heads,
d_k, d_v, d_ff and the lengths drawn, so that no size of the designed cases can be
written into a learner's backward. Kept small: the finite differences cover every entry.
"""

from __future__ import annotations

from scratchformer.engine import backend
from scratchformer.engine.models.config import TransformerConfig
from scratchformer.engine.nn.attention import MultiHeadAttention
from scratchformer.engine.nn.layers import PositionwiseFeedForward
from scratchformer.engine.nn.transformer import DecoderLayer, EncoderLayer
from scratchformer.exercises.draw import padding_mask, size
from scratchformer.exercises.layer import AddNormBlock, LayerCase
from scratchformer.exercises.spec import DRAWN


def _randn(r, shape):
    """Inputs drawn now from ``r``, cast to the dtype asked for later (halved: logits
    that saturate a softmax leave gradients below the finite differences' rounding)."""
    x = 0.5 * r.standard_normal(shape)
    return lambda dtype: backend.asarray(x, dtype=dtype)


def _lengths(r, B: int, L: int) -> list[int]:
    """Padding: the first row full, the others of drawn lengths from 1 to L."""
    return [L] + [int(r.integers(1, L + 1)) for _ in range(B - 1)]


def _batches(r) -> list[tuple[int, int]]:
    """(batch, length) of the two cases: batch 1, and 2 or 3."""
    return [(1, size(r, 3, 6)), (size(r, 2, 4), size(r, 3, 5))]


def multi_head_attention(r) -> list[LayerCase]:
    found = []
    for n, (B, T) in enumerate(_batches(r)):
        D, H, d_k, d_v = size(r, 3, 7), size(r, 1, 4), size(r, 1, 5), size(r, 1, 5)
        seed = int(r.integers(1 << 30))

        def module(D=D, H=H, d_k=d_k, d_v=d_v, seed=seed, causal=n == 0):
            return MultiHeadAttention(D, H, d_k=d_k, d_v=d_v, P_drop_attn=0.2,
                                      rng=backend.host_rng(seed), causal=causal)

        text = f"{DRAWN}: B {B}, D {D}, H {H}, d_k {d_k}, d_v {d_v}"
        if n == 0:
            x = _randn(r, (B, T, D))
            found.append(LayerCase(f"{text}, causal self-attention T {T}", module,
                                   lambda dt, x=x: (x(dt), x(dt), None),
                                   dropout_seed=31))
        else:
            S = size(r, 2, 7)
            xq, xkv, m = _randn(r, (B, T, D)), _randn(r, (B, S, D)), _lengths(r, B, S)

            def args(dt, xq=xq, xkv=xkv, m=m, S=S):
                return xq(dt), xkv(dt), padding_mask(m, S)

            found.append(LayerCase(f"{text}, cross-attention T {T}, S {S}, padding", module,
                                   args))
    return found


def ffn(r) -> list[LayerCase]:
    found = []
    for n, (B, T) in enumerate(_batches(r)):
        D, F, seed = size(r, 3, 7), size(r, 2, 9), int(r.integers(1 << 30))
        act, p = ("relu", 0.3) if n == 0 else ("gelu", 0.0)
        x = _randn(r, (B, T, D))
        found.append(LayerCase(
            f"{DRAWN}: x ({B}, {T}, {D}), F {F}, {act}, dropout {p}",
            lambda D=D, F=F, act=act, p=p, seed=seed: PositionwiseFeedForward(
                D, F, act, p, backend.host_rng(seed)),
            lambda dt, x=x: (x(dt),), dropout_seed=32 if p else None))
    return found


def add_norm(r) -> list[LayerCase]:
    found = []
    for n, (B, T) in enumerate(_batches(r)):
        D, seed = size(r, 4, 8), int(r.integers(1 << 30))
        first = bool(r.random() < 0.5) if n == 0 else not found[0].label.endswith("pre-LN")
        x = _randn(r, (B, T, D))
        found.append(LayerCase(
            f"{DRAWN}: x ({B}, {T}, {D}), {'pre' if first else 'post'}-LN",
            lambda D=D, first=first, seed=seed: AddNormBlock(D, 0.2, first, backend.host_rng(seed)),
            lambda dt, x=x: (x(dt),), dropout_seed=33))
    return found


def _config(r, norm: str) -> TransformerConfig:
    h = size(r, 1, 3)
    return TransformerConfig(
        vocab_size=10, N=1, d_model=size(r, 4, 6), d_ff=size(r, 2, 6), h=h,
        d_k=size(r, 1, 4), d_v=size(r, 1, 4), P_drop=0.2, P_drop_attn=0.1, norm=norm,
        max_len=16,
    )


def encoder_layer(r) -> list[LayerCase]:
    found = []
    for (B, S), norm in zip(_batches(r), ("post", "pre") if r.random() < 0.5 else ("pre", "post")):
        c, seed = _config(r, norm), int(r.integers(1 << 30))
        x, m = _randn(r, (B, S, c.d_model)), _lengths(r, B, S)
        found.append(LayerCase(
            f"{DRAWN}: x ({B}, {S}, {c.d_model}), {norm}-LN, h {c.h}, d_k {c.d_k}, d_v {c.d_v}",
            lambda c=c, seed=seed: EncoderLayer(c, backend.host_rng(seed)),
            lambda dt, x=x, m=m, S=S: (x(dt), padding_mask(m, S)), dropout_seed=34))
    return found


def decoder_layer(r) -> list[LayerCase]:
    found = []
    batches = [(1, size(r, 3, 5)), (2, size(r, 3, 4))]  # small: the slowest exercise
    for (B, T), norm in zip(batches, ("post", "pre") if r.random() < 0.5 else ("pre", "post")):
        c, seed, S = _config(r, norm), int(r.integers(1 << 30)), size(r, 2, 5)
        y, mem = _randn(r, (B, T, c.d_model)), _randn(r, (B, S, c.d_model))
        mt, ms = _lengths(r, B, T), _lengths(r, B, S)
        found.append(LayerCase(
            f"{DRAWN}: y ({B}, {T}, {c.d_model}), memory S {S}, {norm}-LN, h {c.h}",
            lambda c=c, seed=seed: DecoderLayer(c, backend.host_rng(seed)),
            lambda dt, y=y, mem=mem, mt=mt, ms=ms, T=T, S=S: (
                y(dt), mem(dt), padding_mask(mt, T), padding_mask(ms, S)),
            dropout_seed=35))
    return found


__all__ = ["add_norm", "decoder_layer", "encoder_layer", "ffn", "multi_head_attention"]
