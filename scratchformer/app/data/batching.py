"""Padded batches and token-budget batching (fairseq's ``batch_by_size``).

One example is a pair of id lists ``(x, y)`` without specials. Its batch rows are

    src     = x_1 ... x_m                    (m = len(x))
    tgt_in  = <bos> y_1 ... y_n              (the target shifted right)
    tgt_out = y_1 ... y_n <eos>              (what the decoder must predict)

so it needs a padded width of ``max(m, n + 1)`` positions. A batch of ``B`` examples
costs ``B * max width`` (the padded size of its largest array), and the token budget
asks ``cost <= max_tokens``.

Token-budget batching: sort the examples by width (ties broken by a seeded shuffle),
cut the sorted list greedily into the largest batches within the budget, then shuffle
the order of the batches. Every example appears in exactly one batch per epoch; the same
``(seed, epoch)`` gives the same batches; an example wider than the budget on its own is
an error, never a silent drop. Grouping similar lengths is what keeps padding low.

Dimension key: ``B`` batch, ``S`` source length, ``T`` target length (+1 for bos/eos).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from scratchformer.engine import backend
from scratchformer.engine.errors import ScratchformerError


class BatchingError(ScratchformerError):
    """Examples cannot be batched as asked (too wide for the budget, empty source, ...)."""


class Batch(NamedTuple):
    src: object  # (B, S) int64 source ids, padded
    tgt_in: object  # (B, T) int64 <bos> + target, padded
    tgt_out: object  # (B, T) int64 target + <eos>, padded
    indices: object  # (B,) int64 positions of the examples in their dataset
    n_tokens: int  # non-pad entries of tgt_out: the loss normaliser

    @property
    def n_sentences(self) -> int:
        return int(self.src.shape[0])


def collate(pairs: Sequence, pad_id: int = 0, bos_id: int = 1, eos_id: int = 2, indices=None):
    """Pad a list of ``(src_ids, tgt_ids)`` into a ``Batch`` of host int64 arrays.

    src (B, S) with S = the longest source; tgt_in / tgt_out (B, T) with T = the
    longest target + 1. Padding is on the right with ``pad_id``.
    """
    np = backend.np
    if len(pairs) == 0:
        raise BatchingError("cannot make a batch of zero examples")
    S = max(len(x) for x, _ in pairs)
    T = max(len(y) for _, y in pairs) + 1
    src = np.full((len(pairs), S), pad_id, dtype=np.int64)
    tgt_in = np.full((len(pairs), T), pad_id, dtype=np.int64)
    tgt_out = np.full((len(pairs), T), pad_id, dtype=np.int64)
    for b, (x, y) in enumerate(pairs):
        if len(x) == 0:
            raise BatchingError(
                f"example {b if indices is None else indices[b]} has an empty source"
            )
        n = len(y)
        src[b, : len(x)] = x
        tgt_in[b, 0] = bos_id
        tgt_in[b, 1 : n + 1] = y
        tgt_out[b, :n] = y
        tgt_out[b, n] = eos_id
    if indices is None:
        indices = np.arange(len(pairs))
    n_tokens = sum(len(y) + 1 for _, y in pairs)
    return Batch(src, tgt_in, tgt_out, np.asarray(indices, dtype=np.int64), n_tokens)


def example_widths(pairs: Sequence):
    """(N,) int64: the padded width ``max(len(src), len(tgt) + 1)`` of each example."""
    np = backend.np
    return np.array([max(len(x), len(y) + 1) for x, y in pairs], dtype=np.int64)


def _check_budget(widths, max_tokens: int) -> None:
    np = backend.np
    if max_tokens < 1:
        raise BatchingError(f"max_tokens must be >= 1, got {max_tokens}")
    over = np.flatnonzero(widths > max_tokens)
    if over.size:
        i = int(over[0])
        raise BatchingError(
            f"example {i} needs {int(widths[i])} positions (max of source length and target "
            f"length + 1), more than the token budget max_tokens={max_tokens}"
            + (f"; {over.size} examples are too long" if over.size > 1 else "")
            + ": raise max_tokens or filter long examples"
        )


def _cut(order, widths, max_tokens: int, max_sentences=None) -> list:
    """Greedily cut ``order`` (indices) into consecutive batches of cost <= max_tokens.

    The cost of a batch is ``len(batch) * max(widths[batch])``.
    """
    np = backend.np
    batches, start, width = [], 0, 0
    for pos, i in enumerate(order):
        w = int(widths[i])
        n = pos - start  # examples already in the open batch
        if n and ((n + 1) * max(width, w) > max_tokens or n == max_sentences):
            batches.append(np.asarray(order[start:pos], dtype=np.int64))
            start, width = pos, 0
        width = max(width, w)
    if start < len(order):
        batches.append(np.asarray(order[start:], dtype=np.int64))
    return batches


def batch_by_size(widths, max_tokens: int, rng, max_sentences=None) -> list:
    """Token-budget batches of example indices, in a shuffled order.

    ``widths`` (N,) padded widths (``example_widths``); ``rng`` a NumPy Generator that
    breaks ties among equal widths and shuffles the batch order. Returns a list of int64
    index arrays that together hold every index in ``range(N)`` exactly once.
    """
    np = backend.np
    widths = np.asarray(widths, dtype=np.int64)
    _check_budget(widths, max_tokens)
    tie = rng.permutation(len(widths))  # a random rank for each example ...
    order = tie[np.argsort(widths[tie], kind="stable")]  # ... keeps ties in random order
    batches = _cut(order, widths, max_tokens, max_sentences)
    return [batches[j] for j in rng.permutation(len(batches))]


def random_batches(widths, max_tokens: int, rng, max_sentences=None) -> list:
    """The baseline: shuffle the examples, then cut under the same budget (no sorting)."""
    np = backend.np
    widths = np.asarray(widths, dtype=np.int64)
    _check_budget(widths, max_tokens)
    return _cut(rng.permutation(len(widths)), widths, max_tokens, max_sentences)


def padding_fraction(batches, widths) -> float:
    """Share of the padded batch cells (``B * max width`` per batch) that hold padding:
    ``1 - sum(widths) / sum(B * max width)``."""
    np = backend.np
    widths = np.asarray(widths)
    cells = sum(len(b) * int(widths[b].max()) for b in batches)
    real = sum(int(widths[b].sum()) for b in batches)
    return 1.0 - real / cells if cells else 0.0


class TokenBatchSampler:
    """The batches of each epoch, a pure function of ``(seed, epoch)``.

    ``sampler.epoch(e)`` -> list of index arrays (``batch_by_size`` with the generator
    ``host_rng([seed, e])``), so an epoch can be rebuilt exactly when resuming. The number
    of batches is the same every epoch (ties only swap examples of equal width).
    """

    def __init__(self, widths, max_tokens: int, seed: int = 0, max_sentences=None):
        self.widths = backend.np.asarray(widths, dtype=backend.np.int64)
        self.max_tokens, self.seed, self.max_sentences = max_tokens, seed, max_sentences
        _check_budget(self.widths, max_tokens)
        self._cache: tuple[int, list] | None = None

    def epoch(self, epoch: int) -> list:
        if self._cache is None or self._cache[0] != epoch:
            rng = backend.host_rng([self.seed, epoch])
            self._cache = (
                epoch,
                batch_by_size(self.widths, self.max_tokens, rng, self.max_sentences),
            )
        return self._cache[1]

    def __len__(self) -> int:
        return len(self.epoch(0))


def fixed_batches(widths, max_tokens: int, max_sentences=None) -> list:
    """Deterministic batches in length order, no shuffling: for evaluation."""
    np = backend.np
    widths = np.asarray(widths, dtype=np.int64)
    _check_budget(widths, max_tokens)
    return _cut(np.argsort(widths, kind="stable"), widths, max_tokens, max_sentences)
