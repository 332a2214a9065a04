"""The pairs of the built-in string tasks: correct targets, held-out sources never
trained on, seeded."""

import pytest

from scratchformer.app.data import DataError, string_pairs

#: the settings of the default task (configs/reverse.toml), smaller splits
SPEC = dict(
    symbols=10,
    min_len=1,
    max_len=12,
    train_size=300,
    valid_size=50,
    test_size=50,
    held_out=0.1,
    seed=0,
)


def task(name="reverse", **kw):
    return string_pairs(name, **{**SPEC, **kw})


@pytest.mark.parametrize(
    "name, rule",
    [("copy", lambda s: s), ("reverse", lambda s: s[::-1]), ("sort", lambda s: "".join(sorted(s)))],
)
def test_targets_follow_the_rule(name, rule):
    data = task(name)
    for split in (data.train, data.valid, data.test):
        for src, tgt in split:
            assert tgt == rule(src) and 1 <= len(src) <= 12 and set(src) <= set("abcdefghij")


def test_held_out_sources_never_appear_in_training():
    data = task(train_size=5000, valid_size=300, test_size=300)
    train = {s for s, _ in data.train}
    assert not train & {s for s, _ in data.valid + data.test}
    # lengths spread over the whole range on both sides
    assert {len(s) for s, _ in data.train} == set(range(1, 13))
    assert {len(s) for s, _ in data.test} >= set(range(2, 13))


def test_seeded_and_encoded_without_specials():
    a = task(train_size=50, seed=1)
    b = task(train_size=50, seed=1)
    c = task(train_size=50, seed=2)
    assert a.train == b.train and a.train != c.train
    (src, tgt), *_ = a.encoded("train")
    assert a.tokenizer.decode(src) == a.train[0][0] and min(src + tgt) >= 4


def test_impossible_settings_are_clear_errors():
    with pytest.raises(DataError, match="not a string task"):
        task("paraphrase")
    with pytest.raises(DataError, match=r"min_len must be in \[1, max_len\]"):
        task(min_len=5, max_len=3)
    with pytest.raises(DataError, match="could not draw"):  # 1 symbol, length 1: one string
        task(symbols=1, min_len=1, max_len=1, train_size=5, held_out=0.5)
