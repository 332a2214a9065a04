"""The encoder-decoder options Marian (OPUS-MT) needs beside the attention biases: the
SiLU activation, a bias on the output logits (``output_bias``, Marian's
``final_logits_bias``), the decoder started from the padding token (``bos_id ==
pad_id``) and an id appended to every source (``source_end_id``).

Each against finite differences (every parameter, float64, dropout replayed), and what
each changes and must not: a default model has none of them (benchmarks/seam_equality.py
shows it bit for bit), decoding step by step equals the forward.

Dimension key: B batch, S source length, T target length, V vocabulary.
"""

import numpy as np
import pytest

from scratchformer.engine import backend as B
from scratchformer.engine import device
from scratchformer.engine.errors import ConfigError
from scratchformer.engine.gradcheck import check_model
from scratchformer.engine.models import (
    EncoderClassifier,
    LanguageModel,
    Transformer,
    TransformerConfig,
)

pytestmark = pytest.mark.usefixtures("backend")

V = 17
EOS, UNK, PAD = 0, 1, V - 1  # Marian's layout: </s> 0, <unk> 1, <pad> last


def marian_like(**overrides):
    """A Marian-shaped tiny model: post-LN, SiLU, biases on every projection and on the
    logits (set non-zero: they start at zero), decoding from the padding token."""
    kw = dict(vocab_size=V, N=2, activation="silu", attention_bias=True, output_bias=True,
              zero_start=True, pad_id=PAD, bos_id=PAD, eos_id=EOS, source_end_id=EOS, P_drop=0.1,
              P_drop_attn=0.1, P_drop_ffn=0.1, eps_ls=0.1)
    m = Transformer(TransformerConfig.preset("tiny", **{**kw, **overrides}))
    r = np.random.default_rng(9)
    for name, p in m.parameters().items():
        if ".b_" in name or name.endswith((".beta", "out_bias.b")):
            p[...] = B.asarray(0.3 * r.standard_normal(p.shape))
    return m


def marian_batch(seed=0, start=PAD):
    """src (3, 7) ending in </s>, tgt_in (3, 5) = <pad> y, tgt_out = y </s>; padded with
    <pad> (the start's own id)."""
    r = np.random.default_rng(seed)
    src = np.full((3, 7), PAD, np.int64)
    tgt_in, tgt_out = np.full((3, 5), PAD, np.int64), np.full((3, 5), PAD, np.int64)
    for b, (ls, lt) in enumerate([(7, 4), (5, 2), (3, 1)]):
        src[b, :ls] = np.r_[r.integers(2, PAD, ls - 1), EOS]
        y = r.integers(2, PAD, lt)
        tgt_in[b, : lt + 1] = np.r_[start, y]
        tgt_out[b, : lt + 1] = np.r_[y, EOS]
    return B.asarray(src), B.asarray(tgt_in), B.asarray(tgt_out)


# post-LN with every embedding shared (Marian's) runs by default, pre-LN untied with -m slow
@pytest.mark.parametrize(
    ("norm", "share"), [("post", "all"), pytest.param("pre", "none", marks=pytest.mark.slow)]
)
def test_every_parameter_with_marian_options(norm, share):
    """Every parameter, every option on: SiLU, attention and output biases, the start
    from <pad> (the zero vector), label smoothing, dropout on with its masks replayed."""
    m = marian_like(norm=norm, share_embeddings=share)
    report = check_model(m, *marian_batch(), rng=7)
    assert report.passed, "\n" + report.table()
    names = [r.name for r in report.rows]
    assert names == list(m.parameters()) and names[-1] == "out_bias.b"
    bias = report["out_bias.b"]
    assert float(abs(bias.analytic).max()) > 1e-3


def test_every_entry_of_the_output_bias():
    m = marian_like()
    report = check_model(m, *marian_batch(3), rng=2, max_entries=None,
                         names=["out_bias.b", "encoder.layers.0.ffn.b_1"])
    assert report.passed, "\n" + report.table()
    assert report["out_bias.b"].checked == V


def test_the_output_bias_adds_to_every_position():
    """logits with the bias = logits without it + b, at every position; its gradient is
    dlogits summed over the batch and positions."""
    with B.precision("float64"):
        m = marian_like(P_drop=0.0, P_drop_attn=0.0, P_drop_ffn=0.0)
        src, tgt_in, tgt_out = marian_batch(1)
        b = B.asnumpy(m.parameters()["out_bias.b"]).copy()
        with_bias = B.asnumpy(m.forward(src, tgt_in)[0])
        m.parameters()["out_bias.b"][...] = 0
        without = B.asnumpy(m.forward(src, tgt_in)[0])
    np.testing.assert_allclose(with_bias, without + b, rtol=0, atol=1e-12)


def test_starting_from_the_padding_token_attends_position_zero():
    """With bos_id == pad_id, position 0 (the padding id) is a real input, attended by
    every later position: the logits are those of the same model started from another
    id (zero_start: both read the zero vector there); the padding after a row's end is
    still masked."""
    with B.precision("float64"):
        m = marian_like(P_drop=0.0, P_drop_attn=0.0, P_drop_ffn=0.0)
        other = Transformer(TransformerConfig.from_dict({**m.config.to_dict(), "bos_id": 2}))
        other.load_state_dict(m.state_dict())
        src, tgt_in, _ = marian_batch(2)
        from_pad = B.asnumpy(m.forward(src, tgt_in)[0])
        tgt_2 = B.asnumpy(tgt_in).copy()
        tgt_2[:, 0] = 2
        from_2 = B.asnumpy(other.forward(src, B.asarray(tgt_2))[0])
    np.testing.assert_array_equal(from_pad, from_2)
    mask = m._target_mask(tgt_in)
    assert bool(B.asnumpy(mask)[:, 0, 0, 0].all())
    assert not bool(B.asnumpy(mask)[2, 0, 0, 2:].any())  # row 2: <pad> y, then padding


def test_a_default_model_has_none_of_them():
    cfg = TransformerConfig.preset("tiny", vocab_size=V)
    assert (cfg.activation, cfg.output_bias, cfg.source_end_id) == ("relu", False, None)
    m = Transformer(cfg)
    assert m.out_bias is None and "out_bias.b" not in m.parameters()
    src, tgt_in, _ = marian_batch(0, start=1)
    tgt_in = B.asnumpy(tgt_in).copy()
    tgt_in[tgt_in == PAD] = 0
    mask = B.asnumpy(m._target_mask(B.asarray(tgt_in)))
    np.testing.assert_array_equal(mask, (tgt_in != 0)[:, None, None, :])


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_step_by_step_equals_forward(norm):
    """decode_step one position at a time from <pad>: the forward's logits, the output
    bias included."""
    with B.precision("float64"):
        m = marian_like(P_drop=0.0, P_drop_attn=0.0, P_drop_ffn=0.0, norm=norm)
        src = marian_batch(1)[0]
        tgt = np.random.default_rng(2).integers(2, PAD, (3, 6))
        tgt[:, 0] = PAD
        tgt = B.asarray(tgt)
        full = B.asnumpy(m.forward(src, tgt)[0])
        memory, src_mask = m.encode_infer(src)
        kv = m.init_kv(memory, src_mask, beams=1, capacity=6)
        for t in range(6):
            step = B.asnumpy(m.decode_step(tgt[:, t : t + 1], kv))[:, 0]
            assert np.abs(step - full[:, t]).max() < 1e-9, f"step {t}"


def test_checkpoint_fields_round_trip_and_refusals():
    cfg = TransformerConfig.preset("tiny", vocab_size=V, activation="silu", output_bias=True,
                                   source_end_id=EOS, pad_id=PAD, bos_id=PAD, eos_id=EOS,
                                   zero_start=True)
    again = TransformerConfig.from_dict(cfg.to_dict())
    assert (again.activation, again.output_bias, again.source_end_id) == ("silu", True, EOS)
    with pytest.raises(ConfigError, match="activation='swish'"):
        TransformerConfig.preset("tiny", vocab_size=V, activation="swish")
    with pytest.raises(ConfigError, match="source_end_id=17 is outside"):
        TransformerConfig.preset("tiny", vocab_size=V, source_end_id=V)
    with pytest.raises(ConfigError, match="needs zero_start = true"):
        TransformerConfig.preset("tiny", vocab_size=V, pad_id=PAD, bos_id=PAD)
    with pytest.raises(ConfigError, match="output_bias"):
        TransformerConfig.preset("tiny", vocab_size=V, output_bias="yes")
    for make in (LanguageModel, lambda c: EncoderClassifier(c, 2)):
        for option in ({"output_bias": True}, {"source_end_id": EOS}):
            with pytest.raises(ConfigError, match="is for the encoder-decoder Transformer"):
                make(TransformerConfig.preset("tiny", vocab_size=V, **option))


@pytest.mark.parametrize("share", ["all", "none"])
def test_the_padding_row_of_a_pad_start_model_is_no_parameter(share):
    """Starting from <pad> (Marian's zero vector), the model has no row for <pad>: its
    logit is its bias alone, whatever E[pad] (or W's column) holds, and that row gets
    exactly zero gradient, so it stays the zero the start reads (and what an exported
    folder's start reads in transformers)."""
    with B.precision("float64"):
        m = marian_like(share_embeddings=share)
        src, tgt_in, tgt_out = marian_batch(4)
        b = B.asnumpy(m.parameters()["out_bias.b"])
        logits = B.asnumpy(m.forward(src, tgt_in)[0])
        assert np.array_equal(logits[..., PAD], np.full(logits.shape[:2], b[PAD]))
        m.zero_grad()
        loss, cache = m.loss_forward(src, tgt_in, tgt_out, rng=device.generator(3))
        m.loss_backward(cache)
        g = m.gradients()
        assert not B.asnumpy(g["embed.E"])[PAD].any()
        if share == "none":
            assert not B.asnumpy(g["out_proj.W"])[:, PAD].any()
        assert B.asnumpy(g["out_bias.b"])[PAD] != 0
