"""The key/value cache: incremental decoding equals full recomputation (float64), through
appends, prefill blocks, reorders with repeated parents and dropped sentences; the
cross-attention keys/values are computed once per sentence; decoding builds no
backward caches."""

import numpy as np
import pytest
from decode_helpers import lively_model, random_src

from scratchformer.engine import backend as B
from scratchformer.engine.decode import beam_search, greedy_decode
from scratchformer.engine.errors import ScratchformerError

pytestmark = pytest.mark.usefixtures("backend")

VARIANTS = [
    dict(norm="post", positions="sinusoidal", share="all"),
    dict(norm="pre", positions="sinusoidal", share="decoder"),
    dict(norm="post", positions="learned", share="none"),
    dict(norm="pre", positions="learned", share="none"),
]


def _ids(a):
    return B.asarray(np.asarray(a, dtype=np.int64))


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: "-".join(v.values()))
def test_step_by_step_equals_forward(variant):
    with B.precision("float64"):
        m = lively_model(V=11, **variant)
        src = _ids(random_src(11, [7, 4, 2], seed=1))
        tgt = np.random.default_rng(2).integers(3, 11, (3, 6))
        tgt[:, 0] = m.config.bos_id
        tgt = _ids(tgt)
        full = B.asnumpy(m.forward(src, tgt)[0])  # (B, T, V), the training path
        memory, src_mask = m.encode_infer(src)
        assert np.abs(B.asnumpy(memory) - B.asnumpy(m.encode(src)[0])).max() < 1e-12
        kv = m.init_kv(memory, src_mask, beams=1, capacity=6)
        for t in range(6):
            step = B.asnumpy(m.decode_step(tgt[:, t : t + 1], kv))[:, 0]
            assert np.abs(step - full[:, t]).max() < 1e-9, f"step {t}"
        assert kv.length == 6
        # a whole prefix at once (T > 1, causal inside the block), then the rest
        kv = m.init_kv(memory, src_mask, beams=1, capacity=6)
        a = B.asnumpy(m.decode_step(tgt[:, :4], kv))
        b = B.asnumpy(m.decode_step(tgt[:, 4:], kv))
        assert np.abs(np.concatenate([a, b], axis=1) - full).max() < 1e-9


@pytest.mark.parametrize("variant", VARIANTS[::3], ids=lambda v: "-".join(v.values()))
def test_reorder_with_repeated_parents_and_dropped_sentences(variant):
    """Rows follow random parents (repeats included, as beams do) and a sentence is
    dropped halfway; after every step each row's logits equal a full forward of its own
    history. A reorder that forgot the buffers, or used the wrong rows, fails here."""
    with B.precision("float64"):
        V, K = 11, 3
        m = lively_model(V=V, **variant)
        src = random_src(V, [6, 3, 5], seed=3)
        rng = np.random.default_rng(4)
        memory, src_mask = m.encode_infer(_ids(src))
        kv = m.init_kv(memory, src_mask, beams=K, capacity=8)
        sent = np.repeat(np.arange(3), K)  # sentence of each row
        hist = np.full((3 * K, 1), m.config.bos_id)
        for t in range(7):
            logits = B.asnumpy(m.decode_step(_ids(hist[:, -1:]), kv))[:, 0]
            full = B.asnumpy(m.forward(_ids(src[sent]), _ids(hist))[0])[:, -1]
            assert np.abs(logits - full).max() < 1e-9, f"step {t}"
            n_sent = len(sent) // K
            keep = np.arange(n_sent) if t != 3 else np.array([0, 2])  # drop one sentence
            parents = rng.integers(0, K, (keep.size, K))  # repeats allowed
            rows = (keep[:, None] * K + parents).reshape(-1)
            kv.reorder(rows, sentences=None if t != 3 else keep)
            sent, hist = sent[rows], hist[rows]
            hist = np.concatenate([hist, rng.integers(3, V, (len(rows), 1))], axis=1)
        assert kv.sentences == 2 and kv.rows == 2 * K


def test_cross_attention_kv_is_computed_once_per_sentence(monkeypatch):
    """Beam search over B sentences with K beams projects the encoder output once per
    decoder layer, into (B, H, S, Dh) arrays: not per beam, not per step."""
    with B.precision("float64"):
        m = lively_model(V=11)
        src = random_src(11, [5, 3], seed=5)
        calls = []
        for layer in m.decoder.layers:
            original = layer.cross_attn.project_kv

            def counted(x, _original=original):
                calls.append(x.shape)
                return _original(x)

            monkeypatch.setattr(layer.cross_attn, "project_kv", counted)
        beam_search(m, src, beam_size=4, max_len_b=6)
        assert len(calls) == len(m.decoder.layers)
        assert all(shape[0] == 2 for shape in calls)  # B, not B * K
        memory, src_mask = m.encode_infer(_ids(src))
        kv = m.init_kv(memory, src_mask, beams=4)
        lkv = kv.layers[0]
        assert lkv.cross_k.shape == (2, m.config.h, 5, m.config.d_model // m.config.h)
        assert lkv.self_k.shape[0] == 2 * 4


def test_decoding_runs_the_training_forwards_with_dropout_off(monkeypatch):
    """Decoding has no math of its own: the encoder, the attention core, the feed-forward
    network and every Add & Norm are the training forwards, called with no generator
    (dropout off), their backward caches dropped. Spies count the calls and check that
    no generator reaches them; the outputs are unchanged."""
    from scratchformer.engine.nn import (
        AddNorm,
        Dropout,
        MultiHeadAttention,
        PositionwiseFeedForward,
    )
    from scratchformer.engine.ops.attention import attention_core

    calls = {}

    def spy(owner, name, rng_at=None, label=None):
        original = getattr(owner, name)
        label = label or name

        def wrapped(*args, **kwargs):
            if rng_at is not None and len(args) > rng_at:
                assert args[rng_at] is None, f"{name} got a generator while decoding"
            assert kwargs.get("rng") is None, f"{name} got a generator while decoding"
            calls[label] = calls.get(label, 0) + 1
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, wrapped)

    with B.precision("float64"):
        m = lively_model(V=11)
        src = random_src(11, [5, 3], seed=6)
        expected = beam_search(m, src, beam_size=3, max_len_b=5)
        spy(attention_core, "forward", rng_at=4, label="attention_forward")
        spy(MultiHeadAttention, "attend", rng_at=5)
        spy(PositionwiseFeedForward, "forward", rng_at=2)
        spy(AddNorm, "enter")
        spy(AddNorm, "exit", rng_at=3)
        spy(Dropout, "forward", rng_at=2)
        got = beam_search(m, src, beam_size=3, max_len_b=5)
        greedy_decode(m, src, max_len_b=5)
    assert [[h.tokens for h in hs] for hs in got] == [[h.tokens for h in hs] for hs in expected]
    for name in ("attention_forward", "attend", "forward", "enter", "exit"):
        assert calls.get(name, 0) > 0, f"decoding never called {name}"


def test_kv_misuse_gives_clear_errors():
    with B.precision("float64"):
        m = lively_model(V=11)
        memory, src_mask = m.encode_infer(_ids(random_src(11, [4, 2])))
        kv = m.init_kv(memory, src_mask, beams=2, capacity=2)
        with pytest.raises(ScratchformerError, match="rows"):
            m.decode_step(_ids([[1], [1]]), kv)  # 2 rows, the kv holds 4
        m.decode_step(_ids([[1]] * 4), kv)
        with pytest.raises(ScratchformerError, match="capacity"):
            m.decode_step(_ids([[3, 4]] * 4), kv)
        with pytest.raises(ScratchformerError, match="rows for"):
            kv.reorder(np.array([0, 1, 2]))
        with pytest.raises(ScratchformerError, match="capacity"):
            m.init_kv(memory, src_mask, capacity=m.config.max_len + 1)
