"""Fixtures of the translation tests: a tiny parallel corpus and its BPE tokenizer."""

import itertools

import pytest

ES = ["el perro", "la casa", "un niño", "la mujer", "el rey", "su hijo"]
VERBS_ES = ["ve", "come", "ama", "busca"]
EN = ["the dog", "the house", "a boy", "the woman", "the king", "his son"]
VERBS_EN = ["sees", "eats", "loves", "seeks"]


def corpus():
    """~150 Spanish -> English sentence pairs with accents and punctuation."""
    out = []
    for (s1, e1), (v, ve), (s2, e2) in itertools.product(
        zip(ES, EN), zip(VERBS_ES, VERBS_EN), zip(ES, EN)
    ):
        if s1 != s2:
            out.append((f"{s1.capitalize()} {v} á {s2}.", f"{e1.capitalize()} {ve} {e2}."))
    return out


@pytest.fixture(scope="session")
def pairs():
    return corpus()


@pytest.fixture(scope="session")
def bpe(pairs):
    bpe_mod = pytest.importorskip("scratchformer.data.bpe", exc_type=ImportError)
    pytest.importorskip("sentencepiece")
    return bpe_mod.BPETokenizer.train([s for s, _ in pairs] + [t for _, t in pairs], 350)


@pytest.fixture
def data_dir(tmp_path, pairs):
    d = tmp_path / "bible"
    d.mkdir()
    for i, split in enumerate(("train", "dev", "test")):
        rows = pairs if split == "train" else pairs[i * 5 : i * 5 + 6]
        (d / f"{split}.tsv").write_text(
            "".join(f"{s}\t{t}\tGen 1:{j}\n" for j, (s, t) in enumerate(rows, 1)),
            encoding="utf-8",
        )
    return d
