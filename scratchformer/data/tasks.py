"""Built-in sequence-to-sequence tasks: no download, train on a CPU in minutes.

    copy     "cabd" -> "cabd"
    reverse  "cabd" -> "dbac"       (the default: every output position must attend
                                     to a different input position)
    sort     "cabd" -> "abcd"

Sources are strings over the first ``symbols`` letters, of lengths drawn uniformly from
``[min_len, max_len]``. Held-out sequences are never trained on: a fixed share
``held_out`` of all possible source strings (chosen by a CRC-32 hash of the string, so
it is the same for every seed and every split size) is reserved for validation and
test, and training samples are drawn from the rest. Short lengths keep examples on both
sides where the hash allows (with 10 letters, none of the one-letter strings is held out).

``translate`` is real data: ``{data_dir}/{train,dev,test}.tsv`` (``source<TAB>target
[<TAB>ref]``, as ``scratchformer data bible`` writes them) with a joint SentencePiece BPE
vocabulary of ``vocab_size`` ids learnt from the training sources and targets together
(cached as ``{data_dir}/spm-bpe-{vocab_size}.json``; training it is deterministic).
``max_len`` is then the longest side in BPE tokens a training pair may have: longer
pairs are left out of training (and counted), never out of dev or test.
"""

from __future__ import annotations

import json
import string
import zlib
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from scratchformer import backend
from scratchformer.data.tokenizers import CharTokenizer, Tokenizer, tokenizer_from_dict
from scratchformer.data.vocab import Vocab
from scratchformer.errors import ScratchformerError

TASKS = {
    "copy": lambda s: s,
    "reverse": lambda s: s[::-1],
    "sort": lambda s: "".join(sorted(s)),
}


class TaskError(ScratchformerError):
    """A task is unknown or its settings cannot produce the data asked for."""


@dataclass
class TaskConfig:
    name: str = "reverse"  # "copy", "reverse" or "sort"
    symbols: int = 10  # alphabet: the first `symbols` lowercase letters
    min_len: int = 1  # shortest source
    max_len: int = 12  # longest source
    train_size: int = 20000  # training pairs (sampled with replacement)
    valid_size: int = 500  # validation pairs (held-out sources)
    test_size: int = 500  # test pairs (held-out sources)
    held_out: float = 0.1  # share of all source strings reserved for validation/test
    seed: int = 0
    data_dir: str = ""  # translate: directory of {train,dev,test}.tsv
    vocab_size: int = 8000  # translate: joint BPE vocabulary size (specials included)

    def validate(self) -> None:
        def need(cond, msg):
            if not cond:
                raise TaskError(f"invalid task settings: {msg}")

        names = sorted([*TASKS, "translate"])
        need(self.name in names, f"unknown task {self.name!r}: expected one of {names}")
        if self.name == "translate":
            need(self.data_dir != "", "task translate needs data_dir (--data-dir data/bible)")
            need(self.vocab_size > 260, f"vocab_size must be > 260, got {self.vocab_size}")
            need(self.max_len >= 1, f"max_len must be >= 1, got {self.max_len}")
            return
        need(1 <= self.symbols <= 26, f"symbols must be in [1, 26], got {self.symbols}")
        need(
            1 <= self.min_len <= self.max_len,
            f"need 1 <= min_len <= max_len, got {self.min_len}, {self.max_len}",
        )
        need(0.0 < self.held_out < 1.0, f"held_out must be in (0, 1), got {self.held_out}")
        for n in ("train_size", "valid_size", "test_size"):
            need(getattr(self, n) >= 1, f"{n} must be >= 1")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> TaskConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise TaskError(f"unknown task settings {unknown}: expected some of {sorted(known)}")
        return cls(**d)


@dataclass
class TaskData:
    tokenizer: Tokenizer
    train: list  # [(source text, target text)]
    valid: list
    test: list

    def encoded(self, split: str) -> list:
        """``[(source ids, target ids)]`` of a split, without specials."""
        tok = self.tokenizer
        return [(tok.encode(s), tok.encode(t)) for s, t in getattr(self, split)]


def is_held_out(text: str, share: float) -> bool:
    """True for the fixed share of strings reserved for evaluation (by CRC-32)."""
    return zlib.crc32(text.encode("utf-8")) % 100_000 < share * 100_000


def _sample(cfg: TaskConfig, rng, n: int, held_out: bool) -> list:
    alphabet = string.ascii_lowercase[: cfg.symbols]
    target = TASKS[cfg.name]
    out, tries = [], 0
    max_tries = 200 * n + 2_000  # acceptance is ~held_out or ~1 - held_out per draw
    while len(out) < n:
        tries += 1
        if tries > max_tries:
            raise TaskError(
                f"could not draw {n} {'held-out' if held_out else 'training'} sequences "
                f"from {cfg.symbols} symbols of lengths {cfg.min_len}-{cfg.max_len}: "
                "use more symbols or longer sequences"
            )
        length = int(rng.integers(cfg.min_len, cfg.max_len + 1))
        src = "".join(alphabet[i] for i in rng.integers(0, cfg.symbols, length))
        if is_held_out(src, cfg.held_out) == held_out:
            out.append((src, target(src)))
    return out


def make_task(cfg: TaskConfig) -> TaskData:
    """Generate the three splits of a built-in task, seeded by ``cfg.seed``."""
    cfg.validate()
    if cfg.name == "translate":
        return load_translation_task(cfg)
    rng = backend.host_rng([cfg.seed, 1])
    tokenizer = CharTokenizer(Vocab(string.ascii_lowercase[: cfg.symbols]))
    train = _sample(cfg, rng, cfg.train_size, held_out=False)
    valid = _sample(cfg, rng, cfg.valid_size, held_out=True)
    test = _sample(cfg, rng, cfg.test_size, held_out=True)
    return TaskData(tokenizer, train, valid, test)


def translation_tokenizer(cfg: TaskConfig, train_pairs) -> Tokenizer:
    """The joint BPE of a translation task: loaded from ``{data_dir}/spm-bpe-{V}.json``
    if present, else learnt from ``train_pairs`` and written there."""
    from scratchformer.data.bpe import BPETokenizer  # noqa: PLC0415

    path = Path(cfg.data_dir) / f"spm-bpe-{cfg.vocab_size}.json"
    if path.is_file():
        try:
            return tokenizer_from_dict(json.loads(path.read_text(encoding="utf-8")))
        except (json.JSONDecodeError, ScratchformerError) as e:
            raise TaskError(
                f"cannot read the cached BPE vocabulary {path} ({e}): delete it"
            ) from None
    tok = BPETokenizer.train(
        [s for s, _ in train_pairs] + [t for _, t in train_pairs], cfg.vocab_size
    )
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(tok.to_dict()), encoding="utf-8")
    tmp.replace(path)
    return tok


def load_translation_task(cfg: TaskConfig) -> TaskData:
    """``{data_dir}/{train,dev,test}.tsv`` with the joint BPE (see the module doc)."""
    from scratchformer.data.bible_pairs import read_pairs  # noqa: PLC0415

    d = Path(cfg.data_dir)
    train, valid, test = (read_pairs(d / f"{s}.tsv") for s in ("train", "dev", "test"))
    tok = translation_tokenizer(cfg, train)
    data = TranslationData(tok, train, valid, test)
    enc = data.encoded("train")
    keep = [i for i, (s, t) in enumerate(enc) if len(s) <= cfg.max_len and len(t) <= cfg.max_len]
    if not keep:
        raise TaskError(f"no training pair of {d / 'train.tsv'} fits task.max_len={cfg.max_len}")
    data.dropped = len(train) - len(keep)
    data.train = [train[i] for i in keep]
    data._cache["train"] = [enc[i] for i in keep]
    return data


@dataclass
class TranslationData(TaskData):
    """A translation task's splits; ``dropped``: training pairs longer than max_len."""

    dropped: int = 0
    _cache: dict = field(default_factory=dict, repr=False)

    def encoded(self, split: str) -> list:
        if split not in self._cache:
            self._cache[split] = super().encoded(split)
        return self._cache[split]
