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

from scratchformer.data.vocab import SPECIALS, UNK, Vocab
from scratchformer.errors import ScratchformerError


class Tokenizer:
    """Base class: ``split(text) -> tokens``, ``join(tokens) -> text``, plus a vocabulary."""

    kind = "base"

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

    def decode(self, ids: Iterable[int]) -> str:
        """Ids -> text, dropping <pad>, <bos> and <eos>; <unk> is shown as ``<unk>``."""
        dropped = (self.vocab.pad_id, self.vocab.bos_id, self.vocab.eos_id)
        return self.join(self.vocab.decode(i for i in ids if int(i) not in dropped))

    def __len__(self) -> int:
        return len(self.vocab)

    def to_dict(self) -> dict:
        return {"type": self.kind, "vocab": self.vocab.to_dict()}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.vocab!r})"


class CharTokenizer(Tokenizer):
    """One token per character (spaces included)."""

    kind = "char"

    def split(self, text: str) -> list[str]:
        return list(text)

    def join(self, tokens: list[str]) -> str:
        return "".join(tokens)


class WhitespaceTokenizer(Tokenizer):
    """Tokens are the whitespace-separated words; decoding joins them with one space."""

    kind = "whitespace"

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
LAZY_TOKENIZERS = {"spm-bpe": "scratchformer.data.bpe"}


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
    "WhitespaceTokenizer",
    "tokenizer_from_dict",
]
