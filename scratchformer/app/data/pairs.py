"""Sequence-to-sequence data: the pairs of the built-in string tasks, and translation pairs.

    copy     "cabd" -> "cabd"
    reverse  "cabd" -> "dbac"       (every output position must attend to a different
                                     input position)
    sort     "cabd" -> "abcd"

Sources are strings over the first ``symbols`` letters, of lengths drawn uniformly from
``[min_len, max_len]``. Held-out sequences are never trained on: a fixed share
``held_out`` of all possible source strings (chosen by a CRC-32 hash of the string, so
it is the same for every seed and every split size) is reserved for validation and
test, and training samples are drawn from the rest. Short lengths keep examples on both
sides where the hash allows (with 10 letters, none of the one-letter strings is held out).

Translation is real data: ``{data_dir}/{train,dev,test}.tsv`` (``source<TAB>target
[<TAB>ref]``, as ``scratchformer data bible`` writes them) with a joint SentencePiece BPE
vocabulary of ``vocab_size`` ids learnt from the training sources and targets together
(cached as ``{data_dir}/spm-bpe-{vocab_size}.json``; training it is deterministic).
``vocab_size`` 0 chooses the size from the data (``vocabulary_for``). ``max_len`` is then
the longest side in BPE tokens a pair may have: longer pairs are left out (and counted),
of training and of dev and test alike, so that a model sized to its training pairs is
never asked to score a pair it cannot hold (a 1 MB line would exhaust memory only after
training). A split with no pair short enough is refused.
"""

from __future__ import annotations

import hashlib
import json
import string
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from scratchformer.app import writer
from scratchformer.app.data.bible_pairs import read_pairs
from scratchformer.app.data.bpe import BPEError, BPETokenizer
from scratchformer.app.data.text import NO_MODEL, LineLimit, check_data_set
from scratchformer.app.data.tokenizers import CharTokenizer, Tokenizer, tokenizer_from_dict
from scratchformer.app.data.vocab import SPECIALS, Vocab
from scratchformer.app.progress import progress_bar
from scratchformer.engine import backend, memory
from scratchformer.engine.errors import ScratchformerError, need

#: the rules of the built-in string tasks: name -> the target of a source string
STRING_RULES = {
    "copy": lambda s: s,
    "reverse": lambda s: s[::-1],
    "sort": lambda s: "".join(sorted(s)),
}


class DataError(ScratchformerError):
    """The ``[task]`` settings cannot produce the pairs asked for, or their files are
    unusable."""


@dataclass
class Pairs:
    """The (source, target) text pairs of the three splits and the tokenizer that
    encodes them."""

    tokenizer: Tokenizer
    train: list  # [(source text, target text)]
    valid: list
    test: list
    dropped: int = 0  # training pairs left out for being longer than max_len
    dropped_held_out: dict = field(default_factory=dict)  # {"valid"/"test": pairs left out}
    chosen: str = ""  # how the vocabulary's size was chosen from the data ("": it was given)
    source_end: int | None = None  # an id appended to every source (Marian's </s>), or None
    _encoded: dict = field(default_factory=dict, repr=False)

    def encoded(self, split: str) -> list:
        """``[(source ids, target ids)]`` of a split, without specials but ``source_end``
        (computed once)."""
        if split not in self._encoded:
            tok, end = self.tokenizer, [] if self.source_end is None else [self.source_end]
            self._encoded[split] = [
                (tok.encode(s) + end, tok.encode_target(t)) for s, t in getattr(self, split)
            ]
        return self._encoded[split]


#: memory of one generated example beyond 40 bytes a letter: its two strings, their tuple,
#: the list's pointer and the ids it is encoded to (measured: about 500 bytes at 12 letters)
STRING_BYTES = 200


def is_held_out(text: str, share: float) -> bool:
    """True for the fixed share of strings reserved for evaluation (by CRC-32)."""
    return zlib.crc32(text.encode("utf-8")) % 100_000 < share * 100_000


def _sample(
    rule, alphabet, min_len, max_len, held_out, rng, n: int, evaluation: bool, bar=None
) -> list:
    out, tries = [], 0
    max_tries = 200 * n + 2_000  # acceptance is ~held_out or ~1 - held_out per draw
    while len(out) < n:
        tries += 1
        if tries > max_tries:
            raise DataError(
                f"could not draw {n} {'held-out' if evaluation else 'training'} sequences "
                f"from {len(alphabet)} symbols of lengths {min_len}-{max_len}: "
                "use more symbols or longer sequences"
            )
        length = int(rng.integers(min_len, max_len + 1))
        src = "".join(alphabet[i] for i in rng.integers(0, len(alphabet), length))
        if is_held_out(src, held_out) == evaluation:
            out.append((src, rule(src)))
            if bar is not None and len(out) % 10_000 == 0:
                bar.update(10_000)
    return out


def string_pairs(
    name: str,
    *,
    symbols: int,
    min_len: int,
    max_len: int,
    train_size: int,
    valid_size: int,
    test_size: int,
    held_out: float,
    seed: int,
) -> Pairs:
    """The three splits of the built-in task ``name`` ("copy", "reverse" or "sort"),
    seeded by ``seed``; the tokenizer has one id per letter."""
    need(
        name in STRING_RULES,
        f"task.name {name!r} is not a string task: expected {sorted(STRING_RULES)}",
        DataError,
    )
    need(1 <= symbols <= 26, f"task.symbols must be in [1, 26], got {symbols}", DataError)
    need(
        1 <= min_len <= max_len,
        f"task.min_len must be in [1, max_len], got {min_len} and {max_len}",
        DataError,
    )
    need(0.0 < held_out < 1.0, f"task.held_out must be in (0, 1), got {held_out}", DataError)
    for n, v in (("train_size", train_size), ("valid_size", valid_size), ("test_size", test_size)):
        need(v >= 1, f"task.{n} must be >= 1, got {v}", DataError)
    total = train_size + valid_size + test_size
    memory.need_memory(
        total * (STRING_BYTES + 40 * max_len),
        f"{total:,} generated strings of up to {max_len} letters",
        "lower task.train_size (valid_size, test_size)",
    )
    rng = backend.host_rng([seed, 1])
    alphabet = string.ascii_lowercase[:symbols]
    draw = (STRING_RULES[name], alphabet, min_len, max_len, held_out, rng)
    # about 30 us a string: a large task draws a bar (on a terminal) rather than sit silent
    bar = progress_bar(total, "drawing strings", "string", disable=None) if total > 1e5 else None
    train = _sample(*draw, train_size, evaluation=False, bar=bar)
    valid = _sample(*draw, valid_size, evaluation=True, bar=bar)
    test = _sample(*draw, test_size, evaluation=True, bar=bar)
    if bar is not None:
        bar.close()
    return Pairs(CharTokenizer(Vocab(alphabet)), train, valid, test)


def translation_tokenizer(data_dir, vocab_size: int, train_pairs) -> Tokenizer:
    """The joint BPE of a translation task, learnt from ``train_pairs`` and cached in
    ``{data_dir}/spm-bpe-{V}.json`` under a key: the SHA-256 of the training text and
    the settings. A cache whose key differs (train.tsv changed, or a cache written before
    keys) is learnt again and replaced, never reused for other data."""
    path = Path(data_dir) / f"spm-bpe-{vocab_size}.json"
    key = bpe_key(train_pairs, vocab_size)
    if path.is_file():
        try:
            cached = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(cached, dict) and cached.get("key") == key:
                return tokenizer_from_dict(cached["tokenizer"])
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, ScratchformerError) as e:
            raise DataError(
                f"cannot read the cached BPE vocabulary {path} ({e}): delete it"
            ) from None
    tok = BPETokenizer.train([s for s, _ in train_pairs] + [t for _, t in train_pairs], vocab_size)
    # through a temporary file of this write's own: two runs learning at once never share one
    writer.write_json(path, {"key": key, "tokenizer": tok.to_dict()}, indent=None, owner=data_dir)
    return tok


def bpe_key(train_pairs, vocab_size: int) -> str:
    """What a learnt BPE depends on: its settings and every training sentence."""
    h = hashlib.sha256(f"bpe v1, vocab_size {vocab_size}\n".encode())
    for s, t in train_pairs:
        h.update(f"{s}\t{t}\n".encode())
    return h.hexdigest()


#: the largest vocabulary ``vocabulary_for`` chooses: the Bible's 27k verse pairs use 8k
MOST_CHOSEN = 8000


def vocabulary_for(train_pairs) -> tuple[int, str]:
    """A joint BPE size the training text supports, and how it was chosen: room for the 4
    specials, the 256 bytes of the byte fallback and every character of the text, plus
    one merge per 8 distinct words (whitespace-separated, both sides), rounded up to a
    hundred, at most ``MOST_CHOSEN``. Small data wants a small vocabulary: each subword
    must be seen often enough to be learnt (Sennrich and Zhang 2019 find a few thousand
    merges best for about 100k words)."""
    texts = [s for s, _ in train_pairs] + [t for _, t in train_pairs]
    chars = len(set().union(*map(set, texts)))
    words = len({w for t in texts for w in t.split()})
    base = len(SPECIALS) + 256 + chars
    size = min(-(-(base + words // 8) // 100) * 100, MOST_CHOSEN)
    how = f"{chars} characters and {words:,} distinct words in {len(train_pairs):,} pairs"
    return max(size, base), how


def translation_pairs(
    data_dir, *, vocab_size: int, max_len: int, lines: LineLimit = NO_MODEL, tokenizer=None,
    source_end: int | None = None,
) -> Pairs:
    """``{data_dir}/{train,dev,test}.tsv`` with the joint BPE (see the module doc); the
    ``valid`` split is dev.tsv. A ``vocab_size`` SentencePiece cannot make of the text is
    refused naming ``task.vocab_size`` and the bound; one chosen from the data (0) is
    brought within SentencePiece's bound instead. ``tokenizer``: read the pairs with it
    (a checkpoint's, for a run that starts from one) instead of training a BPE;
    ``source_end``: the id its model appends to every source (Marian's ``</s>``)."""
    if not data_dir:
        raise DataError("task translate needs data_dir (--data-dir data/bible)")
    if vocab_size != 0 and vocab_size <= 260:
        raise DataError(
            f"task.vocab_size must be > 260 (4 specials and 256 bytes), or 0 to choose it from "
            f"the data, got {vocab_size}"
        )
    if max_len < 1:
        raise DataError(f"task.max_len must be >= 1, got {max_len}")
    d = Path(data_dir)
    check_data_set(d, [f"{s}.tsv" for s in ("train", "dev", "test")], "pairs")
    train, valid, test = (read_pairs(d / f"{s}.tsv", lines) for s in ("train", "dev", "test"))
    chosen = ""
    if tokenizer is not None:
        pairs = Pairs(tokenizer, train, valid, test, source_end=source_end)
        return _keep_within(pairs, max_len, d)
    if vocab_size == 0:
        vocab_size, chosen = vocabulary_for(train)
    try:
        tok = translation_tokenizer(d, vocab_size, train)
    except BPEError as e:
        if chosen and e.most:  # as many as SentencePiece can make of this text
            vocab_size, chosen = e.most, f"{chosen}; SentencePiece's largest for this text"
            tok = translation_tokenizer(d, vocab_size, train)
        elif e.most or e.fewest:
            bound = f"at most {e.most}" if e.most else f"at least {e.fewest}"
            raise DataError(
                f"task.vocab_size={vocab_size} does not fit {d / 'train.tsv'}: SentencePiece "
                f"can make {bound} ids of it; set task.vocab_size to that, or to 0 to choose "
                "it from the data"
            ) from None
        else:
            raise
    data = Pairs(tok, train, valid, test)
    data.chosen = chosen and f"vocabulary {vocab_size} ({chosen})"
    return _keep_within(data, max_len, d)


def _keep_within(data: Pairs, max_len: int, d: Path) -> Pairs:
    """``data`` without the pairs that have a side longer than ``max_len`` tokens
    (counted in ``dropped`` and ``dropped_held_out``)."""
    for split, name in (("train", "train"), ("valid", "dev"), ("test", "test")):
        enc = data.encoded(split)
        keep = [i for i, (s, t) in enumerate(enc) if len(s) <= max_len and len(t) <= max_len]
        if not keep:
            raise DataError(
                f"no pair of {d / f'{name}.tsv'} fits task.max_len={max_len} (BPE tokens a "
                "side): raise task.max_len, or split the long lines"
            )
        rows = getattr(data, split)
        if split == "train":
            data.dropped = len(rows) - len(keep)
        elif len(keep) < len(rows):
            data.dropped_held_out[split] = len(rows) - len(keep)
        setattr(data, split, [rows[i] for i in keep])
        data._encoded[split] = [enc[i] for i in keep]
    return data


__all__ = [
    "STRING_RULES",
    "Pairs",
    "DataError",
    "is_held_out",
    "string_pairs",
    "translation_pairs",
    "translation_tokenizer",
    "vocabulary_for",
]
