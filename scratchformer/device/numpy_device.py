"""The device primitives on NumPy (see scratchformer/device/__init__.py)."""

from __future__ import annotations

from scratchformer.backend import np


def scatter_add(target, indices, values) -> None:
    """Sort the ids, sum each run of equal ids with ``add.reduceat``, then add each sum
    once with a fancy index of unique rows (``np.add.at`` does the same many times
    slower)."""
    if indices.size == 0:
        return
    order = np.argsort(indices, kind="stable")
    sorted_ids = indices[order]
    starts = np.flatnonzero(np.r_[True, sorted_ids[1:] != sorted_ids[:-1]])
    sums = np.add.reduceat(values[order], starts, axis=0)
    target[sorted_ids[starts]] += sums


def rowdot(a, b):
    """The ``vecdot`` ufunc: a SIMD dot per row, several times faster than
    ``(a * b).sum(-1)`` on short rows (NumPy >= 2.0; the plain form before)."""
    if hasattr(np, "vecdot"):
        return np.vecdot(a, b)
    return (a * b).sum(axis=-1)


def generator(seed=None):
    """NumPy's default generator (PCG64)."""
    return np.random.default_rng(seed)
