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
from scratchformer.engine.models import Transformer, TransformerConfig

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


@pytest.mark.parametrize("norm", ["post", "pre"])
@pytest.mark.parametrize("share", ["all", "decoder", "none"])
def test_whole_model_every_parameter(norm, share):
    """Every parameter, post-LN and pre-LN, each embedding-sharing mode, label smoothing
    0.1, padding in source and target, dropout on with replayed masks."""
    m = model(norm=norm, share_embeddings=share)
    report = check_model(m, *batch(), rng=7)
    assert_every_parameter_passes(report, m)
    tied = {"all": ["embed.E"], "decoder": ["embed.E", "src_embed.E"]}
    expected = tied.get(share, ["embed.E", "src_embed.E", "out_proj.W"])
    assert [n for n in report_names(report) if "embed" in n or "out_proj" in n] == expected


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_whole_model_learned_positions_gelu(norm):
    """Learned positions (Table 3 row E) in encoder and decoder, GELU feed-forward."""
    m = model(norm=norm, positions="learned", activation="gelu")
    report = check_model(m, *batch(1), rng=3)
    assert_every_parameter_passes(report, m)
    assert {"encoder.pos.P", "decoder.pos.P"} <= set(report_names(report))


@pytest.mark.parametrize("eps_ls", [0.0, 0.1])
def test_whole_model_without_dropout(eps_ls):
    """Evaluation mode (no generator): plain NLL and label-smoothed loss."""
    m = model(P_drop=0.0, P_drop_attn=0.0, P_drop_ffn=0.0)
    report = check_model(m, *batch(2), eps_ls=eps_ls)
    assert_every_parameter_passes(report, m)


def test_whole_model_unit_scale_weights():
    """With unit-scale weights (not the small initialisation), every gradient still agrees."""
    m = model(norm="pre", share_embeddings="none")
    r = np.random.default_rng(5)
    for p in m.parameters().values():
        p[...] = B.asarray(r.standard_normal(p.shape))
    report = check_model(m, *batch(3), rng=11)
    assert_every_parameter_passes(report, m)


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
