"""Marian's (OPUS-MT's) tokenizer: two SentencePiece models, one per side, over one
shared vocabulary.

    tok = MarianSPTokenizer(source_proto, target_proto, vocab)   # vocab.json: piece -> id
    tok.encode("Hello world")          # source pieces -> ids; no </s> (the model's
                                       # source_end_id appends it where sources enter)
    tok.encode_target("Hallo Welt")    # target pieces -> ids
    tok.decode(ids)                    # the target model's text; <pad> and </s> dropped

A sentence is cut into pieces by its side's SentencePiece model (``source.spm`` or
``target.spm``); each piece's id is its entry in ``vocab.json`` (the union of both
models' pieces, ``</s>`` 0, ``<unk>`` 1 and ``<pad>`` last in OPUS-MT's), a piece the
vocabulary lacks is ``<unk>``. A leading language code (``>>fra<<``, multi-target
models) is a token of its own, and so is ``</s>``, ``<unk>`` or ``<pad>`` written in the
text. This is what ``transformers``' ``MarianTokenizer`` does
(its ``</s>`` after every sentence is the model's ``source_end_id`` here, and the target
``<eos>`` the batch's). Decoding maps ids back to pieces and lets the target model
join them (``decode_pieces``). Both models and the vocabulary are stored in the
checkpoint (``to_dict``): the model and its text are one file.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable

from scratchformer.app.data.bpe import BPEError, _spm
from scratchformer.app.data.tokenizers import TOKENIZERS, Tokenizer
from scratchformer.engine.errors import TokenError

EOS, UNK, PAD = "</s>", "<unk>", "<pad>"
#: the special tokens written in a text: each is that token, the text around it cut
#: into pieces on its own (as transformers' tokenizers read them)
SPECIAL_TEXT = re.compile("(" + "|".join(re.escape(t) for t in (EOS, UNK, PAD)) + ")")


class MarianVocab:
    """What the program asks of a vocabulary, for Marian's: its size, ``itos``, the
    special ids (``</s>`` <eos>, ``<unk>``, ``<pad>`` the padding and the decoder's start,
    so also <bos>) and the lookup of pieces."""

    def __init__(self, tokens: list[str]):
        self.itos = list(tokens)
        self.stoi = {t: i for i, t in enumerate(self.itos)}
        for name in (EOS, UNK, PAD):
            if name not in self.stoi:
                raise BPEError(f"Marian's vocabulary has no {name}")
        self.eos_id, self.unk_id, self.pad_id = (self.stoi[t] for t in (EOS, UNK, PAD))
        self.bos_id = self.pad_id  # Marian decodes from <pad>

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, token: str) -> bool:
        return token in self.stoi

    def encode(self, tokens: Iterable[str]) -> list[int]:
        return [self.stoi.get(t, self.unk_id) for t in tokens]

    def decode(self, ids: Iterable[int]) -> list[str]:
        out = []
        for i in ids:
            i = int(i)
            if not 0 <= i < len(self.itos):
                raise TokenError(f"token id {i} out of range for a vocabulary of {len(self)}")
            out.append(self.itos[i])
        return out


def vocab_list(vocab: dict) -> list[str]:
    """``vocab.json``'s ``{piece: id}`` as the list of pieces by id, the ids checked to be
    0 .. V-1, each once."""
    if not isinstance(vocab, dict) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
        for k, v in vocab.items()
    ):
        raise BPEError("vocab.json must hold {piece: id}")
    if sorted(vocab.values()) != list(range(len(vocab))):
        raise BPEError(f"vocab.json's ids must be 0 to {len(vocab) - 1}, each once")
    return sorted(vocab, key=vocab.get)


class MarianSPTokenizer(Tokenizer):
    """Marian's two SentencePiece models and shared vocabulary behind the ``Tokenizer``
    interface (see the module doc)."""

    kind = "marian-spm"
    unit = "piece"

    def __init__(self, source_proto: bytes, target_proto: bytes, tokens: list[str]):
        spm = _spm()
        self.protos = (bytes(source_proto), bytes(target_proto))
        try:
            self.source, self.target = (
                spm.SentencePieceProcessor(model_proto=p) for p in self.protos
            )
        except Exception as e:  # sentencepiece raises RuntimeError/OSError on bad protos
            raise BPEError(f"cannot load Marian's SentencePiece models: {e}") from None
        super().__init__(MarianVocab(tokens))

    @staticmethod
    def _code(text: str) -> tuple[list[str], str]:
        """A leading language code ``>>xx<<`` as a token of its own, and the rest."""
        end = text.find("<<") if text.startswith(">>") else -1
        return ([text[: end + 2]], text[end + 2 :]) if end != -1 else ([], text)

    @staticmethod
    def _pieces(sp, text: str) -> list[str]:
        """``text`` cut by ``sp``, a special token written in it kept whole."""
        out = []
        for k, part in enumerate(SPECIAL_TEXT.split(text)):
            out += [part] if k % 2 else (sp.encode(part, out_type=str) if part else [])
        return out

    def split(self, text: str) -> list[str]:
        code, rest = self._code(text)
        return code + self._pieces(self.source, rest)

    def encode(self, text: str) -> list[int]:
        """A source sentence's ids (no ``</s>``: see the module doc)."""
        return self.vocab.encode(self.split(text))

    def encode_target(self, text: str) -> list[int]:
        return self.vocab.encode(self._pieces(self.target, text))

    def join(self, tokens: list[str]) -> str:
        return self.target.decode_pieces(list(tokens)).replace("\u2581", " ").strip()

    def decode(self, ids: Iterable[int]) -> str:
        """Ids -> the target model's text; ``<pad>`` and ``</s>`` dropped."""
        v = self.vocab
        return self.join(v.decode(i for i in ids if int(i) not in (v.pad_id, v.eos_id)))

    def to_dict(self) -> dict:
        return {
            "type": self.kind,
            "vocab_size": len(self.vocab),
            "model": {
                "source": base64.b64encode(self.protos[0]).decode("ascii"),
                "target": base64.b64encode(self.protos[1]).decode("ascii"),
                "tokens": self.vocab.itos,
            },
        }

    @classmethod
    def from_dict(cls, d: dict) -> MarianSPTokenizer:
        try:
            model = d["model"]
            protos = [base64.b64decode(model[k], validate=True) for k in ("source", "target")]
            tokens = model["tokens"]
        except (KeyError, ValueError, TypeError) as e:
            raise BPEError(f"malformed {cls.kind} tokenizer entry: {e}") from None
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise BPEError(f"malformed {cls.kind} tokenizer entry: tokens is not a list of text")
        tok = cls(*protos, tokens)
        if "vocab_size" in d and d["vocab_size"] != len(tok.vocab):
            raise BPEError(
                f"the stored vocabulary has {len(tok.vocab)} ids, its entry says {d['vocab_size']}"
            )
        return tok


TOKENIZERS[MarianSPTokenizer.kind] = MarianSPTokenizer

__all__ = ["MarianSPTokenizer", "MarianVocab", "vocab_list"]
