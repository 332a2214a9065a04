"""The device primitives on NumPy (see scratchformer/device/__init__.py)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from scratchformer.backend import np


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


#: threads of the elementwise passes (``set_workers``) and their pool, made when first used
_workers = 1
_pool: ThreadPoolExecutor | None = None


def set_workers(n: int) -> None:
    """Run ``parallel``'s ranges on ``n`` threads (1: in the calling thread)."""
    global _workers, _pool
    n = max(1, int(n))
    if n != _workers and _pool is not None:
        _pool.shutdown(wait=True)
        _pool = None
    _workers = n


def workers() -> int:
    return _workers


def parallel(fn, n: int, grain: int = 1) -> None:
    """``fn(start, stop)`` over ranges that cover ``[0, n)``, one per worker thread (range
    bounds multiples of ``grain``). NumPy lets go of the interpreter lock inside a ufunc's
    loop, so the ranges' elementwise passes run at once; with one worker, or too little
    work for two ranges, ``fn(0, n)`` runs here."""
    global _pool
    k = min(_workers, n // grain)
    if k <= 1:
        fn(0, n)
        return
    if _pool is None:
        _pool = ThreadPoolExecutor(_workers, thread_name_prefix="scratchformer")
    step = -(-n // (k * grain)) * grain  # ceil, a multiple of grain
    futures = [_pool.submit(fn, i, min(i + step, n)) for i in range(step, n, step)]
    fn(0, min(step, n))  # the first range here, the rest in the pool
    for f in futures:
        f.result()


def rowdot(a, b):
    """The ``vecdot`` ufunc: a SIMD dot per row, several times faster than
    ``(a * b).sum(-1)`` on short rows (NumPy >= 2.0; the plain form before)."""
    if hasattr(np, "vecdot"):
        return np.vecdot(a, b)
    return (a * b).sum(axis=-1)


def generator(seed=None):
    """NumPy's default generator (PCG64)."""
    return np.random.default_rng(seed)
