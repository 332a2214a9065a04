"""``zero_start``: the decoder's first position reads the zero vector (Marian's start).

The forward's derivative at that position is zero, so the start token's embedding row
gets no gradient from it; the whole model passes the finite-difference check; decoding
step by step equals the forward; the default model is unchanged; the option is refused
where there is no decoder start.
"""

import numpy as np
import pytest
from decode_helpers import lively_model, random_src

from scratchformer.engine import backend as B
from scratchformer.engine.errors import ConfigError
from scratchformer.engine.gradcheck import check_model
from scratchformer.engine.models import (
    EncoderClassifier,
    LanguageModel,
    Transformer,
    TransformerConfig,
)

pytestmark = pytest.mark.usefixtures("backend")

V, BOS = 13, 1


def _batch(seed=0):
    """src (3, 6), tgt_in (3, 5) starting with <bos>, tgt_out (3, 5); padded rows."""
    r = np.random.default_rng(seed)
    src = random_src(V, [6, 4, 2], seed=seed)
    tgt_in = np.zeros((3, 5), np.int64)
    tgt_out = np.zeros((3, 5), np.int64)
    for b, lt in enumerate([4, 2, 1]):
        y = r.integers(3, V, lt)
        tgt_in[b, : lt + 1] = np.r_[BOS, y]
        tgt_out[b, : lt + 1] = np.r_[y, 2]
    return B.asarray(src), B.asarray(tgt_in), B.asarray(tgt_out)


@pytest.mark.slow
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_gradient_check(norm):
    """Every parameter against central differences, dropout on, label smoothing 0.1."""
    m = Transformer(TransformerConfig.preset(
        "tiny", vocab_size=V, norm=norm, share_embeddings="none", zero_start=True,
        P_drop_attn=0.1, P_drop_ffn=0.1))
    report = check_model(m, *_batch(), rng=5)
    assert report.passed, "\n" + report.table()
    assert [r.name for r in report.rows] == list(m.parameters())


def test_start_row_is_not_read_and_gets_no_gradient():
    """The <bos> row of the target embedding (untied: share_embeddings="none") changes no
    logit and gets exactly zero gradient; without the option it does both."""
    src, tgt_in, tgt_out = _batch(1)
    for zero, moves in [(True, False), (False, True)]:
        with B.precision("float64"):
            m = Transformer(TransformerConfig.preset(
                "tiny", vocab_size=V, share_embeddings="none", zero_start=zero))
            before = B.asnumpy(m.forward(src, tgt_in)[0])
            m.zero_grad()
            loss, cache = m.loss_forward(src, tgt_in, tgt_out)
            m.loss_backward(cache)
            grad_bos = B.asnumpy(m.gradients()["embed.E"])[BOS]
            m.parameters()["embed.E"][BOS] += 1.0
            after = B.asnumpy(m.forward(src, tgt_in)[0])
        assert (np.abs(after - before).max() > 1e-6) == moves
        assert (np.abs(grad_bos).max() > 0) == moves


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_step_by_step_equals_forward(norm):
    """decode_step, one position at a time and a prefix at once, gives the forward's
    logits: the zero start at position 0 only."""
    with B.precision("float64"):
        m = lively_model(V=11, norm=norm, zero_start=True)
        src = B.asarray(random_src(11, [7, 4, 2], seed=1))
        tgt = np.random.default_rng(2).integers(3, 11, (3, 6))
        tgt[:, 0] = m.config.bos_id
        tgt = B.asarray(tgt)
        full = B.asnumpy(m.forward(src, tgt)[0])
        memory, src_mask = m.encode_infer(src)
        kv = m.init_kv(memory, src_mask, beams=1, capacity=6)
        for t in range(6):
            step = B.asnumpy(m.decode_step(tgt[:, t : t + 1], kv))[:, 0]
            assert np.abs(step - full[:, t]).max() < 1e-9, f"step {t}"
        kv = m.init_kv(memory, src_mask, beams=1, capacity=6)
        a = B.asnumpy(m.decode_step(tgt[:, :3], kv))
        b = B.asnumpy(m.decode_step(tgt[:, 3:], kv))
        assert np.abs(np.concatenate([a, b], axis=1) - full).max() < 1e-9


def test_first_token_id_is_irrelevant():
    """Whatever token sits at position 0, the logits are the same."""
    src, tgt_in, _ = _batch(2)
    m = Transformer(TransformerConfig.preset("tiny", vocab_size=V, zero_start=True))
    other = B.asnumpy(tgt_in).copy()
    other[:, 0] = 7
    a = B.asnumpy(m.forward(src, tgt_in)[0])
    b = B.asnumpy(m.forward(src, B.asarray(other))[0])
    assert np.array_equal(a, b)


def test_default_is_off_and_checkpoint_fields_round_trip():
    cfg = TransformerConfig.preset("tiny", vocab_size=V)
    assert cfg.zero_start is False
    again = TransformerConfig.from_dict(TransformerConfig.preset(
        "tiny", vocab_size=V, zero_start=True).to_dict())
    assert again.zero_start is True


@pytest.mark.parametrize("make", [LanguageModel, EncoderClassifier])
def test_refused_without_a_decoder_start(make):
    cfg = TransformerConfig.preset("tiny", vocab_size=V, zero_start=True)
    with pytest.raises(ConfigError, match="zero_start .* is for the encoder-decoder"):
        make(cfg) if make is LanguageModel else make(cfg, num_classes=2)


def test_wrong_type_is_refused():
    with pytest.raises(ConfigError, match="zero_start"):
        TransformerConfig.preset("tiny", vocab_size=V, zero_start="yes")
