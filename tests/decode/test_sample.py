"""Sampling (engine/decode/sample.py): seeded by (seed, position, sample), the
distributions that temperature, top-k and top-p draw from, measured on models whose
next-token distribution is set by hand, and the options' checks."""

import numpy as np
import pytest
from decode_helpers import lively_model, random_src, teacher_forced_logprob

from scratchformer.engine import backend as B
from scratchformer.engine.decode import DecodeError, DecodeOptions, greedy_decode, sample_decode
from scratchformer.engine.decode.sample import generate, kept_probabilities, sample_next
from scratchformer.engine.models import LanguageModel, TransformerConfig

V = 12
#: the next-token distribution set by hand over the ids 3 .. 11 (0, 1, 2 are <pad>,
#: <bos> and <eos>, which the first step of a sample with min_len 1 never draws)
PROBS = np.array([0.30, 0.20, 0.15, 0.10, 0.08, 0.07, 0.05, 0.03, 0.02])
FIRST = 3


def _expected(temperature=1.0, top_k=0, top_p=1.0):
    """The distribution a draw must follow, worked out here from PROBS alone (not by the
    code under test): p ** (1 / T), the k best, renormalized, then the nucleus."""
    p = PROBS ** (1 / temperature)
    p = p / p.sum()
    order = np.argsort(-p, kind="stable")
    if top_k:
        p[order[top_k:]] = 0
        p = p / p.sum()
    if top_p < 1:
        before = np.cumsum(p[order]) - p[order]
        p[order[before >= top_p]] = 0
        p = p / p.sum()
    return p


def _fixed_transformer():
    """An encoder-decoder whose logits are log PROBS at every step, whatever the input:
    pre-LN, its last LayerNorm with gamma = 0 and beta = e_0 gives h = e_0, and the
    logits are row 0 of the output projection."""
    m = lively_model(V=V, seed=4, max_len=16)
    P = m.parameters()
    P["decoder.norm.gamma"][...] = 0.0
    P["decoder.norm.beta"][...] = 0.0
    P["decoder.norm.beta"][0] = 1.0
    logits = np.zeros(V)
    logits[FIRST:] = np.log(PROBS)
    P["out_proj.W"][0] = B.asarray(logits, dtype=P["out_proj.W"].dtype)
    return m


def _fixed_lm():
    """A language model whose logits are log PROBS at every step: pre-LN, its last
    LayerNorm gives h = e_0, and the tied projection h E^T is column 0 of E."""
    m = LanguageModel(TransformerConfig.preset("tiny", vocab_size=V, norm="pre", seed=2))
    P = m.parameters()
    P["decoder.norm.gamma"][...] = 0.0
    P["decoder.norm.beta"][...] = 0.0
    P["decoder.norm.beta"][0] = 1.0
    P["embed.E"][:, 0] = 0.0
    P["embed.E"][FIRST:, 0] = B.asarray(np.log(PROBS), dtype=P["embed.E"].dtype)
    return m


def _check_frequencies(draws, expected):
    """Each token's frequency within 4.5 standard errors of its probability (one in
    150,000 for a right sampler, and the seed fixes the draws), and a token the
    truncation removed never drawn."""
    n = len(draws)
    counts = np.bincount(np.asarray(draws) - FIRST, minlength=len(PROBS))[: len(PROBS)]
    assert counts.sum() == n  # nothing outside the ids 3 .. 11
    freq = counts / n
    for tok, (f, p) in enumerate(zip(freq, expected)):
        if p == 0:
            assert f == 0, f"token {tok + FIRST} was cut off and still drawn ({f:.4f})"
        else:
            tol = 4.5 * np.sqrt(p * (1 - p) / n)
            assert abs(f - p) <= tol, f"token {tok + FIRST}: {f:.4f} drawn, {p:.4f} +- {tol:.4f}"


SETTINGS = [
    dict(),
    dict(temperature=0.5),
    dict(temperature=2.0, top_k=4),
    dict(top_k=3),
    dict(top_p=0.4),  # masses before each token: 0, .3, .5: keeps two
    dict(top_p=0.7),  # 0, .3, .5, .65, .75: keeps four
    dict(top_k=3, top_p=0.7),  # top-k first: .46, .31, .23, masses 0, .46, .77: keeps two
]


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: ",".join(f"{k}={v}" for k, v in
                                                                     s.items()) or "plain")
def test_a_translation_sample_follows_the_truncated_distribution(setting):
    """One token per sample (min_len 1 and a maximum of one token): 20 sentences times
    400 samples, each a draw of the first step."""
    m = _fixed_transformer()
    src = np.full((20, 3), 5, dtype=np.int64)
    options = DecodeOptions(search="sample", samples=400, min_len=1, max_len_a=0, max_len_b=1,
                            seed=11, **setting)
    found = sample_decode(m, src, options)
    draws = [h.tokens[0] for sentence in found for h in sentence]
    assert all(len(h.tokens) == 1 for sentence in found for h in sentence)
    _check_frequencies(draws, _expected(**setting))


@pytest.mark.parametrize("setting", [dict(), dict(temperature=0.7, top_p=0.5), dict(top_k=2)],
                         ids=["plain", "T0.7,top_p=0.5", "top_k=2"])
def test_a_language_model_sample_follows_the_truncated_distribution(setting):
    m = _fixed_lm()
    kw = {"temperature": 1.0, **setting}
    draws = generate(m, [m.config.bos_id], max_new_tokens=1, min_new_tokens=1, seed=5,
                     num_samples=6000, **kw)
    _check_frequencies([d[0] for d in draws], _expected(**setting))


def test_the_kept_probabilities_are_those_worked_out_by_hand():
    """The same cuts exactly (no sampling noise): the probabilities a draw is made in
    proportion to, for every setting."""
    logits = np.zeros((1, V))
    logits[0, :FIRST] = -np.inf
    logits[0, FIRST:] = np.log(PROBS)
    for s in SETTINGS:
        kept = B.asnumpy(kept_probabilities(B.asarray(logits), s.get("temperature", 1.0),
                                            s.get("top_k", 0), s.get("top_p", 1.0)))[0]
        assert (kept[:FIRST] == 0).all()
        np.testing.assert_allclose(kept[FIRST:] / kept.sum(), _expected(**s), atol=1e-12)


def test_a_draw_never_lands_on_a_token_of_probability_zero():
    """The inverse-CDF draw with uniforms at both ends of [0, 1): the first and the last
    token allowed, never a banned one beside them."""
    logits = B.asarray(np.array([[-np.inf, 0.0, -np.inf, 1.0, -np.inf]] * 3))
    u = np.array([0.0, 0.5, 1 - 2**-53])
    assert sample_next(logits, 1.0, 0, 1.0, u).tolist() == [1, 3, 3]
    assert sample_next(logits, 0.0, 0, 1.0, u).tolist() == [3, 3, 3]  # greedy


@pytest.fixture
def lively():
    return lively_model(V=13, seed=1), random_src(13, [4, 2, 5, 3], seed=0)


def test_the_same_seed_gives_the_same_samples_and_another_seed_others(lively):
    m, src = lively
    options = DecodeOptions(search="sample", samples=3, seed=5, top_p=0.9)
    first = sample_decode(m, src, options)
    assert sample_decode(m, src, options) == first
    assert sample_decode(m, src, options.replace(seed=6)) != first
    lm = _fixed_lm()
    a = generate(lm, [1, 5], max_new_tokens=8, seed=3, num_samples=4, top_k=5)
    assert a == generate(lm, [1, 5], max_new_tokens=8, seed=3, num_samples=4, top_k=5)
    assert a != generate(lm, [1, 5], max_new_tokens=8, seed=4, num_samples=4, top_k=5)


def test_a_sentence_samples_are_fixed_by_its_position_alone(lively):
    """Not by the other sentences of the batch, nor by how many samples are asked for
    (the tokens: a float32 log-probability summed over rows of another count may differ
    in its last bits)."""
    m, src = lively

    def tokens(found):
        return [[h.tokens for h in sentence] for sentence in found]

    options = DecodeOptions(search="sample", samples=3, seed=5)
    together = tokens(sample_decode(m, src, options, positions=[7, 8, 9, 10]))
    for b in range(len(src)):
        alone = sample_decode(m, src[b : b + 1], options, positions=[7 + b])
        assert tokens(alone)[0] == together[b]
    fewer = sample_decode(m, src, options.replace(samples=1), positions=[7, 8, 9, 10])
    assert [s[0] for s in tokens(fewer)] == [s[0] for s in together]
    assert tokens(sample_decode(m, src, options))[0] != together[0]  # positions 0 .. 3


def test_temperature_zero_is_greedy(lively):
    m, src = lively
    found = sample_decode(m, src, DecodeOptions(search="sample", temperature=0, samples=2))
    assert [[h.tokens for h in s] for s in found] == [[g, g] for g in greedy_decode(m, src)]


def test_a_sample_s_logprob_is_the_model_s(lively):
    """logprob = log P(tokens, <eos> | source) by a full forward pass (teacher forcing),
    and score = logprob / lp(|Y|); the lengths and min_len hold."""
    with B.precision("float64"):
        m, src = lively_model(V=13, seed=1), lively[1]
        found = sample_decode(m, src, search="sample", samples=2, seed=2, min_len=2,
                              max_len_a=0, max_len_b=6, alpha=0.6)
    for b, sentence in enumerate(found):
        row = src[b][src[b] != 0]
        for h in sentence:
            assert 2 <= len(h.tokens) <= 6 and not {0, 1, 2} & set(h.tokens)
            want = teacher_forced_logprob(m, row, h.tokens)
            assert h.logprob == pytest.approx(want, abs=1e-9)
            assert h.score == pytest.approx(want / ((5 + len(h.tokens) + 1) / 6) ** 0.6)


@pytest.mark.parametrize(
    "setting, message",
    [
        ({"top_p": 0.0}, "top_p must be a number in (0, 1], got 0.0"),
        ({"top_p": 1.5}, "top_p must be a number in (0, 1], got 1.5"),
        ({"top_p": float("nan")}, "top_p must be a number in (0, 1], got nan"),
        ({"temperature": -1.0}, "temperature must be a finite number >= 0, got -1.0"),
        ({"top_k": 2.5}, "top_k must be an integer >= 0, got 2.5"),
        ({"seed": -1}, "seed must be an integer >= 0, got -1"),
        ({"samples": 0}, "samples must be an integer >= 1, got 0"),
        ({"samples": True}, "samples must be an integer >= 1, got True"),
        ({"nbest": 2, "beam_size": 4}, "nbest=2 ranks the hypotheses of a beam search"),
        ({"search": "beam", "samples": 3}, "samples=3 draws several outputs: it needs "
                                           "search='sample', not 'beam'"),
    ],
    ids=lambda v: str(v) if isinstance(v, dict) else "",
)
def test_bad_sampling_settings_are_refused_in_one_line(setting, message):
    with pytest.raises(DecodeError) as e:
        DecodeOptions(**{"search": "sample", **setting})
    assert message in str(e.value) and "\n" not in str(e.value)


def test_sample_decode_wants_sampling_and_a_position_per_sentence(lively):
    m, src = lively
    with pytest.raises(DecodeError, match="search is 'beam'"):
        sample_decode(m, src, DecodeOptions())
    with pytest.raises(DecodeError, match="positions must give 4 whole numbers"):
        sample_decode(m, src, positions=[0, 1])
