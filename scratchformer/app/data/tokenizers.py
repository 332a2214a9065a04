"""Tokenizers: text <-> token ids through a ``Vocab``.

    tok = CharTokenizer.fit(["hello", "world"])
    ids = tok.encode("hello")          # [..] ids, no <bos>/<eos> (batching adds them)
    tok.decode(ids)                    # "hello": <pad>, <bos>, <eos> dropped

``CharTokenizer`` splits into characters, ``WhitespaceTokenizer`` into words. A subword
tokenizer plugs in by subclassing ``Tokenizer`` (``split``/``join``) and registering in
``TOKENIZERS``. ``to_dict()`` / ``tokenizer_from_dict()`` store one inside a checkpoint.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable

from scratchformer.app.data.vocab import SPECIALS, UNK, Vocab
from scratchformer.engine.errors import ScratchformerError


class Tokenizer:
    """Base class: ``split(text) -> tokens``, ``join(tokens) -> text``, plus a vocabulary."""

    kind = "base"
    #: what one token is, in messages ("3 characters unknown to the vocabulary")
    unit = "token"

    def __init__(self, vocab: Vocab):
        self.vocab = vocab

    # -- to override -----------------------------------------------------------------------
    def split(self, text: str) -> list[str]:
        raise NotImplementedError

    def join(self, tokens: list[str]) -> str:
        raise NotImplementedError

    # -- shared ------------------------------------------------------------------------------
    @classmethod
    def fit(cls, texts: Iterable[str], **vocab_kwargs) -> Tokenizer:
        """Build the vocabulary from ``texts`` (``Vocab.build`` keyword arguments apply)."""
        probe = cls(Vocab())
        return cls(Vocab.build((probe.split(t) for t in texts), **vocab_kwargs))

    def encode(self, text: str) -> list[int]:
        """Text -> ids, without <bos>/<eos>; out-of-vocabulary tokens become <unk>."""
        return self.vocab.encode(self.split(text))

    def encode_target(self, text: str) -> list[int]:
        """A target sentence's ids: ``encode``'s, but for a tokenizer with a model of
        its own for each side (Marian's)."""
        return self.encode(text)

    def decode(self, ids: Iterable[int]) -> str:
        """Ids -> text, dropping <pad>, <bos> and <eos>; <unk> is shown as ``<unk>``."""
        dropped = (self.vocab.pad_id, self.vocab.bos_id, self.vocab.eos_id)
        return self.join(self.vocab.decode(i for i in ids if int(i) not in dropped))

    def unknown(self, text: str) -> list[str]:
        """The tokens of ``text`` that ``encode`` reads as <unk>, in order."""
        return [t for t in self.split(text) if t not in self.vocab]

    def __len__(self) -> int:
        return len(self.vocab)

    def to_dict(self) -> dict:
        return {"type": self.kind, "vocab": self.vocab.to_dict()}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.vocab!r})"


class CharTokenizer(Tokenizer):
    """One token per character (spaces included)."""

    kind = "char"
    unit = "character"

    def split(self, text: str) -> list[str]:
        return list(text)

    def join(self, tokens: list[str]) -> str:
        return "".join(tokens)


class WhitespaceTokenizer(Tokenizer):
    """Tokens are the whitespace-separated words; decoding joins them with one space."""

    kind = "whitespace"
    unit = "word"

    def split(self, text: str) -> list[str]:
        return text.split()

    def join(self, tokens: list[str]) -> str:
        return " ".join(tokens)


TOKENIZERS: dict[str, type[Tokenizer]] = {
    CharTokenizer.kind: CharTokenizer,
    WhitespaceTokenizer.kind: WhitespaceTokenizer,
}
#: Tokenizers in their own modules (an optional library behind them), imported on demand;
#: the module adds itself to ``TOKENIZERS``.
LAZY_TOKENIZERS = {
    "spm-bpe": "scratchformer.app.data.bpe",
    "gpt2-bpe": "scratchformer.app.data.gpt2_bpe",
    "marian-spm": "scratchformer.app.data.marian_spm",
}


class UnknownTokens:
    """Counts the tokens of many lines that a tokenizer reads as <unk>, so that a
    command warns once at the end (``warning()``) rather than once per line."""

    def __init__(self, tokenizer: Tokenizer, name: str = ""):
        self.tokenizer, self.name = tokenizer, name
        self.count = self.lines = 0
        self.first: tuple[str, int] | None = None  # (token, line number)

    def note(self, text: str, lineno: int) -> None:
        """Count the unknown tokens of ``text``, line ``lineno`` of the input."""
        found = self.tokenizer.unknown(text)
        if found:
            self.first = self.first or (found[0], lineno)
            self.count += len(found)
            self.lines += 1

    def warning(self) -> str | None:
        """The one-line warning, or None when every token was known."""
        if not self.count:
            return None
        unit = self.tokenizer.unit + ("s" if self.count != 1 else "")
        lines = f"{self.lines} line" + ("s" if self.lines != 1 else "")
        token, lineno = self.first
        where = f"line {lineno}" + (f" of {self.name}" if self.name else "")
        verb = "are" if self.count != 1 else "is"
        return (
            f"warning: {self.count} {unit} on {lines} {verb} unknown to the model's "
            f"vocabulary and read as <unk> (first: {token!r} on {where})"
        )


def tokenizer_from_dict(d: dict) -> Tokenizer:
    """Rebuild a tokenizer from its ``to_dict()`` (a class with its own ``from_dict``
    classmethod, such as the BPE one, rebuilds itself)."""
    kind = d.get("type")
    if kind not in TOKENIZERS and kind in LAZY_TOKENIZERS:
        importlib.import_module(LAZY_TOKENIZERS[kind])
    if kind not in TOKENIZERS:
        raise ScratchformerError(
            f"unknown tokenizer type {kind!r}: expected one of {sorted(TOKENIZERS)}"
        )
    cls = TOKENIZERS[kind]
    if "from_dict" in vars(cls):
        return cls.from_dict(d)
    return cls(Vocab.from_dict(d["vocab"]))


__all__ = [
    "SPECIALS",
    "LAZY_TOKENIZERS",
    "TOKENIZERS",
    "UNK",
    "CharTokenizer",
    "Tokenizer",
    "UnknownTokens",
    "WhitespaceTokenizer",
    "tokenizer_from_dict",
]
