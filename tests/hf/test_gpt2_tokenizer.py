"""GPT-2's byte-level BPE (scratchformer/app/data/gpt2_bpe.py) against transformers.

A BPE of 2,000+ merges is trained here (the tokenizers library, on a generated varied
text); on 1,000 other lines (non-ASCII, digits, runs of whitespace, <|endoftext|>) our
ids equal those of transformers' slow ``GPT2Tokenizer`` (its Python implementation,
transformers < 5; transformers 5 has none: then an implementation of OpenAI's
``encoder.py`` written below stands in for it), and those of transformers' own
``GPT2Tokenizer`` whatever its backend; the text comes back the same from ours and
theirs.
"""

from __future__ import annotations

import json
from functools import cache

import pytest
from gpt2_folders import ENDOFTEXT, need, train_bpe, varied_text

need("tokenizers")
from scratchformer.app.data import tokenizer_from_dict  # noqa: E402
from scratchformer.app.data.gpt2_bpe import (  # noqa: E402
    ByteLevelBPETokenizer,
    GPT2TokenizerError,
    bytes_to_unicode,
)

LINES = 1000


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return train_bpe(tmp_path_factory.mktemp("bpe"), seed=0)


@pytest.fixture(scope="module")
def ours(folder):
    return ByteLevelBPETokenizer.from_files(
        (folder / "vocab.json").read_text(encoding="utf-8"),
        (folder / "merges.txt").read_text(encoding="utf-8"),
    )


@pytest.fixture(scope="module")
def lines():
    text = varied_text(LINES, seed=12345)  # not the training text
    assert sum(ENDOFTEXT in t for t in text) > 50 and sum("  " in t for t in text) > 100
    assert sum(any(ord(c) > 127 for c in t) for t in text) > 300
    assert sum(any(c.isdigit() for c in t) for t in text) > 300
    return text


class EncoderPy:
    """OpenAI's ``encoder.py`` (GPT-2's own tokenizer, Python), for the comparison where
    transformers has no slow GPT2Tokenizer: the regex split, the bytes as 256 printable
    characters, the ranked merges; ``<|endoftext|>`` in the text is that token."""

    def __init__(self, folder):
        import regex  # noqa: PLC0415  (transformers' dependency)

        self.encoder = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
        merges = (folder / "merges.txt").read_text(encoding="utf-8").split("\n")[1:-1]
        self.ranks = {tuple(m.split()): i for i, m in enumerate(merges)}
        self.bytes = bytes_to_unicode()
        self.pat = regex.compile(
            r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
        )

    @cache  # noqa: B019  (the test's lifetime)
    def bpe(self, token: str) -> tuple:
        word = tuple(token)
        while len(word) > 1:
            pairs = {(a, b) for a, b in zip(word, word[1:])}
            best = min(pairs, key=lambda p: self.ranks.get(p, float("inf")))
            if best not in self.ranks:
                break
            out, i = [], 0
            while i < len(word):
                if i < len(word) - 1 and (word[i], word[i + 1]) == best:
                    out.append(word[i] + word[i + 1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            word = tuple(out)
        return word

    def encode(self, text: str) -> list[int]:
        ids = []
        for k, part in enumerate(text.split(ENDOFTEXT)):
            if k:
                ids.append(self.encoder[ENDOFTEXT])
            for piece in self.pat.findall(part):
                spelled = "".join(self.bytes[b] for b in piece.encode("utf-8"))
                ids += [self.encoder[t] for t in self.bpe(spelled)]
        return ids


def slow_gpt2(folder):
    """transformers' slow GPT2Tokenizer, or None where transformers has none (>= 5)."""
    transformers = need("transformers")
    cls = transformers.GPT2Tokenizer
    if "tokenization_utils.PreTrainedTokenizer" not in str(cls.__mro__):
        return None
    return cls(str(folder / "vocab.json"), str(folder / "merges.txt"))


def test_the_bpe_has_2000_merges_and_endoftext_first(ours):
    assert len(ours.merges) >= 2000
    assert ours.vocab.eos_id == ours.vocab.bos_id == ours.token_ids[ENDOFTEXT] == 0
    assert ours.vocab.pad_id == len(ours.vocab)  # padding: no token


def test_ids_equal_transformers_slow_gpt2_tokenizer(folder, ours, lines):
    """Our ids equal transformers' slow GPT2Tokenizer's (or encoder.py's, see the
    module doc) on every line; decoding gives the line back, ours and theirs."""
    slow = slow_gpt2(folder)
    reference = slow if slow is not None else EncoderPy(folder)
    mine = ours.encode_many(lines)
    for line, ids in zip(lines, mine):
        want = reference.encode(line) if slow is None else slow.encode(line)
        assert ids == want, line
        assert ours.encode(line) == ids
        assert ours.decode(ids) == line
        if slow is not None:
            text = slow.decode(ids, clean_up_tokenization_spaces=False)
            assert text == line
    transformers = need("transformers")
    who = (f"transformers {transformers.__version__}'s slow GPT2Tokenizer" if slow is not None
           else "encoder.py (transformers " + transformers.__version__ + " has no slow one)")
    print(f"\n{len(lines)} lines, {sum(map(len, mine)):,} ids, a BPE of {len(ours.merges):,} "
          f"merges: ids equal to {who}'s on every line, the text back the same")


def test_ids_equal_transformers_gpt2_tokenizer_whatever_its_backend(folder, ours, lines):
    transformers = need("transformers")
    theirs = transformers.GPT2Tokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"))
    for line in lines[:300]:
        assert ours.encode(line) == theirs.encode(line), line


def test_stored_in_a_checkpoint_entry_and_rebuilt(ours, lines):
    d = json.loads(json.dumps(ours.to_dict()))
    back = tokenizer_from_dict(d)
    assert back.to_dict() == ours.to_dict()
    assert [back.encode(t) for t in lines[:50]] == [ours.encode(t) for t in lines[:50]]


def test_decode_drops_the_padding_and_refuses_other_ids(ours):
    ids = ours.encode("a b")
    assert ours.decode([*ids, ours.vocab.pad_id]) == "a b"
    with pytest.raises(GPT2TokenizerError, match="out of range"):
        ours.decode([len(ours.vocab) + 1])


def test_plot_labels_are_the_tokens_text(ours):
    ids = ours.encode(" über")
    assert "".join(ours.vocab.itos[i] for i in ids) == " über"


@pytest.mark.parametrize(
    "vocab, merges, match",
    [
        ({"a": 0, "b": 1}, [], "no <|endoftext|>"),
        ({ENDOFTEXT: 0, "a": 2}, [], "ids must be 0 to 1"),
        ({ENDOFTEXT: 0, "a": 1}, [["a", "b", "c"]], "a pair of tokens"),
    ],
)
def test_a_broken_vocabulary_is_refused_in_one_line(vocab, merges, match):
    with pytest.raises(GPT2TokenizerError, match=match):
        ByteLevelBPETokenizer(vocab, merges)


def test_without_the_tokenizers_library_one_line_names_the_extra(ours, monkeypatch):
    import sys  # noqa: PLC0415

    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(GPT2TokenizerError, match=r"pip install -e '\.\[gpt2\]'"):
        tokenizer_from_dict(ours.to_dict())
