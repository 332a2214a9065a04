"""Segment sums added in place: ``target[k] += sum of values[i] over the i with
indices[i] == k``.

The adjoint of a gather (an embedding lookup, Shaw's relative buckets, the skew's table),
where repeated indices must add up: a plain ``out[idx] += v`` keeps one of the repeated
rows, which is the classic embedding-gradient bug. Written once with ``xp`` for NumPy and
CuPy alike, so that both compute the same sums in the same order:

1. sort the rows by index (a stable sort: equal indices keep their order);
2. the start of each row's run of equal indices, ``maximum.accumulate`` of the starts;
3. ``add.reduceat`` over those starts: at the last row of each run, the run's sum (at
   the other rows a single row, unused);
4. every row of a run takes its run's sum (the last row's index, ``minimum.accumulate``
   from the end), and ``target[sorted indices] += those sums``: the rows of one index
   all read the same old value and add the same sum, so they write the same value, and
   whichever write lands last the result is the same. Only the rows indexed are
   touched: no (K, D) temporary.

No atomic adds (their order, and so the float result, changes from run to run on a GPU),
and no array whose size depends on the data (reading that size back would stall a GPU):
the result is bitwise the same on every run, and equal to a float64 sum within rounding
for any order of the rows.

Dimension key: ``N`` rows, ``D`` features, ``K`` output rows.
"""

from __future__ import annotations

from scratchformer.engine.backend import xp


def scatter_add(target, indices, values) -> None:
    """target (K, D), indices (N,) int in [0, K), values (N, D): ``target[k] +=`` the sum
    of the rows of ``values`` whose index is k, in place."""
    N = indices.shape[0]
    if N == 0:
        return
    order = xp.argsort(indices, kind="stable")  # 1.
    s = indices[order]  # (N,) sorted
    pos = xp.arange(N)
    first = xp.ones(N, dtype=bool)
    first[1:] = s[1:] != s[:-1]  # (N,) a run starts here
    start = xp.maximum.accumulate(xp.where(first, pos, 0))  # 2. (N,) its run's start
    sums = xp.add.reduceat(values[order], start, axis=0)  # 3. (N, D) complete at run ends
    last = xp.ones(N, dtype=bool)
    last[:-1] = first[1:]  # (N,) a run ends here
    end = xp.minimum.accumulate(xp.where(last, pos, N - 1)[::-1])[::-1]  # 4. its run's end
    target[s] += sums[end]


__all__ = ["scatter_add"]
