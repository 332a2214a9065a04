"""The device primitives on NumPy (see scratchformer/engine/device/__init__.py)."""

from __future__ import annotations

from scratchformer.engine.backend import np


def scatter_add(target, indices, values) -> None:
    """segment.py's segment sum with its runs compacted, which only the host does cheaply
    (their count depends on the data). A run of one row is added as it is; the longer
    runs are summed by ``add.reduceat`` over the same slices as segment.py's form, so the
    bits are the same. ``reduceat`` pays per slice: on an embedding's 32 x 32 batch,
    where most ids occur once, adding those rows directly is about 3x faster."""
    if indices.shape[0] == 0:
        return
    order = np.argsort(indices, kind="stable")
    s = indices[order]  # (N,) sorted
    edge = np.r_[True, s[1:] != s[:-1], True]  # (N + 1,) a run starts at i / ended before i
    single = edge[:-1] & edge[1:]  # (N,) a run of one row
    target[s[single]] += values[order[single]]
    multi = ~single
    if multi.any():
        s, order = s[multi], order[multi]
        starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])  # (R,) each longer run
        target[s[starts]] += np.add.reduceat(values[order], starts, axis=0)


#: entries per block of a pass over flat buffers: the five float32 arrays of an Adam
#: block (theta, g, m, v and a scratch) take 5 * 4 * PASS_BLOCK bytes = 640 KiB, inside a
#: core's L2 cache
PASS_BLOCK = 1 << 15


def pass_block(n: int) -> int:
    """Blocks that stay in the cache: each pass over a block reads what the previous
    pass wrote while it is still there."""
    return max(1, min(PASS_BLOCK, n))


def rowdot(a, b):
    """The ``vecdot`` ufunc: a SIMD dot per row, several times faster than
    ``(a * b).sum(-1)`` on short rows (NumPy >= 2.0; the plain form before)."""
    if hasattr(np, "vecdot"):
        return np.vecdot(a, b)
    return (a * b).sum(axis=-1)


def generator(seed=None):
    """NumPy's default generator (PCG64)."""
    return np.random.default_rng(seed)
