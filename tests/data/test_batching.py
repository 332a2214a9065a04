"""Padded batches and token-budget batching (docs/reference.md, "Token-budget batching";
fairseq's batch_by_size)."""

import numpy as np
import pytest

from scratchformer.app.data import (
    BatchingError,
    TokenBatchSampler,
    batch_by_size,
    collate,
    example_widths,
    fixed_batches,
    padding_fraction,
    random_batches,
)


def realistic_widths(n=5000, seed=0):
    """Sentence lengths like a parallel corpus: log-normal words per sentence (median
    ~20, long tail), the target a noisy multiple of the source; width = max(S, T + 1)."""
    r = np.random.default_rng(seed)
    src = np.clip(np.round(r.lognormal(3.0, 0.55, n)), 1, 250).astype(int)
    tgt = np.clip(np.round(src * r.normal(1.1, 0.15, n)), 1, 250).astype(int)
    return np.maximum(src, tgt + 1)


def test_collate_shifts_the_target_right():
    b = collate([([5, 6, 7], [8, 9]), ([5], [10, 11, 12])], pad_id=0, bos_id=1, eos_id=2)
    np.testing.assert_array_equal(b.src, [[5, 6, 7], [5, 0, 0]])
    np.testing.assert_array_equal(b.tgt_in, [[1, 8, 9, 0], [1, 10, 11, 12]])
    np.testing.assert_array_equal(b.tgt_out, [[8, 9, 2, 0], [10, 11, 12, 2]])
    assert b.src.dtype == b.tgt_in.dtype == b.tgt_out.dtype == np.int64
    assert b.n_tokens == 7 == int((b.tgt_out != 0).sum())  # targets + eos, no padding
    assert b.n_sentences == 2


def test_collate_rejects_empty_source_and_empty_batch():
    with pytest.raises(BatchingError, match="empty source"):
        collate([([4], [5]), ([], [5])])
    with pytest.raises(BatchingError, match="zero examples"):
        collate([])


def test_widths():
    assert list(example_widths([([1, 2, 3], [4]), ([1], [4, 5, 6])])) == [3, 4]


@pytest.mark.parametrize("max_tokens", [64, 300, 1000])
def test_budget_respected_and_every_sentence_once(max_tokens):
    widths = realistic_widths(2000)
    widths = widths[widths <= 64]
    batches = batch_by_size(widths, max_tokens, np.random.default_rng(3))
    for b in batches:
        assert len(b) * widths[b].max() <= max_tokens
    seen = np.sort(np.concatenate(batches))
    np.testing.assert_array_equal(seen, np.arange(len(widths)))  # each exactly once


def test_batches_group_similar_lengths():
    widths = realistic_widths(3000)
    batches = batch_by_size(widths, 1024, np.random.default_rng(0))
    # sorted by width: a batch spans a narrow band of lengths
    spread = [widths[b].max() - widths[b].min() for b in batches]
    assert np.median(spread) <= 1 and max(spread) < 30


def test_same_seed_same_batches_and_epochs_differ():
    widths = realistic_widths(1000)
    s1 = TokenBatchSampler(widths, 2048, seed=7)
    s2 = TokenBatchSampler(widths, 2048, seed=7)
    for epoch in (0, 1):
        e1, e2 = s1.epoch(epoch), s2.epoch(epoch)
        assert len(e1) == len(e2)
        assert all(np.array_equal(a, b) for a, b in zip(e1, e2))
    order0 = [tuple(b) for b in s1.epoch(0)]
    order1 = [tuple(b) for b in s1.epoch(1)]
    assert order0 != order1  # the batch order is reshuffled each epoch
    assert len(order0) == len(order1) == len(s1)
    other = [tuple(b) for b in TokenBatchSampler(widths, 2048, seed=8).epoch(0)]
    assert other != order0


def test_ties_are_broken_by_the_seed():
    widths = np.full(40, 5)  # every example ties
    a = batch_by_size(widths, 50, np.random.default_rng(0))
    b = batch_by_size(widths, 50, np.random.default_rng(1))
    assert sorted(map(tuple, a)) != sorted(map(tuple, b))
    assert all(len(x) == 10 for x in a)


def test_too_long_sentence_is_an_error_not_a_drop():
    widths = np.array([3, 4, 40, 5])
    with pytest.raises(BatchingError, match="example 2 needs 40 positions.*max_tokens=32"):
        batch_by_size(widths, 32, np.random.default_rng(0))
    with pytest.raises(BatchingError, match="example 2"):
        TokenBatchSampler(widths, 32)


def test_max_sentences():
    widths = np.full(25, 2)
    batches = batch_by_size(widths, 1000, np.random.default_rng(0), max_sentences=10)
    assert sorted(len(b) for b in batches) == [5, 10, 10]


def test_fixed_batches_are_deterministic_and_complete():
    widths = realistic_widths(500)
    a, b = fixed_batches(widths, 4096), fixed_batches(widths, 4096)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    np.testing.assert_array_equal(np.sort(np.concatenate(a)), np.arange(500))


def test_padding_far_below_random_batching():
    """The point of sorting: on corpus-like lengths padding drops from ~40% to ~1%."""
    widths = realistic_widths(5000)
    budget = 4096
    sorted_pad = padding_fraction(batch_by_size(widths, budget, np.random.default_rng(0)), widths)
    random_pad = padding_fraction(random_batches(widths, budget, np.random.default_rng(0)), widths)
    assert sorted_pad < 0.05
    assert random_pad > 0.25
    assert padding_fraction([np.array([0, 1])], np.array([3, 5])) == pytest.approx(0.2)
