"""A vocabulary: tokens <-> integer ids, with the four specials first.

    id 0  <pad>   padding (masked in attention, ignored by the loss)
    id 1  <bos>   beginning of sentence: the first decoder input
    id 2  <eos>   end of sentence: the last decoder output
    id 3  <unk>   any token not in the vocabulary

These ids match ``TransformerConfig``'s defaults (pad_id=0, bos_id=1, eos_id=2).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from scratchformer.engine.errors import ScratchformerError, TokenError

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)


class VocabError(ScratchformerError):
    """A vocabulary cannot be built from the tokens given."""


class Vocab:
    """``Vocab(["a", "b"])``: ids 0-3 are the specials, then the tokens in the order given."""

    pad_id, bos_id, eos_id, unk_id = 0, 1, 2, 3

    def __init__(self, tokens: Iterable[str] = ()):
        self.itos: list[str] = list(SPECIALS)
        self.stoi: dict[str, int] = {t: i for i, t in enumerate(SPECIALS)}
        for t in tokens:
            if not isinstance(t, str) or t == "":
                raise VocabError(f"vocabulary tokens must be non-empty strings, got {t!r}")
            if t in self.stoi:
                raise VocabError(f"token {t!r} appears twice in the vocabulary (or is a special)")
            self.stoi[t] = len(self.itos)
            self.itos.append(t)

    @classmethod
    def build(cls, sequences: Iterable[Iterable[str]], min_freq: int = 1, max_size=None) -> Vocab:
        """From tokenised sequences: most frequent first (ties alphabetical), tokens seen
        fewer than ``min_freq`` times left out, at most ``max_size`` non-special tokens."""
        counts = Counter(t for seq in sequences for t in seq)
        for s in SPECIALS:
            counts.pop(s, None)
        ranked = sorted(
            (t for t, c in counts.items() if c >= min_freq), key=lambda t: (-counts[t], t)
        )
        if max_size is not None:
            ranked = ranked[:max_size]
        return cls(ranked)

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, token: str) -> bool:
        return token in self.stoi

    def __eq__(self, other) -> bool:
        return isinstance(other, Vocab) and self.itos == other.itos

    def __repr__(self) -> str:
        return f"Vocab({len(self)} tokens: {self.itos[:8]}{' ...' if len(self) > 8 else ''})"

    @property
    def tokens(self) -> list[str]:
        """The non-special tokens, in id order."""
        return self.itos[len(SPECIALS) :]

    def encode(self, tokens: Iterable[str]) -> list[int]:
        """Tokens -> ids; unknown tokens become ``unk_id``."""
        return [self.stoi.get(t, self.unk_id) for t in tokens]

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Ids -> tokens (specials included). Raises TokenError for an id out of range."""
        out = []
        for i in ids:
            i = int(i)
            if not 0 <= i < len(self.itos):
                raise TokenError(f"token id {i} out of range for a vocabulary of {len(self)}")
            out.append(self.itos[i])
        return out

    def to_dict(self) -> dict:
        return {"tokens": self.tokens}

    @classmethod
    def from_dict(cls, d: dict) -> Vocab:
        return cls(d["tokens"])
