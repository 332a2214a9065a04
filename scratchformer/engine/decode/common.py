"""What greedy decoding and beam search share: the length penalty, the hypothesis record,
input checks, the output-length rule and the token constraints applied at every step.

Conventions (both searches):

- ``src`` (B, S) int ids, right-padded with ``pad_id``, no <bos>/<eos> (as the training
  batches hold it). A sentence's source length is its number of non-pad tokens.
- Output tokens exclude <bos> and <eos>. A hypothesis of ``n`` tokens took ``n + 1``
  decoder steps, the last one emitting <eos>: its length for the penalty is
  ``|Y| = n + 1`` (<eos> counted, as tensor2tensor and OpenNMT count it).
- Maximum output length of sentence ``i``, in tokens without <eos>:
  ``L_i = min(floor(max_len_a * S_i + max_len_b), config.max_len - 1)``. The clamp is
  the position table: producing ``L_i`` tokens and then <eos> feeds ``L_i + 1`` decoder
  inputs (<bos> + ``L_i`` tokens) at positions ``0 .. L_i``. At step ``L_i`` <eos> is
  forced, so every hypothesis ends with <eos> at the latest there.
- ``min_len``: <eos> is forbidden while fewer than ``min_len`` tokens were produced;
  the forced <eos> at ``L_i`` wins over it (min_len is in effect clamped to ``L_i``).
  With ``writes`` (host bool (V,): the tokens that write text, ``writing_tokens``),
  <eos> is also forbidden to a row whose tokens so far write nothing (a lone word
  boundary of a BPE vocabulary), and at its last step before the forced <eos> only a
  token that writes is allowed: with ``min_len`` >= 1 an output is never blank text.
- <pad> and <bos> are never emitted (a <bos> in the middle of an output is meaningless
  and would be dropped by every tokenizer).

Dimension key: ``B`` sentences, ``S`` source length, ``V`` vocabulary, ``K`` beams,
``R`` decoding rows (``B * K``).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from scratchformer.engine import backend, dispatch, memory
from scratchformer.engine.backend import xp
from scratchformer.engine.decode.options import DecodeError
from scratchformer.engine.errors import (
    ShapeError,
    check_length,
    check_rank,
    check_token_ids,
)
from scratchformer.engine.ops.linear import linear


def length_penalty(length, alpha: float) -> float:
    """GNMT length penalty (Wu et al. 2016, eq. 14): ``lp(|Y|) = ((5 + |Y|) / 6) ** alpha``.

    A finished hypothesis is scored ``log P(Y | X) / lp(|Y|)``; ``|Y|`` counts <eos>.
    lp(2) = 1.0969, lp(5) = 1.3587, lp(10) = 1.7329 at alpha = 0.6; alpha = 0 gives 1
    (plain log-probability). Not fairseq's ``--lenpen`` (``|Y| ** alpha``).
    """
    return ((5.0 + length) / 6.0) ** alpha


@dataclass(frozen=True)
class Hypothesis:
    """One finished output of beam search."""

    tokens: list  # output ids, without <bos> and <eos>
    score: float  # logprob / length_penalty(len(tokens) + 1, alpha): what beams are ranked by
    logprob: float  # log P(tokens, <eos> | source), summed over the decoder steps


def source_lengths(model, src):
    """Check ``src`` and return its per-sentence lengths as a host int64 array (B,).

    Raises DecodeError (or a ShapeError/TokenError/SequenceTooLongError, all
    ScratchformerErrors) for: a non-(B, S) or non-integer array, an empty batch or
    width, ids outside the source vocabulary, a width beyond ``config.max_len``, a
    sentence with no tokens, or padding before a token (sources are right-padded).
    """
    cfg = model.config
    check_rank(src, 2, "src", "(B, S)")
    if src.shape[0] == 0 or src.shape[1] == 0:
        raise ShapeError(f"src is empty (shape {tuple(src.shape)}): nothing to decode")
    check_token_ids(src, cfg.src_vocab, "src")
    check_length(src.shape[1], cfg.max_len, "src")
    np = backend.np
    real = backend.asnumpy(src) != cfg.pad_id  # (B, S)
    lengths = real.sum(axis=1).astype(np.int64)
    empty = np.flatnonzero(lengths == 0)
    if empty.size:
        raise DecodeError(
            f"source sentence(s) {empty.tolist()} are empty (only padding): an empty "
            "source has nothing to attend to; skip it (translate() maps it to '')"
        )
    holes = np.flatnonzero(real[:, 1:] & ~real[:, :-1]).tolist()
    if holes:
        rows = sorted({i // (src.shape[1] - 1) for i in holes})
        raise DecodeError(
            f"source sentence(s) {rows} have padding before a token: src must be "
            "right-padded (positions are counted from the first column)"
        )
    return lengths


def max_output_lengths(lengths, max_len_a: float, max_len_b: float, model_max_len: int):
    """``L_i = min(floor(a * S_i + b), model_max_len - 1)``, at least 0: host int64 (B,)."""
    np = backend.np
    L = np.floor(max_len_a * np.asarray(lengths, dtype=np.float64) + max_len_b)
    return np.clip(L, 0, model_max_len - 1).astype(np.int64)


def check_vocabulary(config, min_len: int) -> None:
    """min_len > 0 needs at least one token other than <pad>, <bos> and <eos>."""
    specials = {config.pad_id, config.bos_id, config.eos_id}
    if min_len > 0 and config.vocab_size <= len(specials):
        raise DecodeError(
            f"min_len={min_len} cannot be met: the vocabulary of {config.vocab_size} holds "
            "nothing but <pad>, <bos> and <eos>"
        )


def check_decode_memory(cfg, rows: int, capacity: int, source_len: int, what: str, advice: str):
    """Refuse up front (``memory.need_memory``) a decode whose ``rows`` hypotheses or
    samples would not fit. Per row: the key/value caches, ``(capacity + source_len)``
    positions x ``h (d_k + d_v)`` per decoder layer, and about four float64 copies of
    the vocabulary's scores (log-probabilities, candidates, their selection)."""
    layers = cfg.N_dec if source_len else cfg.N
    itemsize = backend.np.dtype(backend.get_dtype()).itemsize
    d_head = (cfg.d_k or cfg.d_model // cfg.h) + (cfg.d_v or cfg.d_model // cfg.h)
    cache = layers * (capacity + source_len) * cfg.h * d_head * itemsize
    memory.need_memory(float(rows) * (cache + 4 * cfg.vocab_size * 8), what, advice)


def step_forms():
    """The forms a decoding step puts in place for its few rows (a ``with`` block): the
    linear map's ``few_rows``, for the tied output projection (ops/linear.py), on NumPy;
    none while the activations are float16 (their emulated forms stay)."""
    if backend.compute_dtype() is not None or backend.backend_name() != "numpy":
        return contextlib.nullcontext()
    return dispatch.use(linear, "few_rows")


def next_scores(model, tokens, kv):
    """One ``decode_step`` of every live row, under ``step_forms``: (R, V) scores (logits,
    the model's dtype) of the next token, a fresh array the token rules may write over."""
    with step_forms():
        return model.decode_step(tokens, kv)[:, -1]


def log_normalizer(scores):
    """(R, V) scores  ->  (R,) float64 ``lse = log sum_y exp(scores[y])``, so that the
    log-probability of token y is ``scores[y] - lse``: the row's max taken out first, the
    exponentials in the scores' dtype (float32 for float16 scores), their sum accumulated
    in float64 (log-probabilities are summed over up to hundreds of steps and compared
    across beams). NaN for a row that holds NaN (its weights overflow: ``nan_scores``).
    Only the normalizer is made, not a (R, V) array of log-probabilities: a search needs
    them for its winners only."""
    if scores.dtype.itemsize < 4:  # float16: its exp and differences keep 3 digits
        scores = scores.astype(xp.float32)
    m = scores.max(axis=-1, keepdims=True)  # (R, 1)
    s = xp.exp(scores - m).sum(axis=-1, dtype=xp.float64)  # (R,)
    return m[:, 0].astype(xp.float64) + xp.log(s)


def nan_scores(model) -> DecodeError:
    """The error for a model whose next-token scores are not numbers (NaN: its weights
    overflow its dtype), naming that cause, instead of a search that ends with no
    hypothesis and blames its options."""
    params = list(model.parameters().values())
    largest = max(float(xp.abs(p).max()) for p in params)
    return DecodeError(
        f"the model's next-token scores are not numbers (NaN): its activations overflow "
        f"{params[0].dtype} (its largest weight is {largest:.1e}): this checkpoint cannot "
        "decode; it holds the weights of a diverged run, or weights changed by hand"
    )


def writing_tokens(tokenizer, vocab_size: int):
    """Host bool (V,): the ids whose text, alone, is not blank (<pad>, <bos>, <eos> and
    the tokens a tokenizer writes as nothing or as space are False)."""
    np = backend.np
    specials = {tokenizer.vocab.pad_id, tokenizer.vocab.bos_id, tokenizer.vocab.eos_id}
    return np.array(
        [i not in specials and bool(tokenizer.decode([i]).strip()) for i in range(vocab_size)]
    )


def silent_rows(history, writes):
    """Host bool (R,): the rows of ``history`` (R, t) whose tokens write no text yet
    (None without ``writes``)."""
    if writes is None:
        return None
    return ~writes[history].any(axis=1) if history.shape[1] else backend.np.ones(len(history), bool)


def constrain(scores, step: int, max_lens, min_len: int, config, silent=None, writes=None):
    """Apply the token rules of decoder step ``step`` (0-based: ``step`` tokens were
    produced so far) to ``scores`` (R, V) (logits or log-probs), in place; returns it.

    - <pad> and <bos>: -inf always;
    - <eos>: -inf while ``step < min_len``, and with ``min_len`` >= 1 in the rows of
      ``silent`` (host bool (R,)), whose tokens write no text yet; at such a row's last
      step before its forced <eos>, every token that writes nothing (``writes`` False);
    - rows whose sentence reached its maximum (``step >= max_lens[r]``, host int (R,)):
      every token but <eos> is -inf, and <eos> keeps its own score (forced <eos>).
    """
    np = backend.np
    out, eos = scores, config.eos_id
    forced = np.flatnonzero(step >= np.asarray(max_lens))
    kept = out[backend.asarray(forced), eos] if forced.size else None  # (F,) before the rules
    out[:, [config.pad_id, config.bos_id]] = -xp.inf
    if step < min_len:
        out[:, eos] = -xp.inf
    if min_len and silent is not None and silent.any():
        rows = np.flatnonzero(silent)
        out[backend.asarray(rows), eos] = -xp.inf
        last = rows[step == np.asarray(max_lens)[rows] - 1]
        if last.size and writes is not None:
            blank = backend.asarray(np.flatnonzero(~writes))
            out[backend.asarray(last)[:, None], blank[None, :]] = -xp.inf
    if forced.size:
        idx = backend.asarray(forced)
        out[idx] = -xp.inf
        out[idx, eos] = kept
    return out


def start_column(rows: int, config, options):
    """(R, 1) host: the first decoder input of every row, ``options.start`` (host tokens
    are checked and moved by the model's ``decode_step``, so nothing is read back)."""
    return backend.np.full((rows, 1), options.start(config), dtype=backend.np.int64)


__all__ = [
    "DecodeError",
    "Hypothesis",
    "start_column",
    "step_forms",
    "check_vocabulary",
    "constrain",
    "silent_rows",
    "writing_tokens",
    "length_penalty",
    "log_normalizer",
    "max_output_lengths",
    "nan_scores",
    "next_scores",
    "source_lengths",
]
