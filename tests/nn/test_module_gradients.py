"""Float64 finite-difference checks of every module: its input gradients and every
parameter, through ``scratchformer.engine.gradcheck.check_module``.

Non-degenerate shapes everywhere: B = 2, H = 3, T = 4 queries, S = 7 keys, d_model 12,
d_k = 5 and d_v = 3 given explicitly (not d_model / h = 4), unit-scale random inputs
and weights (the module's own small initialisation is overwritten), dropout on with its
masks replayed (``rng=<seed>``).

Dimension key: B batch, S source length, T target length, D d_model, H heads,
Dh d_k, Dv d_v, F d_ff, V vocabulary, L max_len.
"""

import numpy as np
import pytest
from arrays import randn

from scratchformer.engine import backend as B
from scratchformer.engine.gradcheck import check_module
from scratchformer.engine.models import TransformerConfig
from scratchformer.engine.models.transformer import padding_mask
from scratchformer.engine.nn import (
    AddNorm,
    Decoder,
    DecoderLayer,
    Dropout,
    Embedding,
    Encoder,
    EncoderLayer,
    LayerNorm,
    Linear,
    Module,
    MultiHeadAttention,
    PositionalEncoding,
    PositionwiseFeedForward,
)
from scratchformer.engine.ops.attention import causal_mask

pytestmark = pytest.mark.usefixtures("backend")

TOL = 1e-6
Bsz, S, T, D, H, DK, DV, F, V, L = 2, 7, 4, 12, 3, 5, 3, 20, 11, 16
PAD = 0


def unit_scale(module, seed=100):
    """Overwrite every parameter with N(0, 1) entries (in place), so that no gradient
    hides behind tiny weights; returns the module."""
    r = np.random.default_rng(seed)
    for p in module.parameters().values():
        p[...] = B.asarray(r.standard_normal(p.shape))
    return module


def assert_passed(report, module, inputs=()):
    """Passed, and the report names every expected input and every parameter."""
    assert report.passed, "\n" + report.table()
    names = [r.name for r in report.rows]
    expected = list(inputs) + list(module.parameters())
    assert names == expected, f"report rows {names}, expected {expected}"
    assert report.max_rel_error < TOL


def cfg(norm="post", positions="sinusoidal", activation="relu"):
    return TransformerConfig(
        vocab_size=V,
        N=2,
        d_model=D,
        d_ff=F,
        h=H,
        d_k=DK,
        d_v=DV,
        P_drop=0.2,
        P_drop_attn=0.1,
        P_drop_ffn=0.1,
        norm=norm,
        positions=positions,
        activation=activation,
        max_len=L,
    )


def src_ids():
    """(B, S) source ids with padding at the end of the second row."""
    return B.asarray(np.array([[3, 4, 5, 6, 7, 8, 9], [4, 6, 8, 10, 3, 0, 0]]))


def tgt_ids():
    """(B, T) decoder input ids with padding at the end of the second row."""
    return B.asarray(np.array([[1, 5, 6, 7], [1, 9, 0, 0]]))


# -- Linear, Embedding, positions, LayerNorm ---------------------------------------------
@pytest.mark.parametrize("bias", [True, False])
def test_linear(bias):
    """Linear: dx and dW (and db when present) add into the module's grads."""
    m = unit_scale(Linear(D, 5, bias=bias))
    assert_passed(check_module(m, randn(0, Bsz, T, D)), m, ["x"])


def test_embedding_lookup_scaled():
    """Embedding: dE of E[ids] * sqrt(D) with repeated ids (pad id set but not used)."""
    m = unit_scale(Embedding(V, D, pad_id=PAD, scale=D**0.5))
    ids = B.asarray(np.array([[3, 4, 3, 3], [10, 4, 1, 2]]))
    assert_passed(check_module(m, ids), m)


class TiedEmbedding(Module):
    """One matrix used twice: lookup (scaled) and output projection h E^T, as the paper ties
    them. out = (E[ids] * scale + x) E^T."""

    def __init__(self):
        super().__init__()
        self.embed = Embedding(V, D, pad_id=PAD, scale=D**0.5)

    def forward(self, ids, x):
        e, c_emb = self.embed.forward(ids)  # (B, T, D)
        logits, c_out = self.embed.project(e + x)  # (B, T, V)
        return logits, (c_emb, c_out)

    def backward(self, dlogits, cache):
        c_emb, c_out = cache
        dh = self.embed.project_backward(dlogits, c_out)
        self.embed.backward(dh, c_emb)
        return dh


def test_embedding_padding_outside_the_vocabulary_unscaled():
    """pad_id = V (padding that is no token, GPT-2's), no scaling (GPT-2's): dE of the
    real positions only; a padded position embeds to zero and gives row 0 (which it
    reads) nothing."""
    m = unit_scale(Embedding(V, D, pad_id=V, scale=1.0))
    ids = B.asarray(np.array([[3, 0, 3, V], [10, 4, V, V]]))
    assert_passed(check_module(m, ids), m)
    out, cache = m.forward(ids)
    np.testing.assert_array_equal(B.asnumpy(out[1, 2:]), np.zeros((2, D)))
    m.zero_grad()
    m.backward(B.asarray(np.ones((Bsz, T, D))), cache)
    np.testing.assert_array_equal(B.asnumpy(m.grads["E"][0]), np.ones(D))  # once, at [0, 1]


def test_embedding_tied_projection():
    """Embedding.project: both uses of E (lookup and h E^T) add into one gradient."""
    m = unit_scale(TiedEmbedding())
    ids = B.asarray(np.array([[3, 4, 3, 9], [10, 4, 1, 2]]))  # no pad: its row is frozen
    assert_passed(check_module(m, ids, randn(0, Bsz, T, D)), m, ["x"])


@pytest.mark.parametrize("offset", [0, 5])
def test_positional_encoding_learned(offset):
    """Learned positions: dx = dout and dP at rows offset .. offset + T - 1."""
    m = unit_scale(PositionalEncoding(L, D, "learned"))
    assert_passed(check_module(m, randn(0, Bsz, T, D), offset=offset), m, ["x"])


def test_positional_encoding_sinusoidal_has_no_parameters():
    """Sinusoidal positions are a constant: only dx is checked, and it is dout."""
    m = PositionalEncoding(L, D, "sinusoidal")
    assert m.parameters() == {}
    report = check_module(m, randn(0, Bsz, T, D), offset=3)
    assert_passed(report, m, ["x"])


def test_layernorm():
    """LayerNorm: dx, dgamma, dbeta with non-trivial gamma and beta."""
    m = unit_scale(LayerNorm(D))
    assert_passed(check_module(m, randn(0, Bsz, T, D, scale=3.0)), m, ["x"])


# -- AddNorm, post-LN and pre-LN -----------------------------------------------------------
class Residual(Module):
    """A Linear sub-layer inside AddNorm, wired exactly as the encoder layer does."""

    def __init__(self, norm_first):
        super().__init__()
        self.sub = Linear(D, D)
        self.addnorm = AddNorm(D, P_drop=0.3, norm_first=norm_first)

    def forward(self, x, rng=None):
        s_in, c_in = self.addnorm.enter(x)
        s, c_s = self.sub.forward(s_in)
        y, c_out = self.addnorm.exit(x, s, rng)
        return y, (c_in, c_s, c_out)

    def backward(self, dy, cache):
        c_in, c_s, c_out = cache
        dx, ds = self.addnorm.exit_backward(dy, c_out)
        return dx + self.addnorm.enter_backward(self.sub.backward(ds, c_s), c_in)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post", "pre"])
def test_addnorm(norm_first):
    """AddNorm: LN(x + Dropout(f(x))) (post) and x + Dropout(f(LN(x))) (pre), dropout on."""
    m = unit_scale(Residual(norm_first))
    assert_passed(check_module(m, randn(0, Bsz, T, D), rng=3), m, ["x"])


# -- feed-forward ----------------------------------------------------------------------
@pytest.mark.parametrize("activation", ["relu", "gelu", "silu"])
def test_positionwise_feed_forward(activation):
    """FFN: act(x W_1 + b_1) W_2 + b_2 with activation dropout replayed."""
    m = unit_scale(PositionwiseFeedForward(D, F, activation, P_drop_ffn=0.2))
    assert_passed(check_module(m, randn(0, Bsz, T, D), rng=5), m, ["x"])


# -- multi-head attention ------------------------------------------------------------------
class SelfAttention(Module):
    """Self-attention: the same x as queries and keys/values; dx sums both uses."""

    def __init__(self, bias=False):
        super().__init__()
        self.attn = MultiHeadAttention(D, H, d_k=DK, d_v=DV, P_drop_attn=0.2, bias=bias)

    def forward(self, x, mask, rng=None):
        return self.attn.forward(x, x, mask, rng)

    def backward(self, dout, cache):
        dx_q, dx_kv = self.attn.backward(dout, cache)
        return dx_q + dx_kv


def test_multi_head_self_attention_causal():
    """Masked self-attention (a causal and padding mask given), d_k = 5, d_v = 3."""
    m = unit_scale(SelfAttention())
    mask = causal_mask(T)[None, None] & padding_mask(tgt_ids(), PAD)
    assert_passed(check_module(m, randn(0, Bsz, T, D), mask, rng=2), m, ["x"])


def test_causal_attention_adds_the_causal_mask_itself():
    """A causal module given the padding mask alone computes what a plain module does
    given the causal and padding mask, forward and backward, bit for bit."""
    plain, causal = SelfAttention(), SelfAttention()
    causal.attn.causal = True
    unit_scale(plain)
    unit_scale(causal)
    x, dy = randn(0, Bsz, T, D), randn(1, Bsz, T, D)
    pad = padding_mask(tgt_ids(), PAD)
    y1, c1 = plain.forward(x, causal_mask(T)[None, None] & pad, B.host_rng(3))
    y2, c2 = causal.forward(x, pad, B.host_rng(3))
    np.testing.assert_array_equal(B.asnumpy(y1), B.asnumpy(y2))
    dx1, dx2 = plain.backward(dy, c1), causal.backward(dy, c2)
    np.testing.assert_array_equal(B.asnumpy(dx1), B.asnumpy(dx2))
    for name, g in plain.gradients().items():
        np.testing.assert_array_equal(B.asnumpy(g), B.asnumpy(causal.gradients()[name]))


def test_multi_head_self_attention_padding():
    """Encoder self-attention over S = 7 with a padded source row."""
    m = unit_scale(SelfAttention())
    mask = padding_mask(src_ids(), PAD)
    assert_passed(check_module(m, randn(0, Bsz, S, D), mask, rng=2), m, ["x"])


def test_multi_head_self_attention_with_biases():
    """attention_bias (GPT-2, Marian): b_q b_k b_v b_o beside the weights, causal and
    padded. b_k's gradient is zero (a constant q.b_k on every logit of a query's row,
    which the softmax does not see): the check passes it as zero to within rounding."""
    m = unit_scale(SelfAttention(bias=True))
    assert [k for k in m.parameters() if ".b_" in k] == [f"attn.b_{c}" for c in "qkvo"]
    mask = causal_mask(T)[None, None] & padding_mask(tgt_ids(), PAD)
    report = check_module(m, randn(0, Bsz, T, D), mask, rng=2)
    assert_passed(report, m, ["x"])
    assert [r.name for r in report.rows if r.zero] == ["attn.b_k"]
    _, cache = m.forward(randn(0, Bsz, T, D), mask)
    m.zero_grad()
    m.backward(randn(2, Bsz, T, D), cache)
    assert float(abs(B.asnumpy(m.attn.grads["b_k"])).max()) < 1e-12
    assert float(abs(B.asnumpy(m.attn.grads["b_q"])).max()) > 1e-3


def test_multi_head_cross_attention_with_biases():
    m = unit_scale(MultiHeadAttention(D, H, d_k=DK, d_v=DV, P_drop_attn=0.2, bias=True))
    x_q, x_kv = randn(0, Bsz, T, D), randn(1, Bsz, S, D)
    report = check_module(m, x_q, x_kv, padding_mask(src_ids(), PAD), rng=2)
    assert_passed(report, m, ["x_q", "x_kv"])


def test_multi_head_cross_attention():
    """Cross-attention: T = 4 queries over S = 7 keys, source padding, dropout replayed."""
    m = unit_scale(MultiHeadAttention(D, H, d_k=DK, d_v=DV, P_drop_attn=0.2))
    assert (m.params["W_q"].shape, m.params["W_v"].shape) == ((D, H * DK), (D, H * DV))
    x_q, x_kv = randn(0, Bsz, T, D), randn(1, Bsz, S, D)
    report = check_module(m, x_q, x_kv, padding_mask(src_ids(), PAD), rng=2)
    assert_passed(report, m, ["x_q", "x_kv"])


# -- layers and stacks ---------------------------------------------------------------------
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_encoder_layer(norm):
    """EncoderLayer: self-attention + FFN, each in Add & Norm, every dropout replayed."""
    m = unit_scale(EncoderLayer(cfg(norm), B.host_rng(0)))
    report = check_module(m, randn(0, Bsz, S, D), padding_mask(src_ids(), PAD), rng=3)
    assert_passed(report, m, ["x"])


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_decoder_layer(norm):
    """DecoderLayer: masked self-attention, cross-attention (S != T), FFN; dy and dmemory."""
    m = unit_scale(DecoderLayer(cfg(norm, activation="gelu"), B.host_rng(0)))
    y, memory = randn(0, Bsz, T, D), randn(1, Bsz, S, D)
    self_mask = padding_mask(tgt_ids(), PAD)  # the layer's self-attention is causal
    cross_mask = padding_mask(src_ids(), PAD)
    report = check_module(m, y, memory, self_mask, cross_mask, rng=3)
    assert_passed(report, m, ["y", "memory"])


@pytest.mark.parametrize(
    "norm, positions", [("post", "sinusoidal"), ("pre", "learned")], ids=["post", "pre-learned"]
)
def test_encoder_stack(norm, positions):
    """Encoder: positions, embedding dropout, 2 layers (and the final LN for pre-LN)."""
    m = unit_scale(Encoder(cfg(norm, positions), 2, B.host_rng(0)))
    report = check_module(
        m, randn(0, Bsz, S, D), padding_mask(src_ids(), PAD), rng=4, max_entries=40
    )
    assert_passed(report, m, ["x"])
    assert ("norm.gamma" in m.parameters()) == (norm == "pre")
    assert ("pos.P" in m.parameters()) == (positions == "learned")


@pytest.mark.parametrize(
    "norm, positions", [("post", "learned"), ("pre", "sinusoidal")], ids=["post-learned", "pre"]
)
def test_decoder_stack(norm, positions):
    """Decoder: 2 layers, every layer's cross-attention adding into dmemory."""
    m = unit_scale(Decoder(cfg(norm, positions), 2, B.host_rng(0)))
    y, memory = randn(0, Bsz, T, D), randn(1, Bsz, S, D)
    self_mask = padding_mask(tgt_ids(), PAD)  # the layers' self-attention is causal
    cross_mask = padding_mask(src_ids(), PAD)
    report = check_module(m, y, memory, self_mask, cross_mask, rng=4, max_entries=40)
    assert_passed(report, m, ["y", "memory"])


def test_dropout_module_is_parameter_free():
    """Dropout has no parameters; its input gradient replays the forward's mask."""
    m = Dropout(0.4)
    assert_passed(check_module(m, randn(0, Bsz, T, D), rng=9), m, ["x"])
