"""GPT-2's byte-level BPE, by the ``tokenizers`` library (``pip install -e '.[gpt2]'``).

    tok = ByteLevelBPETokenizer(vocab, merges)       # vocab.json's dict, merges.txt's pairs
    ids = tok.encode("Hello world")                  # GPT-2's ids; no <|endoftext|> added
    tok.decode(ids)                                  # "Hello world": the bytes given back
    d = tok.to_dict()                                # JSON: stored in the checkpoint's meta

GPT-2 splits text with its regular expression (contractions, letters, digits, other
symbols, each with its leading space; runs of whitespace), writes each piece's UTF-8
bytes as 256 printable characters (a space is ``Ġ``) and merges them by the ranked pairs
of ``merges.txt``; every byte is a token, so nothing is unknown and ``decode(encode(s))
== s`` for any text. ``<|endoftext|>`` is its only special token: written in the text it
is that token, never split. In our models it is both ``<bos>`` and ``<eos>``; GPT-2 has no
padding token, so padding is the id one past the vocabulary (``vocab.pad_id ==
len(vocab)``: ``TransformerConfig.pad_id``), which ``decode`` drops.

Why ``tokenizers`` rather than our own: it is what Hugging Face's GPT-2 tokenizer runs,
written against the original (OpenAI's ``encoder.py``); tests/data/test_gpt2_bpe.py shows
its ids equal to transformers' Python implementation on varied text.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from scratchformer.app.data.tokenizers import TOKENIZERS, Tokenizer
from scratchformer.engine.errors import ScratchformerError

#: GPT-2's one special token
ENDOFTEXT = "<|endoftext|>"


class GPT2TokenizerError(ScratchformerError):
    """The tokenizers library is missing, or a byte-level BPE cannot be built."""


def _tokenizers():
    try:
        import tokenizers  # noqa: PLC0415  (optional: the gpt2 extra)
    except ImportError:
        raise GPT2TokenizerError(
            "GPT-2's tokenizer needs the tokenizers library: pip install -e '.[gpt2]' (or pip "
            "install 'tokenizers>=0.15')"
        ) from None
    return tokenizers


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's printable spelling of the 256 bytes: the printable Latin-1 ones as
    themselves, the others (controls, space, ...) as the characters from U+0100 on, in
    byte order (OpenAI's ``encoder.py``)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    keep += range(ord("®"), ord("ÿ") + 1)
    spelled, n = {}, 0
    for b in range(256):
        if b in keep:
            spelled[b] = chr(b)
        else:
            spelled[b] = chr(256 + n)
            n += 1
    return spelled


class ByteLevelVocab:
    """What the program asks of a vocabulary, for GPT-2's: its size, its special ids
    (``<|endoftext|>`` is <bos> and <eos>; the padding id is the size itself, no token;
    no <unk>) and ``itos``, each token as the text it stands for (for plots)."""

    def __init__(self, vocab: dict[str, int], eot: int):
        self.size = len(vocab)
        self.bos_id = self.eos_id = eot
        self.pad_id = self.size
        self.unk_id = None
        self._tokens = sorted(vocab, key=vocab.get)
        self._itos = None

    def __len__(self) -> int:
        return self.size

    @property
    def itos(self) -> list[str]:
        """Each id's text: its bytes decoded (a piece of a character shows as U+FFFD)."""
        if self._itos is None:
            back = {c: b for b, c in bytes_to_unicode().items()}
            self._itos = [
                t if t == ENDOFTEXT else bytes(back.get(c, 63) for c in t).decode(errors="replace")
                for t in self._tokens
            ]
        return self._itos


class ByteLevelBPETokenizer(Tokenizer):
    """GPT-2's tokenizer behind the ``Tokenizer`` interface (see the module doc).

    ``vocab``: token -> id, the ids 0 .. V-1 each once (``vocab.json``); ``merges``: the
    ranked pairs (``merges.txt``, without its header line). ``<|endoftext|>`` must be in
    ``vocab``."""

    kind = "gpt2-bpe"
    unit = "token"

    def __init__(self, vocab: dict, merges: list):
        tk = _tokenizers()
        self.merges = [tuple(m) for m in merges]
        bad = next((m for m in self.merges if len(m) != 2), None)
        if bad is not None:
            raise GPT2TokenizerError(f"a merge is a pair of tokens, got {list(bad)!r}")
        ids = sorted(vocab.values()) if all(isinstance(i, int) for i in vocab.values()) else None
        if ids != list(range(len(vocab))):
            raise GPT2TokenizerError(
                f"the vocabulary's ids must be 0 to {len(vocab) - 1}, each once"
            )
        if ENDOFTEXT not in vocab:
            raise GPT2TokenizerError(f"the vocabulary has no {ENDOFTEXT}, GPT-2's special token")
        self.token_ids = dict(vocab)
        try:
            bpe = tk.models.BPE(vocab=self.token_ids, merges=self.merges)
        except Exception as e:  # the library's own errors: a merge of unknown tokens, ...
            raise GPT2TokenizerError(f"cannot build the byte-level BPE: {e}") from None
        tok = tk.Tokenizer(bpe)
        tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.decoder = tk.decoders.ByteLevel()
        tok.add_special_tokens([tk.AddedToken(ENDOFTEXT, special=True, normalized=False)])
        self.tk = tok
        super().__init__(ByteLevelVocab(self.token_ids, self.token_ids[ENDOFTEXT]))

    def split(self, text: str) -> list[str]:
        return self.tk.encode(text, add_special_tokens=False).tokens

    def join(self, tokens: list[str]) -> str:
        return self.decode(self.token_ids[t] for t in tokens)

    def encode(self, text: str) -> list[int]:
        """Text -> ids: ``<|endoftext|>`` written in the text is that token; nothing is
        added (no <bos>/<eos>: the task or the command adds them)."""
        return self.tk.encode(text, add_special_tokens=False).ids

    def encode_many(self, texts: list[str]) -> list[list[int]]:
        """``encode`` of each text, several at once (the library's batch, in parallel)."""
        return [e.ids for e in self.tk.encode_batch(list(texts), add_special_tokens=False)]

    def unknown(self, text: str) -> list[str]:
        """Nothing: every byte is a token."""
        return []

    def decode(self, ids: Iterable[int]) -> str:
        """Ids -> text, the bytes of the tokens decoded as UTF-8 (a cut character as
        U+FFFD); ``<|endoftext|>`` stays in the text, the padding id is dropped."""
        n = len(self.vocab)
        keep = []
        for i in ids:
            i = int(i)
            if i == self.vocab.pad_id:
                continue
            if not 0 <= i < n:
                raise GPT2TokenizerError(f"token id {i} out of range for a vocabulary of {n}")
            keep.append(i)
        return self.tk.decode(keep, skip_special_tokens=False)

    def to_dict(self) -> dict:
        return {
            "type": self.kind,
            "vocab_size": len(self.vocab),
            "model": {"vocab": self.token_ids, "merges": [" ".join(m) for m in self.merges]},
        }

    @classmethod
    def from_dict(cls, d: dict) -> ByteLevelBPETokenizer:
        model = d.get("model")
        if not isinstance(model, dict) or not isinstance(model.get("vocab"), dict):
            raise GPT2TokenizerError(f"malformed {cls.kind} entry: no model.vocab")
        merges = model.get("merges")
        if not isinstance(merges, list) or not all(isinstance(m, str) for m in merges):
            raise GPT2TokenizerError(f"malformed {cls.kind} entry: model.merges is not a list")
        tok = cls(model["vocab"], [m.split(" ") for m in merges])
        if "vocab_size" in d and d["vocab_size"] != len(tok.vocab):
            raise GPT2TokenizerError(
                f"the stored vocabulary has {len(tok.vocab)} ids, its entry says {d['vocab_size']}"
            )
        return tok

    @classmethod
    def from_files(cls, vocab_json: str, merges_txt: str) -> ByteLevelBPETokenizer:
        """From the text of ``vocab.json`` and ``merges.txt`` (its ``#version`` line and
        blank lines skipped)."""
        try:
            vocab = json.loads(vocab_json)
        except ValueError as e:
            raise GPT2TokenizerError(f"vocab.json is not JSON: {e}") from None
        if not isinstance(vocab, dict):
            raise GPT2TokenizerError("vocab.json must hold {token: id}")
        merges = [
            line.split(" ")
            for line in merges_txt.split("\n")
            if line.strip() and not line.startswith("#version")
        ]
        return cls(vocab, merges)


TOKENIZERS[ByteLevelBPETokenizer.kind] = ByteLevelBPETokenizer

__all__ = ["ENDOFTEXT", "ByteLevelBPETokenizer", "ByteLevelVocab", "GPT2TokenizerError"]
