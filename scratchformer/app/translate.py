"""Text in, text out: tokenize, batch by length, beam search (or greedy, or sampling),
detokenize.

    from scratchformer.app.checkpoint import load_checkpoint
    from scratchformer.app.data import tokenizer_from_dict
    ckpt = load_checkpoint("runs/x/checkpoint_1000.npz")
    tok = tokenizer_from_dict(ckpt.meta["tokenizer"])
    translate(ckpt.model, tok, ["hola mundo"])            # -> ["hello world"]

Documented behaviour for awkward input:

- an empty sentence, a blank one (only whitespace of any kind: spaces, tabs, no-break
  spaces) or one the tokenizer turns into no tokens translates to ``""`` (no n-best
  entries) without running the model;
- words outside the vocabulary are the tokenizer's business: ours map them to <unk>,
  which the model sees like any other token;
- a sentence with more tokens than the model has positions (``config.max_len``) is an
  error naming the sentence, raised before anything is decoded;
- a non-empty sentence never translates to nothing: ``min_len=1`` (fairseq's default)
  keeps ``<eos>`` out of the first step, and out of every step while the tokens so far
  write no text (a lone word boundary of an undertrained BPE vocabulary); the maximum
  length still wins (the command line refuses ``max_len_a``/``max_len_b`` that allow
  fewer tokens than ``min_len``). Beam search is exact enough to find the empty
  output when a weak model gives ``<eos>`` a few percent at step one: its score
  ``log p(<eos>) / lp(1)`` then beats every real sentence divided by its length penalty
  (an undertrained Bible model gave ``<eos>`` 4% at step one, and the empty output won).

Sentences are sorted by length into batches of ``batch_size`` (less padding) and the
results put back in input order; thanks to the batch-invariance of the searches this
changes nothing but speed. Sampling (``search="sample"``) draws the samples of the
sentence at position i from generators of ``(seed, i, sample)``: its position in
``sentences`` unless ``positions`` says otherwise (a command that reads a file in
chunks gives each line's number, counted from 0), so a line's samples do not depend on
the batches, the chunks or the lines around it.

Commands that translate a whole file stream it: ``chunked`` cuts the numbered lines
into chunks of ``CHUNK_SIZE``, each translated (sorted and batched within the chunk)
and written before the next is read, so memory does not grow with the file and the
first outputs come while the input still arrives. ``SourceCheck`` checks each line as
it is read, naming its file and line.

    check = SourceCheck(model, tok, "src.txt")
    for chunk in chunked(check(iter_text_lines("src.txt")), CHUNK_SIZE):
        write(translate(model, tok, [s for _, s in chunk]))
    check.warning()      # one line about the tokens read as <unk>, or None
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from scratchformer.app.data.tokenizers import UnknownTokens
from scratchformer.engine import backend
from scratchformer.engine.decode.beam import beam_search
from scratchformer.engine.decode.common import DecodeError, Hypothesis, writing_tokens
from scratchformer.engine.decode.greedy import greedy_decode
from scratchformer.engine.decode.options import DecodeOptions, options_of
from scratchformer.engine.decode.sample import sample_decode


@dataclass(frozen=True)
class Translation:
    text: str  # the detokenized output
    hypothesis: Hypothesis  # its tokens, score and log-probability


#: lines a streaming command reads, translates and writes at a time: enough for full
#: length-sorted batches, few enough that memory stays small and output comes early
CHUNK_SIZE = 2000


#: a word, or a phrase of up to three words, this many times in a row marks an output
#: that loops ("the earth the earth the earth ..."), as a model's do on an input unlike
#: its training data, or an undertrained model's
LOOP_REPEATS = 5


def loops(text: str) -> bool:
    """Whether ``text`` repeats a phrase of 1-3 words ``LOOP_REPEATS`` times in a row:
    a stretch of ``LOOP_REPEATS * n`` words of period ``n``."""
    w = text.split()
    for n in (1, 2, 3):
        run = 0  # words equal to the word n before, in a row
        for i in range(n, len(w)):
            run = run + 1 if w[i] == w[i - n] else 0
            if run >= (LOOP_REPEATS - 1) * n:
                return True
    return False


def loop_hint(looping: int, total: int) -> str | None:
    """The line that says outputs loop (``looping`` of ``total``), or None."""
    if not looping:
        return None
    return (
        f"note: {looping} of {total} outputs repeat a word or phrase {LOOP_REPEATS} or more "
        "times in a row. A model loops like this on input unlike its training data (other "
        "words, lengths or language), and when it is undertrained: if its run's test "
        "scores are good, the input is the likely cause; if not, train it longer (--resume "
        "--steps N continues its run)"
    )


#: what ends a line for ``str.splitlines`` (and for the tools that read our output), and
#: the tab that separates the fields of the n-best lines
_BREAKS = str.maketrans({c: " " for c in "\n\r\t\v\f\x1c\x1d\x1e\x85\u2028\u2029"})


def one_line(text: str) -> str:
    """``text`` with its line breaks and tabs written as spaces: what a command writes
    for one input stays one line (and one field). A model's output holds them only when
    its vocabulary can spell them, as the byte pieces of a BPE vocabulary can, and a
    sample may draw them."""
    return text.translate(_BREAKS)


def _too_long(where: str, n: int, limit: int) -> DecodeError:
    return DecodeError(
        f"{where} has {n} tokens, more than the {limit} positions this model supports "
        "(config.max_len): split or shorten it"
    )


def _encode_all(model, tokenizer, sentences, end=None) -> list[list[int]]:
    """The sentences' ids (and ``end`` after each that is not empty, where given)."""
    if isinstance(sentences, str):
        raise DecodeError("translate() takes a list of sentences, got a single string")
    limit = model.config.max_len
    encoded = []
    for i, s in enumerate(sentences):
        # blank by any whitespace (tabs, no-break spaces), as the tokenizer's spaces are
        ids = list(tokenizer.encode(s)) if not isinstance(s, str) or s.strip() else []
        if ids and end is not None:
            ids.append(end)
        if len(ids) > limit:
            raise _too_long(f"sentence {i}", len(ids), limit)
        encoded.append(ids)
    return encoded


def chunked(items: Iterable, size: int) -> Iterator[list]:
    """Consecutive lists of up to ``size`` items of ``items``, read only as each list
    is asked for (a stream is never read ahead by more than one chunk)."""
    if not isinstance(size, int) or size < 1:
        raise DecodeError(f"the chunk size must be an integer >= 1, got {size!r}")
    it = iter(items)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


class SourceCheck:
    """Checks source lines as a command reads them, before any is decoded: a line with
    more tokens than the model has positions is an error naming ``name`` and the line
    (the decoder's own check knows only the place in a chunk), and the tokens read as
    <unk> are counted for one warning (``warning()``) instead of one per line."""

    def __init__(self, model, tokenizer, name: str):
        self.tokenizer, self.name = tokenizer, name
        self.limit = model.config.max_len
        self.end = int(model.config.source_end_id is not None)  # the id appended
        self.unknown = UnknownTokens(tokenizer, name)

    def __call__(self, numbered: Iterable[tuple[int, str]]) -> Iterator[tuple[int, str]]:
        """``numbered`` (``(line number, text)`` pairs) passed through, checked."""
        unk = self.tokenizer.vocab.unk_id
        for lineno, text in numbered:
            ids = self.tokenizer.encode(text)
            if len(ids) + self.end > self.limit:
                raise _too_long(f"{self.name}: line {lineno}", len(ids) + self.end, self.limit)
            if unk in ids:
                self.unknown.note(text, lineno)
            yield lineno, text

    def warning(self) -> str | None:
        """One line about the tokens read as <unk> so far, or None if there were none."""
        return self.unknown.warning()


def _batches(encoded, batch_size: int):
    """Indices of the non-empty sentences, sorted by length, cut into batches."""
    if not isinstance(batch_size, int) or batch_size < 1:
        raise DecodeError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    order = sorted((i for i, ids in enumerate(encoded) if ids), key=lambda i: len(encoded[i]))
    return [order[j : j + batch_size] for j in range(0, len(order), batch_size)]


def _pad(encoded, idx, pad_id: int):
    np = backend.np
    S = max(len(encoded[i]) for i in idx)
    src = np.full((len(idx), S), pad_id, dtype=np.int64)
    for r, i in enumerate(idx):
        src[r, : len(encoded[i])] = encoded[i]
    return src


#: what ``translate`` decodes with when no options are given: the paper's beam search,
#: and never an empty output for a sentence that is not empty (fairseq's min_len 1)
TRANSLATE = DecodeOptions(min_len=1)


def _positions(positions, n: int) -> list[int]:
    """The position of each of ``n`` sentences (default 0 .. n-1), checked."""
    if positions is None:
        return list(range(n))
    pos = list(positions)
    if len(pos) != n:
        raise DecodeError(f"positions gives {len(pos)} numbers for {n} sentences")
    return pos


def translate_nbest(
    model, tokenizer, sentences, options: DecodeOptions | None = None, *, batch_size=32,
    progress=None, positions=None, **settings,
) -> list[list[Translation]]:
    """Decode ``sentences`` (a list of str) as ``options`` (else ``TRANSLATE``, with the
    fields named in ``settings``) say; per sentence up to ``options.nbest``
    ``Translation``s, best first, or its ``options.samples`` samples in the order drawn
    (an empty list for an empty sentence; greedy search gives one, whose score and
    log-probability are not computed: NaN). ``progress``: called with the number of
    sentences of each batch once it is decoded; ``positions``: the position of each
    sentence that seeds its samples (default 0, 1, 2, ...)."""
    options = options_of(options, TRANSLATE, settings)
    end = options.source_end
    end = model.config.source_end_id if end is None else end  # Marian's </s>, if any
    encoded = _encode_all(model, tokenizer, sentences, end)
    pos = _positions(positions, len(encoded))
    writes = writing_tokens(tokenizer, model.config.vocab_size) if options.min_len else None
    out: list[list[Translation]] = [[] for _ in encoded]
    for idx in _batches(encoded, batch_size):
        src = _pad(encoded, idx, model.config.pad_id)
        if options.search == "greedy":
            found = [[Hypothesis(ids, float("nan"), float("nan"))]
                     for ids in greedy_decode(model, src, options, writes)]
        elif options.search == "sample":
            found = sample_decode(model, src, options, writes, [pos[i] for i in idx])
        else:
            found = beam_search(model, src, options, writes)
        for i, hyps in zip(idx, found):
            out[i] = [Translation(tokenizer.decode(h.tokens), h) for h in hyps]
        if progress is not None:
            progress(len(idx))
    return out


def translate(
    model, tokenizer, sentences, options: DecodeOptions | None = None, *, batch_size=32,
    progress=None, positions=None, **settings,
) -> list[str]:
    """The best translation of each sentence (``""`` for an empty one), or its first
    sample, decoded as ``options`` (else ``TRANSLATE``, with the fields named in
    ``settings``) say. ``progress``: called with the number of sentences of each batch
    once it is decoded; ``positions``: as ``translate_nbest``'s."""
    options = options_of(options, TRANSLATE, settings).replace(nbest=1, samples=1)
    nb = translate_nbest(model, tokenizer, sentences, options, batch_size=batch_size,
                         progress=progress, positions=positions)
    return [t[0].text if t else "" for t in nb]


__all__ = ["CHUNK_SIZE", "TRANSLATE", "SourceCheck", "Translation", "chunked", "one_line",
           "translate", "translate_nbest"]
