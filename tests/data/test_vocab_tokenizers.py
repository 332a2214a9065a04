"""Vocabulary and tokenizers: specials first, round trips, serialisation."""

import pytest

from scratchformer.app.data import (
    CharTokenizer,
    Vocab,
    VocabError,
    WhitespaceTokenizer,
    tokenizer_from_dict,
)
from scratchformer.engine.errors import ScratchformerError, TokenError
from scratchformer.engine.models import TransformerConfig


def test_specials_come_first_and_match_the_model_defaults():
    v = Vocab(["a", "b"])
    assert v.itos[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"]
    cfg = TransformerConfig(vocab_size=len(v))
    assert (v.pad_id, v.bos_id, v.eos_id) == (cfg.pad_id, cfg.bos_id, cfg.eos_id) == (0, 1, 2)
    assert v.unk_id == 3 and len(v) == 6 and v.tokens == ["a", "b"]


def test_encode_decode_and_unknown():
    v = Vocab(["x", "y"])
    assert v.encode(["y", "x", "z"]) == [5, 4, 3]
    assert v.decode([1, 5, 4, 2, 0]) == ["<bos>", "y", "x", "<eos>", "<pad>"]
    with pytest.raises(TokenError, match="out of range"):
        v.decode([6])


def test_build_orders_by_frequency_then_alphabet():
    v = Vocab.build([["b", "a", "c"], ["c", "a"], ["c", "d"]], min_freq=1)
    assert v.tokens == ["c", "a", "b", "d"]
    assert Vocab.build([["b", "a", "c"], ["c", "a"]], min_freq=2).tokens == ["a", "c"]
    assert Vocab.build([["b", "a", "c"], ["c", "a"]], max_size=1).tokens == ["a"]


def test_duplicate_or_special_tokens_are_errors():
    with pytest.raises(VocabError, match="twice"):
        Vocab(["a", "a"])
    with pytest.raises(VocabError, match="twice"):
        Vocab(["<eos>"])
    with pytest.raises(VocabError, match="non-empty"):
        Vocab([""])


def test_char_tokenizer_round_trip():
    tok = CharTokenizer.fit(["hello world", "hold"])
    ids = tok.encode("hello")
    assert len(ids) == 5 and all(i > 3 for i in ids)  # no bos/eos added
    assert tok.decode([tok.vocab.bos_id, *ids, tok.vocab.eos_id, 0, 0]) == "hello"
    assert tok.decode(tok.encode("hello world")) == "hello world"
    assert tok.decode(tok.encode("help")) == "hel<unk>"  # unknown shown, never silently lost


def test_whitespace_tokenizer_round_trip():
    tok = WhitespaceTokenizer.fit(["the cat sat", "the dog"])
    assert tok.split("  the   cat ") == ["the", "cat"]
    assert tok.vocab.tokens[0] == "the"  # most frequent first
    assert tok.decode(tok.encode("the dog sat")) == "the dog sat"


@pytest.mark.parametrize("cls", [CharTokenizer, WhitespaceTokenizer])
def test_to_dict_rebuilds_the_same_tokenizer(cls):
    tok = cls.fit(["ab ba", "c a b"])
    back = tokenizer_from_dict(tok.to_dict())
    assert type(back) is cls and back.vocab == tok.vocab
    assert back.encode("a b c") == tok.encode("a b c")


def test_unknown_tokenizer_type():
    with pytest.raises(ScratchformerError, match="unknown tokenizer type"):
        tokenizer_from_dict({"type": "bpe", "vocab": {"tokens": []}})
