"""Float64 finite-difference check of every parameter of the whole 2-layer model.

``check_model`` back-propagates the label-smoothed loss (mean over non-pad targets)
and compares every parameter's gradient, on a seeded sample of up to 20 entries per
tensor, with central differences of that same loss. The batch has padding in source
and target, S = 7 != T = 5, and T != d_k = 8; dropout (sub-layer, attention and FFN)
is on with its masks replayed (``rng=<seed>``).

Dimension key: B batch, S source length, T target length, V vocabulary.
"""

import numpy as np
import pytest

from scratchformer.engine import backend as B
from scratchformer.engine.gradcheck import check_model
from scratchformer.engine.models import LanguageModel, Transformer, TransformerConfig
from scratchformer.engine.models.classifier import EncoderClassifier

pytestmark = pytest.mark.usefixtures("backend")

V = 17
PAD, BOS, EOS = 0, 1, 2


def batch(seed=0):
    """src (B=3, S=7), tgt_in (3, 5), tgt_out (3, 5); rows of different lengths, padded."""
    r = np.random.default_rng(seed)
    src = np.zeros((3, 7), dtype=np.int64)
    tgt_in = np.zeros((3, 5), dtype=np.int64)
    tgt_out = np.zeros((3, 5), dtype=np.int64)
    for b, (ls, lt) in enumerate([(7, 4), (5, 2), (3, 1)]):
        src[b, :ls] = r.integers(3, V, ls)
        y = r.integers(3, V, lt)
        tgt_in[b, : lt + 1] = np.r_[BOS, y]
        tgt_out[b, : lt + 1] = np.r_[y, EOS]
    return B.asarray(src), B.asarray(tgt_in), B.asarray(tgt_out)


def model(**overrides):
    kw = dict(vocab_size=V, N=2, P_drop=0.1, P_drop_attn=0.1, P_drop_ffn=0.1, eps_ls=0.1)
    kw.update(overrides)
    return Transformer(TransformerConfig.preset("tiny", **kw))


def report_names(report):
    return [r.name for r in report.rows]


def assert_every_parameter_passes(report, m):
    assert report.passed, "\n" + report.table()
    names = report_names(report)
    assert names == list(m.parameters()), "the report must name every parameter"
    assert len(names) == len(set(names))


# the paper's post-LN with every embedding shared runs by default, the rest with -m slow
@pytest.mark.parametrize(
    "norm, share",
    [("post", "all")]
    + [
        pytest.param(n, s, marks=pytest.mark.slow)
        for s in ("all", "decoder", "none")
        for n in ("post", "pre")
        if (n, s) != ("post", "all")
    ],
)
def test_whole_model_every_parameter(norm, share):
    """Every parameter, post-LN and pre-LN, each embedding-sharing mode, label smoothing
    0.1, padding in source and target, dropout on with replayed masks."""
    m = model(norm=norm, share_embeddings=share)
    report = check_model(m, *batch(), rng=7)
    assert_every_parameter_passes(report, m)
    tied = {"all": ["embed.E"], "decoder": ["embed.E", "src_embed.E"]}
    expected = tied.get(share, ["embed.E", "src_embed.E", "out_proj.W"])
    assert [n for n in report_names(report) if "embed" in n or "out_proj" in n] == expected


@pytest.mark.slow
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_whole_model_learned_positions_gelu(norm):
    """Learned positions (Table 3 row E) in encoder and decoder, GELU feed-forward."""
    m = model(norm=norm, positions="learned", activation="gelu")
    report = check_model(m, *batch(1), rng=3)
    assert_every_parameter_passes(report, m)
    assert {"encoder.pos.P", "decoder.pos.P"} <= set(report_names(report))


@pytest.mark.parametrize("eps_ls", [0.0, pytest.param(0.1, marks=pytest.mark.slow)])
def test_whole_model_without_dropout(eps_ls):
    """Evaluation mode (no generator): plain NLL and label-smoothed loss."""
    m = model(P_drop=0.0, P_drop_attn=0.0, P_drop_ffn=0.0)
    report = check_model(m, *batch(2), eps_ls=eps_ls)
    assert_every_parameter_passes(report, m)


@pytest.mark.slow
def test_whole_model_unit_scale_weights():
    """With unit-scale weights (not the small initialisation), every gradient still agrees."""
    m = model(norm="pre", share_embeddings="none")
    r = np.random.default_rng(5)
    for p in m.parameters().values():
        p[...] = B.asarray(r.standard_normal(p.shape))
    report = check_model(m, *batch(3), rng=11)
    assert_every_parameter_passes(report, m)


@pytest.mark.slow
def test_whole_model_separate_source_vocabulary():
    """share_embeddings='decoder' with a source vocabulary of a different size."""
    m = model(share_embeddings="decoder", src_vocab_size=9)
    src, tgt_in, tgt_out = batch(4)
    src = B.asarray(B.asnumpy(src) % 9)
    report = check_model(m, src, tgt_in, tgt_out, rng=2)
    assert_every_parameter_passes(report, m)
    assert report["src_embed.E"].shape == (9, 16)


def test_whole_model_all_entries_of_small_tensors():
    """max_entries=None checks every entry of the tied embedding, the pad row included."""
    m = model()
    report = check_model(m, *batch(), rng=7, max_entries=None, names=["embed.E"])
    assert report.passed, report.table()
    row = report["embed.E"]
    assert row.checked == row.total == V * 16


# -- the options GPT-2 and Marian need -------------------------------------------------------
def gpt2_like(**overrides):
    """A language model with GPT-2's options: pre-LN, learned positions, GELU, attention
    biases, unscaled embeddings, <|endoftext|> as <bos> and <eos> (id V - 1) and padding
    that is no token (pad_id = V); biases set non-zero (they start at zero)."""
    kw = dict(vocab_size=V, N=2, norm="pre", positions="learned", activation="gelu",
              attention_bias=True, scale_embedding=False, pad_id=V, bos_id=V - 1,
              eos_id=V - 1, P_drop=0.1, P_drop_attn=0.1, eps_ls=0.0)
    m = LanguageModel(TransformerConfig.preset("tiny", **{**kw, **overrides}))
    r = np.random.default_rng(9)
    for name, p in m.parameters().items():
        if ".b_" in name or name.endswith(".beta"):
            p[...] = B.asarray(0.1 * r.standard_normal(p.shape))
    return m


def lm_batch(seed=0, pad=V, bos=V - 1, eos=V - 1):
    """ids (B=3, T=6) = <bos> x, targets = x <eos>, rows of 6, 4 and 2 padded with ``pad``;
    <bos>/<eos> also inside a row, as <|endoftext|> is between documents."""
    r = np.random.default_rng(seed)
    ids, targets = np.full((3, 6), pad), np.full((3, 6), pad)
    for b, n in enumerate([6, 4, 2]):
        x = r.integers(0, V - 1, n)
        x[n // 2] = eos
        ids[b, :n], targets[b, :n] = np.r_[bos, x[:-1]], np.r_[x[:-1], eos]
    return B.asarray(ids), B.asarray(targets)


@pytest.mark.slow
def test_language_model_with_gpt2_options_every_parameter():
    """Every parameter of a GPT-2-like language model, every entry, dropout replayed;
    the keys' biases pass as zero (the softmax does not see q.b_k, the same on a row)."""
    m = gpt2_like()
    report = check_model(m, *lm_batch(), rng=5, max_entries=None)
    assert_every_parameter_passes(report, m)
    keys = [r for r in report.rows if r.name.endswith(".b_k")]
    assert len(keys) == 2 and all(float(abs(r.analytic).max()) < 1e-12 for r in keys)
    assert not any(r.zero for r in report.rows if r not in keys)
    assert "decoder.layers.1.self_attn.b_o" in report_names(report)


@pytest.mark.slow
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_whole_model_with_attention_biases_unscaled_embeddings(norm):
    """The encoder-decoder with biases on every attention (self and cross) and no
    sqrt(d_model) on its embeddings (Marian scales them, GPT-2 does not)."""
    m = model(norm=norm, attention_bias=True, scale_embedding=False)
    r = np.random.default_rng(4)
    for name, p in m.parameters().items():
        if ".b_" in name:
            p[...] = B.asarray(0.1 * r.standard_normal(p.shape))
    report = check_model(m, *batch(5), rng=3)
    assert_every_parameter_passes(report, m)
    assert "decoder.layers.0.cross_attn.b_v" in report_names(report)


def test_classifier_with_attention_biases():
    cfg = TransformerConfig.preset("tiny", vocab_size=V, attention_bias=True, P_drop=0.1)
    m = EncoderClassifier(cfg, 3)
    src, _, _ = batch(6)
    report = check_model(m, src, B.asarray(np.array([0, 2, 1])), rng=3)
    assert_every_parameter_passes(report, m)
