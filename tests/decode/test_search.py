"""Greedy decoding and beam search: every step against full recomputation, beam 1 vs
greedy, exhaustive enumeration, batch invariance, the length penalty, length limits,
the token rules, n-best lists, n-gram blocking and bad input."""

import itertools

import numpy as np
import pytest
from decode_helpers import (
    CheckingModel,
    add_logit_bias,
    lively_model,
    random_src,
    teacher_forced_logprob,
)

from scratchformer.engine import backend as B
from scratchformer.engine.decode import DecodeError, beam_search, greedy_decode, length_penalty
from scratchformer.engine.errors import (
    ScratchformerError,
    SequenceTooLongError,
    ShapeError,
    TokenError,
)

pytestmark = pytest.mark.usefixtures("backend")

VARIANTS = [
    dict(norm="post", positions="sinusoidal", share="all"),
    dict(norm="pre", positions="sinusoidal", share="none"),
    dict(norm="post", positions="learned", share="none"),
    dict(norm="pre", positions="learned", share="decoder"),
]
LENGTHS = [7, 3, 5, 1]  # a batch of different source lengths


def vid(v):
    return "-".join(v.values())


# -- 1. cached incremental logits == full recomputation at every step --------------------
@pytest.mark.parametrize("variant", VARIANTS, ids=vid)
def test_greedy_every_step_equals_recomputation(variant):
    with B.precision("float64"):
        m = lively_model(V=13, **variant)
        src = random_src(13, LENGTHS, seed=1)
        checker = CheckingModel(m, src)
        out = greedy_decode(checker, src, max_len_a=1.0, max_len_b=4)
    assert out == greedy_decode(m, src, max_len_a=1.0, max_len_b=4)
    assert checker.steps >= 5 and checker.max_err < 1e-9


@pytest.mark.parametrize("variant", VARIANTS, ids=vid)
@pytest.mark.parametrize("K", [3, 5])
def test_beams_every_step_equal_recomputation_after_reordering(variant, K):
    with B.precision("float64"):
        m = lively_model(V=13, **variant)
        src = random_src(13, LENGTHS, seed=2)
        checker = CheckingModel(m, src)
        got = beam_search(checker, src, beam_size=K, max_len_b=4, nbest=K)
        assert checker.max_err < 1e-9
        assert checker.kvs[0].reorders >= 3  # beams really were shuffled
        # the scores reported are those of the tokens reported (a wrong reorder index
        # gives hypotheses whose tokens do not match their log-probabilities)
        for b, hyps in enumerate(got):
            for h in hyps:
                lp = teacher_forced_logprob(m, src[b, : LENGTHS[b]], h.tokens)
                assert abs(lp - h.logprob) < 1e-9
                assert abs(h.score - h.logprob / length_penalty(len(h.tokens) + 1, 0.6)) < 1e-12
    assert got == beam_search(m, src, beam_size=K, max_len_b=4, nbest=K)


# -- 2. beam 1 == greedy -------------------------------------------------------------------
@pytest.mark.parametrize("variant", VARIANTS, ids=vid)
@pytest.mark.parametrize("min_len", [0, 2])
def test_beam_one_equals_greedy(variant, min_len):
    """Exactly at alpha = 0. At alpha > 0 beam 1 may continue past greedy's <eos> (the
    t2t bound), so it returns greedy's output or one with a strictly higher score."""
    with B.precision("float64"):
        for seed in range(3):
            m = lively_model(V=13, seed=seed, **variant)
            src = random_src(13, LENGTHS, seed=seed)
            greedy = greedy_decode(m, src, max_len_b=6, min_len=min_len)
            beam = beam_search(m, src, beam_size=1, alpha=0.0, max_len_b=6, min_len=min_len)
            assert [h[0].tokens for h in beam] == greedy
            beam = beam_search(m, src, beam_size=1, alpha=0.6, max_len_b=6, min_len=min_len)
            for b, (hyps, g) in enumerate(zip(beam, greedy)):
                g_score = teacher_forced_logprob(m, src[b, : LENGTHS[b]], g) / length_penalty(
                    len(g) + 1, 0.6
                )
                assert hyps[0].tokens == g or hyps[0].score > g_score


# -- 3. exhaustive enumeration ---------------------------------------------------------------
def _exhaustive(m, src_row, content, L, alpha):
    """Every output of at most L tokens from ``content``: list of (score, tokens)."""
    out = []
    for n in range(L + 1):
        for toks in itertools.product(content, repeat=n):
            lp = teacher_forced_logprob(m, src_row, list(toks))
            out.append((lp / length_penalty(n + 1, alpha), list(toks)))
    return sorted(out, key=lambda x: -x[0])


@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
def test_exhaustive_search_and_large_beam_agree(alpha):
    """V = 6 (three content tokens), at most 3 output tokens: 40 possible outputs.
    A beam of 40 holds them all, so its 40-best list is the whole ranked enumeration;
    beam 4 never scores above the optimum."""
    with B.precision("float64"):
        found_better_than_greedy = 0
        for seed in range(4):
            m = lively_model(V=6, seed=seed, eos_gain=1.0)
            src = random_src(6, [4, 2], seed=seed)
            kw = dict(alpha=alpha, max_len_a=0.0, max_len_b=3)
            big = beam_search(m, src, beam_size=40, nbest=40, **kw)
            small = beam_search(m, src, beam_size=4, **kw)
            greedy = greedy_decode(m, src, max_len_a=0.0, max_len_b=3)
            for b, n in enumerate([4, 2]):
                ranked = _exhaustive(m, src[b, :n], [3, 4, 5], 3, alpha)
                assert len(big[b]) == 40
                assert np.allclose([h.score for h in big[b]], [s for s, _ in ranked], atol=1e-9)
                assert big[b][0].tokens == ranked[0][1]
                assert small[b][0].score <= ranked[0][0] + 1e-12
                found_better_than_greedy += greedy[b] != ranked[0][1]
        assert found_better_than_greedy > 0  # the fixture is not one greedy already solves


# -- 4. batch invariance ------------------------------------------------------------------------
@pytest.mark.parametrize("variant", VARIANTS[1::2], ids=vid)
def test_same_output_alone_and_in_a_batch(variant):
    with B.precision("float64"):
        m = lively_model(V=13, **variant)
        lengths = [6, 2, 9, 4, 1]
        src = random_src(13, lengths, seed=7)
        batch_beam = beam_search(m, src, beam_size=4, nbest=3, max_len_b=5)
        batch_greedy = greedy_decode(m, src, max_len_b=5)
        for b, n in enumerate(lengths):
            alone = src[b : b + 1, :n]
            (hyps,) = beam_search(m, alone, beam_size=4, nbest=3, max_len_b=5)
            assert [h.tokens for h in hyps] == [h.tokens for h in batch_beam[b]]
            assert np.allclose([h.score for h in hyps], [h.score for h in batch_beam[b]])
            assert greedy_decode(m, alone, max_len_b=5) == [batch_greedy[b]]
        # and in another order, with the batch padded wider
        perm = [4, 2, 0, 3, 1]
        wider = np.zeros((5, 12), dtype=np.int64)
        wider[:, : src.shape[1]] = src[perm]
        again = beam_search(m, wider, beam_size=4, nbest=3, max_len_b=5)
        assert [[h.tokens for h in again[i]] for i in range(5)] == [
            [h.tokens for h in batch_beam[p]] for p in perm
        ]


# -- 5. length penalty, alpha, max and min length ------------------------------------------------
def test_length_penalty_values_from_reference():
    assert length_penalty(2, 0.6) == pytest.approx(1.0969, abs=1e-4)
    assert length_penalty(5, 0.6) == pytest.approx(1.3587, abs=1e-4)
    assert length_penalty(10, 0.6) == pytest.approx(1.7329, abs=1e-4)
    assert length_penalty(1, 0.6) == 1.0  # (5 + 1) / 6
    assert length_penalty(37, 0.0) == 1.0


def test_raising_alpha_never_shortens_the_best_hypothesis():
    with B.precision("float64"):
        m = lively_model(V=13, seed=1)
        src = random_src(13, [6, 3, 8, 5], seed=11)
        alphas = [0.0, 0.3, 0.6, 1.0, 1.5, 2.5]
        lengths = np.array(
            [[len(h[0].tokens) for h in beam_search(m, src, alpha=a, max_len_b=8)] for a in alphas]
        )
    assert (np.diff(lengths, axis=0) >= 0).all(), lengths
    assert (lengths[-1] > lengths[0]).any(), lengths  # alpha does matter on this fixture


def test_max_length_is_honoured_and_eos_forced():
    """A model that never wants <eos> stops at L = floor(a * S + b) tokens, clamped to
    config.max_len - 1, and still ends with <eos> (counted in the length penalty)."""
    with B.precision("float64"):
        for norm in ["post", "pre"]:
            m = add_logit_bias(lively_model(V=13, seed=2, norm=norm, max_len=20), {2: -30.0})
            src = random_src(13, [6, 3, 10], seed=3)
            for a, b, expect in [(1.0, 2, [8, 5, 12]), (0.5, 1, [4, 2, 6]), (2.0, 50, [19] * 3)]:
                greedy = greedy_decode(m, src, max_len_a=a, max_len_b=b)
                beams = beam_search(m, src, beam_size=3, nbest=3, max_len_a=a, max_len_b=b)
                assert [len(g) for g in greedy] == expect
                for hyps, n in zip(beams, expect):
                    assert len(hyps) == 3 and all(len(h.tokens) == n for h in hyps)
            # the forced <eos> is part of the log-probability (about -30 here)
            h = beams[1][0]
            assert abs(teacher_forced_logprob(m, src[1, :3], h.tokens) - h.logprob) < 1e-9
            assert h.logprob < -30


def test_min_length_is_honoured():
    """A model that wants <eos> at once: outputs have exactly min_len tokens, unless the
    maximum length is shorter (the forced <eos> wins)."""
    with B.precision("float64"):
        m = add_logit_bias(lively_model(V=13, seed=3), {2: 30.0})
        src = random_src(13, [5, 2], seed=4)
        assert greedy_decode(m, src, max_len_b=6) == [[], []]
        for min_len in [1, 3, 5]:
            assert [len(x) for x in greedy_decode(m, src, max_len_b=6, min_len=min_len)] == [
                min_len
            ] * 2
            for hyps in beam_search(m, src, beam_size=4, nbest=4, max_len_b=6, min_len=min_len):
                assert len(hyps) == 4 and all(len(h.tokens) == min_len for h in hyps)
        out = greedy_decode(m, src, max_len_a=0.0, max_len_b=2, min_len=5)
        assert [len(x) for x in out] == [2, 2]


def test_pad_and_bos_never_emitted_even_when_most_likely():
    with B.precision("float64"):
        m = add_logit_bias(lively_model(V=13, seed=4), {0: 20.0, 1: 19.0})
        src = random_src(13, [5, 3, 6], seed=5)
        kv = m.init_kv(*m.encode_infer(B.asarray(src)))
        first = B.asnumpy(m.decode_step(B.asarray(np.full((3, 1), 1)), kv))[:, 0]
        assert (first.argmax(-1) == 0).all()  # unconstrained, <pad> would win
        outs = greedy_decode(m, src, max_len_b=6)
        outs += [h.tokens for hs in beam_search(m, src, nbest=4, max_len_b=6) for h in hs]
        for toks in outs:
            assert 0 not in toks and 1 not in toks


# -- beam size >= V, n-best lists, n-gram blocking ---------------------------------------------
@pytest.mark.parametrize("K", [4, 5, 6, 12, 30])
def test_beam_size_at_least_vocabulary(K):
    """V = 5: two content tokens and <eos>; beams of V and beyond still work, and every
    hypothesis is distinct and correctly scored."""
    with B.precision("float64"):
        m = lively_model(V=5, seed=5, eos_gain=1.0)
        src = random_src(5, [3, 2], seed=6)
        got = beam_search(m, src, beam_size=K, nbest=K, max_len_a=0.0, max_len_b=3)
        for b, hyps in enumerate(got):
            assert 1 <= len(hyps) <= min(K, 1 + 2 + 4 + 8)  # outputs of <= 3 tokens over {3, 4}
            assert len({tuple(h.tokens) for h in hyps}) == len(hyps)
            assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
            for h in hyps:
                assert set(h.tokens) <= {3, 4} and len(h.tokens) <= 3
                lp = teacher_forced_logprob(m, src[b, : [3, 2][b]], h.tokens)
                assert abs(lp - h.logprob) < 1e-9


def test_nbest_lists_are_sorted_distinct_and_prefix_of_larger_nbest():
    with B.precision("float64"):
        m = lively_model(V=13, seed=6)
        src = random_src(13, [5, 7], seed=7)
        four = beam_search(m, src, beam_size=6, nbest=4, max_len_b=5)
        one = beam_search(m, src, beam_size=6, nbest=1, max_len_b=5)
        for hyps, best in zip(four, one):
            assert len(hyps) == 4
            assert hyps[0] == best[0]
            assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
            assert len({tuple(h.tokens) for h in hyps}) == 4


def _has_repeat(tokens, n):
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(grams) != len(set(grams))


@pytest.mark.parametrize("n", [1, 2, 3])
def test_no_repeat_ngram_blocking(n):
    with B.precision("float64"):
        m = lively_model(V=13, seed=0, norm="post", eos_gain=0.5)  # a repetitive model
        src = random_src(13, [6, 4], seed=8)
        plain = beam_search(m, src, beam_size=3, nbest=3, max_len_b=8)
        assert any(_has_repeat(h.tokens, n) for hs in plain for h in hs)
        blocked = beam_search(m, src, beam_size=3, nbest=3, max_len_b=8, no_repeat_ngram_size=n)
        for b, hyps in enumerate(blocked):
            for h in hyps:
                assert not _has_repeat(h.tokens, n)
                lp = teacher_forced_logprob(m, src[b, : [6, 4][b]], h.tokens)
                assert abs(lp - h.logprob) < 1e-9


# -- 7. bad input ----------------------------------------------------------------------------------
def test_bad_input_gives_clear_errors():
    with B.precision("float64"):
        m = lively_model(V=13, max_len=16)
    src = random_src(13, [4, 2])
    for fn in (greedy_decode, beam_search):
        with pytest.raises(DecodeError, match=r"sentence\(s\) \[1\] are empty"):
            fn(m, np.array([[4, 5], [0, 0]]))
        with pytest.raises(ShapeError, match="empty"):
            fn(m, np.zeros((2, 0), dtype=np.int64))
        with pytest.raises(ShapeError, match="rank 2"):
            fn(m, np.array([4, 5, 6]))
        with pytest.raises(TokenError, match="out of range"):
            fn(m, np.array([[4, 13]]))
        with pytest.raises(TokenError, match="integer"):
            fn(m, np.array([[4.0, 5.0]]))
        with pytest.raises(SequenceTooLongError, match="16 positions"):
            fn(m, np.full((1, 17), 5))
        with pytest.raises(DecodeError, match="right-padded"):
            fn(m, np.array([[0, 4, 5]]))
        with pytest.raises(DecodeError, match="min_len"):
            fn(m, src, min_len=-1)
    for kwargs, match in [
        (dict(beam_size=0), "beam_size"),
        (dict(beam_size=2, nbest=3), "nbest"),
        (dict(alpha=-0.5), "alpha"),
        (dict(no_repeat_ngram_size=-1), "no_repeat"),
    ]:
        with pytest.raises(DecodeError, match=match):
            beam_search(m, src, **kwargs)
    with B.precision("float64"):
        tiny = lively_model(V=3)  # only <pad>, <bos>, <eos>
    with pytest.raises(DecodeError, match="nothing but"):
        greedy_decode(tiny, np.array([[2]]), min_len=1)
    assert greedy_decode(tiny, np.array([[2]])) == [[]]
    assert issubclass(DecodeError, ScratchformerError)


def test_source_at_the_model_limit_decodes_within_positions():
    """A source of exactly max_len tokens is accepted; the output is clamped to
    max_len - 1 tokens so that every decoder input has a position."""
    with B.precision("float64"):
        m = lively_model(V=13, max_len=10, eos_gain=0.0)
        src = random_src(13, [10], seed=9)
        (out,) = greedy_decode(m, src)
        ((h, *_),) = beam_search(m, src, beam_size=2)
    assert len(out) <= 9 and len(h.tokens) <= 9
