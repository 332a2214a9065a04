"""The joint SentencePiece BPE tokenizer: our ids, round trips, checkpoint storage."""

import json

import pytest

from scratchformer.app.data.tokenizers import tokenizer_from_dict
from scratchformer.app.data.vocab import SPECIALS

pytest.importorskip("sentencepiece")


def test_specials_have_our_ids(bpe):
    assert bpe.vocab.itos[:4] == list(SPECIALS)
    assert (bpe.vocab.pad_id, bpe.vocab.bos_id, bpe.vocab.eos_id, bpe.vocab.unk_id) == (0, 1, 2, 3)
    assert len(bpe) == 350


def test_round_trip_exact(bpe, pairs):
    for s, t in pairs[:20]:
        for text in (s, t):
            ids = bpe.encode(text)
            assert all(3 < i < len(bpe) for i in ids)  # no specials, no <unk>
            assert bpe.decode(ids) == text
    # characters never seen in training fall back to bytes, not <unk>
    odd = "Ωmega «ñandú» 3:16 — ok"
    assert bpe.decode(bpe.encode(odd)) == odd
    # <pad>, <bos>, <eos> are dropped when decoding
    ids = bpe.encode(pairs[0][1])
    assert bpe.decode([1, *ids, 2, 0, 0]) == pairs[0][1]


def test_subwords_are_shared_by_both_languages(bpe):
    assert len(bpe.encode("la casa")) < len("la casa")  # merged, not characters
    assert len(bpe.encode("the house")) < len("the house")


def test_to_dict_survives_json_and_rebuilds_the_same_tokenizer(bpe, pairs):
    d = json.loads(json.dumps(bpe.to_dict()))
    again = tokenizer_from_dict(d)
    assert type(again) is type(bpe) and again.vocab == bpe.vocab
    assert again.encode(pairs[3][0]) == bpe.encode(pairs[3][0])


def test_training_is_deterministic(bpe, pairs):
    from scratchformer.app.data.bpe import BPETokenizer  # noqa: PLC0415

    again = BPETokenizer.train([s for s, _ in pairs] + [t for _, t in pairs], 350)
    assert again.proto == bpe.proto


def test_corrupt_stored_model_is_a_clear_error(bpe):
    from scratchformer.app.data.bpe import BPEError  # noqa: PLC0415

    with pytest.raises(BPEError, match="malformed"):
        tokenizer_from_dict({"type": "spm-bpe", "model": "not base64!"})
    with pytest.raises(BPEError, match="cannot load"):
        tokenizer_from_dict({"type": "spm-bpe", "model": "AAAA"})
    with pytest.raises(BPEError, match="id 350 out of range"):
        bpe.decode([350])
