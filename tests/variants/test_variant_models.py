"""The variants inside modules and models: gradients of every parameter (relative
embeddings, the classification head), incremental decoding equal to full recomputation
for each variant in the encoder-decoder's decoder and in the language model (beam
search with reordering included), causality of the language model, the factory's
refusals, the classifier.

Dimension key: B batch, S source length, T length, D d_model, V vocabulary.
"""

import sys
from pathlib import Path

import numpy as np
import pytest
from variant_helpers import VARIANTS, check_loss_model, config

from scratchformer.engine import backend as B
from scratchformer.engine.gradcheck import check_module
from scratchformer.engine.models import (
    EncoderClassifier,
    LanguageModel,
    Transformer,
    TransformerConfig,
)
from scratchformer.engine.models.classifier import ClassificationHead
from scratchformer.engine.nn.local_attention import LocalMultiHeadAttention
from scratchformer.engine.nn.relative_attention import (
    RelativeMultiHeadAttention,
    SkewMultiHeadAttention,
)
from scratchformer.engine.nn.transformer import make_self_attention

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "decode"))
from decode_helpers import CheckingModel, lively_model, random_src  # noqa: E402

pytestmark = pytest.mark.usefixtures("backend")

V = 13
PAD, BOS, EOS = 0, 1, 2


def lm_batch(seed=0, lengths=(9, 6, 4)):
    """ids (B, T) = <bos> + tokens, targets = tokens + <eos>, right-padded."""
    r = np.random.default_rng(seed)
    T = max(lengths) + 1
    ids = np.zeros((len(lengths), T), dtype=np.int64)
    tgt = np.zeros_like(ids)
    for b, n in enumerate(lengths):
        y = r.integers(3, V, n)
        ids[b, : n + 1] = np.r_[BOS, y]
        tgt[b, : n + 1] = np.r_[y, EOS]
    return B.asarray(ids), B.asarray(tgt)


# -- modules -----------------------------------------------------------------------------
ATTENTION_MODULES = {
    "relative": lambda: RelativeMultiHeadAttention(
        16, 2, P_drop_attn=0.1, causal=True, max_relative_position=2
    ),
    "relative_skew": lambda: SkewMultiHeadAttention(
        16, 2, P_drop_attn=0.1, max_relative_position=2
    ),
    "local": lambda: LocalMultiHeadAttention(16, 2, P_drop_attn=0.1, local_block=3),
}


@pytest.mark.parametrize("kind", list(ATTENTION_MODULES))
def test_attention_module_gradients_of_inputs_and_every_parameter(f64, kind):
    """x_q, x_kv, W_q W_k W_v W_o and the variant's own (E_k E_v / E_r), B=2, T=7,
    causal attention (the module adds the causal mask to the padding mask it is given),
    attention dropout replayed."""
    r = np.random.default_rng(0)
    T = 7
    x_q, x_kv = B.asarray(r.standard_normal((2, T, 16))), B.asarray(r.standard_normal((2, T, 16)))
    keys = np.ones((2, T), bool)
    keys[1, 5:] = False
    mask = B.asarray(keys)[:, None, None, :]
    rep = check_module(ATTENTION_MODULES[kind](), x_q, x_kv, mask, rng=3)
    assert rep.passed, "\n" + rep.table()
    own = {"relative": ["E_k", "E_v"], "relative_skew": ["E_r"], "local": []}[kind]
    assert [row.name for row in rep.rows] == ["x_q", "x_kv", "W_q", "W_k", "W_v", "W_o", *own]


def test_classification_head_gradients(f64):
    r = np.random.default_rng(1)
    head = ClassificationHead(16, 5, p_drop=0.2, rng=np.random.default_rng(2))
    rep = check_module(head, B.asarray(r.standard_normal((4, 16))), rng=7)
    assert rep.passed, "\n" + rep.table()
    assert [row.name for row in rep.rows] == ["f", "dense.W", "dense.b", "out.W", "out.b"]


# -- whole models: gradients ---------------------------------------------------------------
@pytest.mark.parametrize("attention", VARIANTS)
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_language_model_every_parameter(attention, norm):
    """Every parameter of the LM's loss (tied embedding, relative embeddings, learned
    positions), padding, label smoothing, all three dropouts replayed."""
    cfg = config(V, attention, norm=norm, positions="learned", P_drop_attn=0.1, P_drop_ffn=0.1)
    m = LanguageModel(cfg)
    ids, tgt = lm_batch()
    rep, names = check_loss_model(m, ids, tgt, rng=11)
    assert rep.passed, "\n" + rep.table()
    assert names == list(m.parameters())
    if attention == "relative":
        assert (
            "decoder.layers.0.self_attn.E_k" in names and "decoder.layers.1.self_attn.E_v" in names
        )
    if attention == "relative_skew":
        assert "decoder.layers.1.self_attn.E_r" in names


@pytest.mark.parametrize("attention", ["dense", "relative"])
def test_classifier_every_parameter(attention):
    """Encoder + head: every parameter, padding, dropout replayed (the head's dropout
    module is called twice: two masks)."""
    m = EncoderClassifier(config(V, attention, P_drop=0.2), num_classes=4)
    ids, _ = lm_batch(1)
    labels = B.asarray(np.array([0, 3, 1]))
    rep, names = check_loss_model(m, ids, labels, rng=5)
    assert rep.passed, "\n" + rep.table()
    assert names[-4:] == ["head.dense.W", "head.dense.b", "head.out.W", "head.out.b"]


@pytest.mark.slow
@pytest.mark.parametrize("attention", ["relative", "relative_skew", "local"])
def test_encoder_decoder_every_parameter_with_a_variant(attention):
    """The Transformer with the variant in its decoder's self-attention (and Shaw in the
    encoder for 'relative')."""
    from scratchformer.engine.gradcheck import check_model  # noqa: PLC0415

    m = Transformer(config(V, attention, P_drop_attn=0.1))
    src = B.asarray(np.array([[5, 6, 7, 8, 9, 4, 3], [4, 5, 6, 0, 0, 0, 0]]))
    tgt_in = B.asarray(np.array([[1, 4, 5, 6, 7], [1, 7, 0, 0, 0]]))
    tgt_out = B.asarray(np.array([[4, 5, 6, 7, 2], [7, 2, 0, 0, 0]]))
    rep = check_model(m, src, tgt_in, tgt_out, rng=3)
    assert rep.passed, "\n" + rep.table()


# -- incremental decoding == full recomputation -----------------------------------------------
@pytest.mark.parametrize("attention", VARIANTS)
@pytest.mark.parametrize("prefill", [1, 4])
def test_language_model_incremental_equals_full(attention, prefill):
    """Logits of ``decode_step`` (a prefix of ``prefill`` tokens, then one at a time)
    equal ``forward`` at every real position; T=11 runs past several local blocks and
    the relative clip distance."""
    with B.precision("float64"):
        m = LanguageModel(config(V, attention, norm="pre"))
        ids, _ = lm_batch(2, lengths=(10, 10))
        full = B.asnumpy(m.forward(ids)[0])
        kv = m.init_kv(2)
        steps = [m.decode_step(ids[:, :prefill], kv)]
        steps += [m.decode_step(ids[:, t : t + 1], kv) for t in range(prefill, ids.shape[1])]
        inc = np.concatenate([B.asnumpy(s) for s in steps], axis=1)
    np.testing.assert_allclose(inc, full, atol=1e-10)


@pytest.mark.parametrize("attention", VARIANTS)
def test_decoder_incremental_equals_full(attention):
    """The encoder-decoder's ``decode_step`` equals ``forward`` (target of 9 positions)."""
    with B.precision("float64"):
        m = Transformer(config(V, attention))
        src = B.asarray(random_src(V, [6, 4], seed=3))
        tgt = np.random.default_rng(4).integers(3, V, (2, 9))
        tgt[:, 0] = BOS
        tgt = B.asarray(tgt)
        full = B.asnumpy(m.forward(src, tgt)[0])
        memory, src_mask = m.encode_infer(src)
        kv = m.init_kv(memory, src_mask)
        steps = [m.decode_step(tgt[:, :3], kv)] + [
            m.decode_step(tgt[:, t : t + 1], kv) for t in range(3, 9)
        ]
        inc = np.concatenate([B.asnumpy(s) for s in steps], axis=1)
    np.testing.assert_allclose(inc, full, atol=1e-10)


@pytest.mark.parametrize("attention", ["relative", "relative_skew", "local"])
def test_beam_search_with_variants_equals_recomputation_after_reordering(attention):
    """Beam search reorders the kv (the local ring too) at every step; each step's
    logits still equal a full forward of the row's history."""
    from scratchformer.engine.decode import beam_search  # noqa: PLC0415

    kw = dict(attention=attention, max_relative_position=2, local_block=2)
    if attention != "relative":
        kw["encoder_attention"] = "dense"
    with B.precision("float64"):
        m = lively_model(V=13, **kw)
        src = random_src(13, [7, 3, 5], seed=2)
        checker = CheckingModel(m, src)
        beam_search(checker, src, beam_size=3, max_len_b=6, nbest=3)
    assert checker.steps >= 6 and checker.max_err < 1e-9
    assert checker.kvs[0].reorders >= 3


@pytest.mark.parametrize("attention", VARIANTS)
def test_language_model_is_causal(attention):
    """Changing token t+1 leaves the logits at positions <= t unchanged."""
    with B.precision("float64"):
        m = LanguageModel(config(V, attention))
        ids, _ = lm_batch(5, lengths=(10,))
        base = B.asnumpy(m.forward(ids)[0])
        for t in (2, 5, 8):
            changed = ids.copy()
            changed[0, t + 1] = 3 + (int(ids[0, t + 1]) - 2) % (V - 3)
            out = B.asnumpy(m.forward(changed)[0])
            np.testing.assert_allclose(out[:, : t + 1], base[:, : t + 1], atol=1e-12)
            assert np.abs(out[:, t + 1] - base[:, t + 1]).max() > 1e-6


def test_language_model_padding_does_not_change_real_positions():
    with B.precision("float64"):
        for attention in VARIANTS:
            m = LanguageModel(config(V, attention))
            ids, _ = lm_batch(6, lengths=(7,))
            longer = B.asarray(np.concatenate([B.asnumpy(ids), np.zeros((1, 3), np.int64)], 1))
            a = B.asnumpy(m.forward(ids)[0])
            b = B.asnumpy(m.forward(longer)[0])[:, : ids.shape[1]]
            np.testing.assert_allclose(a, b, atol=1e-12)


def test_sampling_is_seeded_and_respects_top_k_and_temperature():
    from scratchformer.engine.decode.sample import generate, sample_next  # noqa: PLC0415

    m = LanguageModel(config(V, "relative_skew", max_len=32))
    a = generate(m, [BOS, 5, 6], max_new_tokens=10, temperature=0.8, top_k=3, seed=1)
    assert a == generate(m, [BOS, 5, 6], max_new_tokens=10, temperature=0.8, top_k=3, seed=1)
    assert all(t not in (PAD, BOS, EOS) for t in a[0]) and len(a[0]) <= 10
    logits = B.asarray(np.array([[0.0, 1.0, 5.0, 4.0, 3.0, -1.0]] * 200))
    u = np.random.default_rng(0).random(200)
    draws = sample_next(logits, 1.0, 2, 1.0, u)
    assert set(draws.tolist()) == {2, 3}  # top-2 only
    assert (sample_next(logits, 0.0, 0, 1.0, u) == 2).all()  # greedy


# -- configuration and the factory -----------------------------------------------------------------
def test_config_validates_the_variant_fields():
    for bad, match in [
        (dict(attention="sparse"), "attention='sparse'"),
        (dict(max_relative_position=0), "max_relative_position"),
        (dict(local_block=0), "local_block"),
        (dict(encoder_attention="local"), "encoder_attention"),
    ]:
        with pytest.raises(ValueError, match=match):
            TransformerConfig(vocab_size=V, **bad)


@pytest.mark.parametrize("attention", ["relative_skew", "local"])
def test_causal_only_variants_refuse_an_encoder(attention):
    cfg = TransformerConfig.preset("tiny", vocab_size=V, attention=attention)
    with pytest.raises(ValueError, match="causal only"):
        make_self_attention(cfg, np.random.default_rng(0), causal=False)
    with pytest.raises(ValueError, match="causal only"):
        Transformer(cfg)  # its encoder would need the future
    with pytest.raises(ValueError, match="causal only"):
        EncoderClassifier(cfg, num_classes=3)
    Transformer(
        TransformerConfig.preset(
            "tiny", vocab_size=V, attention=attention, encoder_attention="relative"
        )
    )


def test_dense_default_builds_the_same_model_as_before():
    """attention='dense' draws the same initial weights as the core model did (the
    factory consumes the generator exactly as the direct constructor)."""
    a = Transformer(TransformerConfig.preset("tiny", vocab_size=V))
    b = Transformer(TransformerConfig.preset("tiny", vocab_size=V, attention="dense"))
    for (ka, pa), (kb, pb) in zip(a.parameters().items(), b.parameters().items()):
        assert ka == kb and np.array_equal(B.asnumpy(pa), B.asnumpy(pb))


def test_lm_rejects_target_ids_out_of_range():
    """A negative target silently indexed the last vocabulary entry; one >= V crashed
    deep inside the loss."""
    from scratchformer.engine.errors import TokenError

    m = LanguageModel(config(11, "dense"))
    ids = B.asarray(np.array([[1, 4, 5, 6]]))
    for bad in (-1, 11):
        targets = B.asarray(np.array([[4, 5, 6, bad]]))
        with pytest.raises(TokenError, match="targets"):
            m.loss_forward(ids, targets)


def test_language_model_loss_cache_serves_one_backward():
    """The LM's loss writes dlogits over its probabilities (no (B, T, V) copy): a second
    backward through the same cache would use garbage, so it is refused."""
    m = LanguageModel(TransformerConfig(vocab_size=11, N=1, d_model=16, d_ff=32, h=2))
    ids = B.asarray(np.array([[1, 4, 5, 6], [1, 7, 8, 0]]))
    targets = B.asarray(np.array([[4, 5, 6, 2], [7, 8, 2, 0]]))
    loss, cache = m.loss_forward(ids, targets)
    m.loss_backward(cache)
    with pytest.raises(ValueError, match="spent.*run the forward again"):
        m.loss_backward(cache)
