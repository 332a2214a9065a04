"""Sampling, over a key/value cache: one draw (``sample_next``) for the encoder-decoder
(``sample_decode``, what ``translate`` runs for ``search="sample"``) and the
decoder-only language model (``generate``).

At every step each row draws its next token from its logits z (after the token rules:
-inf on what may not come next):

    z / temperature                     temperature 0: the argmax (greedy), no draw
    top_k > 0: keep the k largest       (a token tied with the k-th is kept too)
    p = softmax(z)
    top_p < 1: keep the most probable tokens, best first, while the mass before them is
               below top_p: the smallest such set whose mass reaches top_p (nucleus
               sampling, Holtzman et al. 2019; a token tied with the last kept is kept too)
    draw y with probability p(y) / (the mass kept), by the inverse of the cumulative sum

Reproducible: sample ``j`` of the sentence (or prompt) at position ``i`` draws from its
own generator, ``numpy.random.default_rng([seed, i, j])``, one uniform per step. A
sample therefore depends on the seed, its position and its index alone, not on the
batch, the chunk or the number of samples asked for (up to the float rounding of the
logits, which a batch of another size may change in the last bits: a draw moves only
when its uniform falls within that rounding of a step of the cumulative sum).

A sample's ``logprob`` is ``log P(tokens, <eos> | source)`` under the model itself
(normalized over the whole vocabulary before the rules, as beam search's is; not under
the tempered, truncated distribution it was drawn from), its ``score`` that divided by
the GNMT length penalty with ``options.alpha``, as a beam hypothesis is scored.

Dimension key: ``B`` sentences, ``S`` source length, ``n`` samples per sentence,
``R`` rows (``B * n``, or samples of a prompt), ``P`` prompt length, ``V`` vocabulary.
"""

from __future__ import annotations

from scratchformer.engine import backend
from scratchformer.engine.backend import xp
from scratchformer.engine.decode.common import (
    Hypothesis,
    check_decode_memory,
    check_vocabulary,
    constrain,
    length_penalty,
    log_normalizer,
    max_output_lengths,
    nan_scores,
    next_scores,
    source_lengths,
    start_column,
)
from scratchformer.engine.decode.options import (
    DecodeError,
    DecodeOptions,
    check_sampling,
    options_of,
)

#: the error of bad sampling settings (the decoding error: one kind for every search)
SamplingError = DecodeError

#: sampling's options when none are given
SAMPLE = DecodeOptions(search="sample")


def row_generators(seed: int, positions, samples: int) -> list:
    """The generators of ``len(positions) * samples`` rows, sentence-major: row
    ``b * samples + j`` draws from ``default_rng([seed, positions[b], j])``."""
    np = backend.np
    return [np.random.default_rng([seed, int(i), j]) for i in positions for j in range(samples)]


def uniforms(generators, rows) -> object:
    """Host float64 (R,): the next uniform in [0, 1) of the generator of each of ``rows``."""
    return backend.np.array([generators[r].random() for r in rows], dtype=backend.np.float64)


def kept_probabilities(scores, temperature: float, top_k: int = 0, top_p: float = 1.0):
    """scores (R, V) logits, -inf where a token may not come  ->  (R, V) float64 on the
    device: softmax(scores / temperature) with zeros outside the top_k and the top_p
    nucleus, NOT renormalized (``sample_next`` draws in proportion to it). Temperature
    > 0 (0 is the argmax, drawn by ``sample_next`` without this)."""
    z = scores.astype(xp.float64) / temperature  # (R, V) a copy
    V = z.shape[-1]
    if 0 < top_k < V:
        kth = xp.partition(z, V - top_k, axis=-1)[:, V - top_k : V - top_k + 1]  # (R, 1)
        z = xp.where(z >= kth, z, -xp.inf)
    p = xp.exp(z - z.max(axis=-1, keepdims=True))  # (R, V), the largest is 1
    p /= p.sum(axis=-1, keepdims=True)
    if top_p < 1:
        ranked = -xp.sort(-p, axis=-1)  # (R, V) best first
        before = xp.cumsum(ranked, axis=-1) - ranked  # the mass of the better tokens
        count = (before < top_p).sum(axis=-1)  # (R,) >= 1: the best token is always kept
        last = ranked[xp.arange(p.shape[0]), count - 1][:, None]  # (R, 1) least kept
        p = xp.where(p >= last, p, 0.0)
    return p


def sample_next(scores, temperature: float, top_k: int, top_p: float, u):
    """scores (R, V) logits (-inf where a token may not come), ``u`` host (R,) uniforms
    in [0, 1)  ->  host int64 (R,): each row's draw from ``kept_probabilities``, the
    first token whose cumulative mass exceeds ``u`` times the mass kept (so a token of
    probability 0 is never drawn, whatever the rounding); temperature 0: the argmax."""
    if temperature == 0:
        return backend.asnumpy(xp.argmax(scores, axis=-1)).astype(backend.np.int64)
    cdf = xp.cumsum(kept_probabilities(scores, temperature, top_k, top_p), axis=-1)  # (R, V)
    x = backend.asarray(u)[:, None] * cdf[:, -1:]  # (R, 1) below the mass kept
    return backend.asnumpy((cdf <= x).sum(axis=-1)).astype(backend.np.int64)


def _positions(positions, B: int):
    """Host int64 (B,): the position of every sentence (default 0 .. B-1), checked."""
    np = backend.np
    if positions is None:
        return np.arange(B)
    pos = list(positions)
    if len(pos) != B or any(isinstance(i, bool) or int(i) != i or i < 0 for i in pos):
        raise DecodeError(f"positions must give {B} whole numbers >= 0 (one per sentence), "
                          f"got {pos[:5]}{'...' if len(pos) > 5 else ''}")
    return np.asarray(pos, dtype=np.int64)


def sample_decode(
    model, src, options: DecodeOptions | None = None, writes=None, positions=None, **settings
) -> list[list[Hypothesis]]:
    """``options.samples`` samples of each sentence of a batch (the module docstring).

    model: a ``Transformer``; src (B, S) int ids, right-padded with pad_id (host or
    backend array); ``options``: the sampling settings, the lengths and token rules of
    decode/common.py (``min_len``, the maximum length where <eos> is forced), the
    decoder's start and ``alpha`` for the scores; ``writes`` (host bool (V,), the tokens
    that write text): with ``min_len`` >= 1 no sample is blank text; ``positions``: the
    position of each sentence, which seeds its samples (default 0 .. B-1); ``settings``:
    fields of ``DecodeOptions`` by name.

    The n samples of a sentence share its cross-attention keys/values (n rows of the
    kv); a sentence leaves the batch once its n samples have all drawn <eos>.

    Returns, per sentence, its n ``Hypothesis(tokens, score, logprob)`` in sample order.
    """
    options = options_of(options, SAMPLE, settings)
    if options.search != "sample":
        raise DecodeError(f"sample_decode draws samples; search is {options.search!r}")
    cfg = model.config
    check_vocabulary(cfg, options.min_len)
    np = backend.np
    src = src if backend.is_array(src) else np.asarray(src)  # host ids stay on the host
    lengths = source_lengths(model, src)  # (B,) host
    B, n = src.shape[0], options.samples
    pos = _positions(positions, B)
    max_lens = max_output_lengths(lengths, options.max_len_a, options.max_len_b, cfg.max_len)
    check_decode_memory(cfg, B * n, int(max_lens.max()) + 1, src.shape[1],
                        f"{n} samples of {B} sentences", "lower the batch size or the samples")
    memory, src_mask = model.encode_infer(src)  # (B, S, D), (B, 1, 1, S)
    padded = bool(lengths.min() < src.shape[1])  # the host lengths: no read
    kv = model.init_kv(memory, src_mask, n, int(max_lens.max()) + 1, padded)
    generators = row_generators(options.seed, pos, n)

    drawn = _Drawn(B * n, cfg.eos_id, writes)
    active = np.arange(B)  # the sentences still sampling
    rows = np.arange(B * n)  # the original row of each live row
    tokens = start_column(B * n, cfg, options)  # (R, 1)
    for step in range(int(max_lens.max()) + 1):
        scores = next_scores(model, tokens, kv)  # (R, V) logits
        lse = log_normalizer(scores)  # (R,) float64, before the rules
        silent = None if writes is None else ~drawn.wrote[rows]
        row_lens = np.repeat(max_lens[active], n)  # (R,)
        scores = constrain(scores, step, row_lens, options.min_len, cfg, silent, writes)
        tok = sample_next(scores, options.temperature, options.top_k, options.top_p,
                          uniforms(generators, rows))  # (R,) host
        lp = backend.asnumpy(scores[xp.arange(len(rows)), backend.asarray(tok)] - lse)
        if np.isnan(lp).any():
            raise nan_scores(model)
        drawn.take(rows, tok, lp)
        finished = drawn.done[rows].reshape(-1, n).all(axis=1)  # (Ba,) sentences done
        if finished.all():
            break
        if finished.any():
            keep = np.flatnonzero(~finished)
            kept_rows = (keep[:, None] * n + np.arange(n)).reshape(-1)
            kv.reorder(kept_rows, sentences=keep)
            active, rows, tok = active[keep], rows[kept_rows], tok[kept_rows]
        tokens = tok[:, None].astype(np.int64)  # (R, 1) host: decode_step moves it
    return drawn.hypotheses(B, n, options.alpha)


class _Drawn:
    """What the samples of ``sample_decode`` drew so far, by original row (b * n + j)."""

    def __init__(self, rows: int, eos: int, writes=None):
        np = backend.np
        self.eos, self.writes = eos, writes
        self.outputs = [[] for _ in range(rows)]  # tokens, without <eos>
        self.logprob = np.zeros(rows)  # log P of the tokens (and <eos> once drawn)
        self.done = np.zeros(rows, dtype=bool)  # drew <eos>
        self.wrote = np.zeros(rows, dtype=bool)  # whether its tokens write text yet

    def take(self, rows, tok, lp) -> None:
        """Row ``rows[i]`` drew ``tok[i]`` of log-probability ``lp[i]`` (host arrays);
        a row done before runs on with its sentence, and its draws are not read."""
        for r, t, q in zip(rows, tok.tolist(), lp.tolist()):
            if self.done[r]:
                continue
            self.logprob[r] += q
            if t == self.eos:
                self.done[r] = True
            else:
                self.outputs[r].append(t)
                if self.writes is not None:
                    self.wrote[r] |= bool(self.writes[t])

    def hypotheses(self, B: int, n: int, alpha: float) -> list[list[Hypothesis]]:
        """Per sentence, its n samples as ``Hypothesis``, scored as beam search scores."""
        def one(r):
            lp = float(self.logprob[r])
            return Hypothesis(self.outputs[r], lp / length_penalty(len(self.outputs[r]) + 1,
                                                                    alpha), lp)

        return [[one(r) for r in range(b * n, (b + 1) * n)] for b in range(B)]


def generate(
    model,
    prompt,
    max_new_tokens: int = 200,
    temperature: float = 1.0,
    top_k: int = 0,
    seed: int = 0,
    num_samples: int = 1,
    top_p: float = 1.0,
    min_new_tokens: int = 0,
    position: int = 0,
) -> list[list[int]]:
    """Continue ``prompt`` (a list of ids, starting with <bos> if the model was trained
    so) ``num_samples`` times; returns the new ids of each sample, without <eos>.

    model: a ``LanguageModel``. Each step draws by ``sample_next`` (the module
    docstring: temperature, top_k, top_p); sample j draws from the generator of
    ``(seed, position, j)``. <pad> and <bos> are never drawn (a <bos> that is also
    <eos>, GPT-2's <|endoftext|>, may be: it ends the sample); <eos> not before
    ``min_new_tokens``. A sample stops at <eos> or after ``max_new_tokens`` (or the
    position table's end). All rows share the prompt, fed at once.
    """
    check_sampling(temperature, top_k, top_p, seed, num_samples, "num_samples")
    for name, v in (("min_new_tokens", min_new_tokens), ("position", position)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise SamplingError(f"{name} must be a whole number >= 0, got {v!r}")
    if not prompt:
        raise SamplingError("the prompt is empty: start it with <bos>")
    np = backend.np
    cfg = model.config
    max_new = min(int(max_new_tokens), cfg.max_len - len(prompt))
    if max_new < 1:
        raise SamplingError(f"the prompt of {len(prompt)} fills max_len={cfg.max_len}")
    check_decode_memory(
        cfg,
        num_samples,
        len(prompt) + max_new,
        0,
        f"{num_samples} samples of up to {max_new} tokens",
        "ask for fewer samples or tokens",
    )
    generators = row_generators(seed, [position], num_samples)
    every = range(num_samples)
    kv = model.init_kv(num_samples, capacity=len(prompt) + max_new)
    # host tokens: decode_step checks them on the host and moves them (nothing read back)
    tokens = np.tile(np.asarray(prompt, dtype=np.int64), (num_samples, 1))
    out = [[] for _ in every]
    done = np.zeros(num_samples, dtype=bool)
    # <pad> and <bos> are never drawn, but a <bos> that is also <eos> ends a sample (GPT-2's
    # <|endoftext|>), and padding that is no token (pad_id = vocab_size) has no logit
    banned = [i for i in (cfg.pad_id, cfg.bos_id) if i < cfg.vocab_size and i != cfg.eos_id]
    for step in range(max_new):
        scores = model.decode_step(tokens, kv)[:, -1]  # (R, V) a fresh array
        scores[:, banned + ([cfg.eos_id] if step < min_new_tokens else [])] = -xp.inf
        nxt = sample_next(scores, temperature, top_k, top_p, uniforms(generators, every))
        for r in np.flatnonzero(~done):
            if nxt[r] == cfg.eos_id:
                done[r] = True
            else:
                out[r].append(int(nxt[r]))
        if done.all():
            break
        tokens = nxt[:, None].astype(np.int64)  # (R, 1) host
    return out


__all__ = [
    "SAMPLE",
    "SamplingError",
    "generate",
    "kept_probabilities",
    "row_generators",
    "sample_decode",
    "sample_next",
    "uniforms",
]
