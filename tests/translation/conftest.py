"""Fixtures of the translation tests: a tiny parallel corpus and its BPE tokenizer."""

import pytest
from task_data import corpus, write_translation


@pytest.fixture(scope="session")
def pairs():
    return corpus()


@pytest.fixture(scope="session")
def bpe(pairs):
    bpe_mod = pytest.importorskip("scratchformer.app.data.bpe", exc_type=ImportError)
    pytest.importorskip("sentencepiece")
    return bpe_mod.BPETokenizer.train([s for s, _ in pairs] + [t for _, t in pairs], 350)


@pytest.fixture
def data_dir(tmp_path, pairs):
    return write_translation(tmp_path / "bible", pairs)
