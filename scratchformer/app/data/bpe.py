"""A joint subword (BPE) vocabulary for translation, by SentencePiece.

    tok = BPETokenizer.train(sources + targets, vocab_size=8000)   # one vocabulary, shared
    ids = tok.encode("En el principio")      # ids, no <bos>/<eos>; pad 0 bos 1 eos 2 unk 3
    tok.decode(ids)                          # "En el principio"
    d = tok.to_dict()                        # JSON: stored in the checkpoint's meta

Why SentencePiece (``pip install -e '.[bpe]'``) rather than our own BPE or HF
``tokenizers``: it is the reference implementation of the subword segmentation the
paper's successors use (Marian, fairseq, T5), it has no dependencies, trains 8k merges
on the Bible in seconds, runs offline, and it detokenizes by itself (spaces are the
``▁`` meta-symbol, so ``decode`` gives back the text, not space-separated pieces).
Its BPE is deterministic with one thread, so retraining on the same text gives the
same model. Settings: ``model_type=bpe``, ``character_coverage=1.0`` (the accents of
the Spanish side are all kept), ``byte_fallback`` (a character never seen in training
becomes its UTF-8 bytes, not ``<unk>``), ``normalization_rule_name=identity`` (no
NFKC: ``decode(encode(s)) == s`` for any single-spaced text), and the ids of our four
specials. The serialised model (a protobuf, base64) is the whole state.
"""

from __future__ import annotations

import base64
import io
import re
from collections.abc import Iterable

from scratchformer.app.data.tokenizers import TOKENIZERS, Tokenizer
from scratchformer.app.data.vocab import SPECIALS, Vocab
from scratchformer.engine.errors import ScratchformerError


class BPEError(ScratchformerError):
    """SentencePiece is missing, or a BPE model cannot be trained or loaded.

    When the vocabulary size asked for is what SentencePiece refused, ``fewest`` or
    ``most`` is the size this text allows at the least or at the most (else None)."""

    fewest: int | None = None
    most: int | None = None


def _refusal(e: RuntimeError, vocab_size: int) -> BPEError:
    """SentencePiece's error as ours: for a size it cannot make of the text, the bound it
    names (its messages: "Vocabulary size is smaller than required_chars. 270 vs 339",
    "Vocabulary size too high (8000). Please set it to a value <= 271")."""
    text = str(e)
    small = re.search(r"smaller than required_chars\. \d+ vs (\d+)", text)
    high = re.search(r"too high \(\d+\)\. Please set it to a value <= (\d+)", text)
    if small:
        err = BPEError(
            f"a BPE of {vocab_size} ids is too small for this text: it needs at least "
            f"{small.group(1)} (4 specials, 256 bytes and each of its characters)"
        )
        err.fewest = int(small.group(1))
    elif high:
        err = BPEError(
            f"a BPE of {vocab_size} ids is more than SentencePiece can make of this text "
            f"(at most {high.group(1)})"
        )
        err.most = int(high.group(1))
    else:
        err = BPEError(f"SentencePiece could not train a {vocab_size}-id BPE: {text}")
    return err


def _spm():
    try:
        import sentencepiece  # noqa: PLC0415  (optional: the bpe extra)
    except ImportError:
        raise BPEError(
            "the subword (BPE) tokenizer needs SentencePiece: pip install -e '.[bpe]' "
            "(or pip install 'sentencepiece>=0.1.99')"
        ) from None
    return sentencepiece


class BPETokenizer(Tokenizer):
    """A SentencePiece BPE model behind the ``Tokenizer`` interface (see the module doc)."""

    kind = "spm-bpe"
    unit = "piece"

    def __init__(self, model_proto: bytes):
        spm = _spm()
        self.proto = bytes(model_proto)
        try:
            self.sp = spm.SentencePieceProcessor(model_proto=self.proto)
        except Exception as e:  # sentencepiece raises RuntimeError/OSError on bad protos
            raise BPEError(f"cannot load the SentencePiece model: {e}") from None
        pieces = [self.sp.id_to_piece(i) for i in range(self.sp.get_piece_size())]
        if tuple(pieces[: len(SPECIALS)]) != SPECIALS:
            raise BPEError(
                f"the SentencePiece model's first ids are {pieces[:4]}, expected {list(SPECIALS)}"
            )
        super().__init__(Vocab(pieces[len(SPECIALS) :]))

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int = 8000) -> BPETokenizer:
        """Learn a BPE vocabulary of ``vocab_size`` ids (specials included) from ``texts``
        (for a joint vocabulary, pass the sources and the targets together)."""
        spm = _spm()
        texts = [t for t in texts if t.strip()]
        if not texts:
            raise BPEError("cannot train a BPE vocabulary on no text")
        model = io.BytesIO()
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=iter(texts),
                model_writer=model,
                model_type="bpe",
                vocab_size=vocab_size,
                character_coverage=1.0,
                byte_fallback=True,
                normalization_rule_name="identity",
                pad_id=0,
                bos_id=1,
                eos_id=2,
                unk_id=3,
                pad_piece=SPECIALS[0],
                bos_piece=SPECIALS[1],
                eos_piece=SPECIALS[2],
                unk_piece=SPECIALS[3],
                input_sentence_size=0,
                shuffle_input_sentence=False,
                num_threads=1,
                max_sentence_length=1 << 16,
                minloglevel=2,
            )
        except RuntimeError as e:
            raise _refusal(e, vocab_size) from None
        return cls(model.getvalue())

    def split(self, text: str) -> list[str]:
        return self.sp.encode(text, out_type=str)

    def join(self, tokens: list[str]) -> str:
        return self.sp.decode_pieces(list(tokens))

    def encode(self, text: str) -> list[int]:
        return self.sp.encode(text, out_type=int)

    def unknown(self, text: str) -> list[str]:
        """The pieces read as <unk>: none but for a character that ``byte_fallback``
        cannot spell (a model trained without it)."""
        ids = self.encode(text)
        if self.vocab.unk_id not in ids:
            return []
        return [p for p, i in zip(self.split(text), ids) if i == self.vocab.unk_id]

    def decode(self, ids: Iterable[int]) -> str:
        n = len(self.vocab)
        keep = []
        for i in ids:
            i = int(i)
            if not 0 <= i < n:
                raise BPEError(f"token id {i} out of range for a vocabulary of {n}")
            if i not in (self.vocab.pad_id, self.vocab.bos_id, self.vocab.eos_id):
                keep.append(i)
        return self.sp.decode(keep)

    def to_dict(self) -> dict:
        return {
            "type": self.kind,
            "vocab_size": len(self.vocab),
            "model": base64.b64encode(self.proto).decode("ascii"),
        }

    @classmethod
    def from_dict(cls, d: dict) -> BPETokenizer:
        try:
            proto = base64.b64decode(d["model"], validate=True)
        except (KeyError, ValueError, TypeError) as e:
            raise BPEError(f"malformed {cls.kind} tokenizer entry: {e}") from None
        tok = cls(proto)
        if "vocab_size" in d and int(d["vocab_size"]) != len(tok.vocab):
            raise BPEError(
                f"the stored BPE model has {len(tok.vocab)} ids, its entry says {d['vocab_size']}"
            )
        return tok


TOKENIZERS[BPETokenizer.kind] = BPETokenizer

__all__ = ["BPEError", "BPETokenizer"]
