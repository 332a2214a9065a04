"""The tokenizer of an imported Marian gives the ids of transformers' own (slow)
``MarianTokenizer`` on two SentencePiece models and a ``vocab.json`` built here (OPUS-MT's
layout: ``</s>`` 0, ``<unk>`` 1, ``<pad>`` last, some target pieces missing from the
vocabulary), on 1,000 varied lines (several scripts, digits, punctuation, runs of
whitespace, characters the models do not cover): sources with their ``</s>`` (our
``source_end_id``), targets with theirs, and the text back the same; the tokenizer is
stored in the checkpoint and read back equal.
"""

from __future__ import annotations

import pytest
from gpt2_folders import need
from marian_folders import varied_pairs, write_tokenizer

from scratchformer.app.checkpoint import load_with_tokenizer
from scratchformer.app.data.tokenizers import tokenizer_from_dict
from scratchformer.app.hf_import.folder import HFFolder
from scratchformer.app.hf_import.marian import tokenizer


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """(ours, transformers' MarianTokenizer) of one folder."""
    transformers = need("transformers")
    need("sentencepiece")
    folder = tmp_path_factory.mktemp("marian-tok")
    write_tokenizer(folder, seed=3)
    ours, layout = tokenizer(_folder(folder))
    assert layout == "marian"
    theirs = transformers.MarianTokenizer(
        source_spm=str(folder / "source.spm"), target_spm=str(folder / "target.spm"),
        vocab=str(folder / "vocab.json"))
    return ours, theirs


def _folder(path):
    """An HFFolder for the tokenizer's files alone (no config.json needed here)."""
    f = HFFolder.__new__(HFFolder)
    f.path, f.config, f.read = path, {}, []
    return f


LINES = [s for pair in varied_pairs(500, seed=11) for s in pair]


def test_ids_equal_marian_tokenizer_on_1000_lines(both):
    ours, theirs = both
    eos, unk = ours.vocab.eos_id, ours.vocab.unk_id
    assert len(LINES) == 1000
    unknown = non_ascii = 0
    for i, line in enumerate(LINES):
        want_src = theirs(line)["input_ids"]
        want_tgt = theirs(text_target=line)["input_ids"]
        assert ours.encode(line) + [eos] == want_src, (i, line)
        assert ours.encode_target(line) + [eos] == want_tgt, (i, line)
        unknown += unk in want_src or unk in want_tgt
        non_ascii += not line.isascii()
    print(f"\n1,000 lines: ids equal, sources and targets ({unknown} lines with <unk>, "
          f"{non_ascii} with non-ASCII text)")
    assert unknown >= 50 and non_ascii >= 200


def test_text_back_the_same(both):
    """Our decode of the target ids is transformers' decode (the target model, special
    tokens skipped) wherever the ids hold no <unk> (which transformers skips as a special
    token and ours writes)."""
    ours, theirs = both
    unk, compared = ours.vocab.unk_id, 0
    for line in LINES:
        ids = theirs(text_target=line)["input_ids"]
        if unk in ids:
            continue
        want = theirs.decode(ids, skip_special_tokens=True, use_source_tokenizer=False)
        assert ours.decode(ids) == want, line
        compared += 1
    print(f"\ntext back the same on the {compared} target lines without <unk>")
    assert compared >= 500


def test_stored_in_the_checkpoint_and_read_back(both, tmp_path):
    ours, _ = both
    again = tokenizer_from_dict(ours.to_dict())
    assert again.to_dict() == ours.to_dict()
    assert [again.encode(s) for s in LINES[:50]] == [ours.encode(s) for s in LINES[:50]]
    from scratchformer.app.checkpoint import save_checkpoint  # noqa: PLC0415
    from scratchformer.engine.models import Transformer, TransformerConfig  # noqa: PLC0415

    V, v = len(ours.vocab), ours.vocab
    cfg = TransformerConfig.preset("tiny", vocab_size=V, pad_id=v.pad_id, bos_id=v.pad_id,
                                   eos_id=v.eos_id, zero_start=True, source_end_id=v.eos_id)
    path = save_checkpoint(tmp_path / "m.npz", Transformer(cfg), step=0,
                           meta={"tokenizer": ours.to_dict()})
    _, tok = load_with_tokenizer(path)
    assert tok.kind == "marian-spm" and tok.to_dict() == ours.to_dict()
