"""Device primitives: the few array operations whose best form depends on the backend.

The ops (the readable reference, one floor up) call these by name, once each, and never
branch on the backend themselves. Where the best form depends on the backend, each has
its own module:

    numpy_device.py    NumPy (the host)
    cupy_device.py     CuPy (an NVIDIA GPU); the only files of the package beside
                       backend.py that import cupy are this one and cupy_kernels.py (the ops' CUDA)

and where one form serves both, it is written once with ``xp`` (segment.py, counter.py;
NumPy compacts segment.py's runs, to the same bits):

    scatter_add(target, idx, values)  target[k] += sum of values[i] with idx[i] == k, in
                                      place: sorted runs, no atomics, the same bits
                                      on every run (segment_sum: into zeros)
    rowdot(a, b)                      sum(a * b, axis=-1) without the temporary
    pass_block(n)                     entries per block of an elementwise pass over a long
                                      flat buffer (Adam): cache-sized on the CPU, the
                                      whole buffer on a GPU
    generator(seed)                   the generator of dropout masks: NumPy's PCG64 on
                                      NumPy, the counter-based generator on CuPy
    fork(rng)                         a copy of a generator that continues its stream

Whole forward/backward pairs that are faster on one backend (fused kernels) are not
primitives: they are the faster forms in the ops' files (scratchformer/engine/ops/).
"""

from __future__ import annotations

import copy
import numbers

from scratchformer.engine import backend
from scratchformer.engine.device.counter import CounterGenerator
from scratchformer.engine.errors import ScratchformerError


def _impl():
    """The primitives of the active backend."""
    if backend.backend_name() == "cupy":
        from scratchformer.engine.device import cupy_device  # noqa: PLC0415  (the gpu extra only)

        return cupy_device
    from scratchformer.engine.device import numpy_device  # noqa: PLC0415

    return numpy_device


def scatter_add(target, indices, values) -> None:
    """``target[indices[i]] += values[i]`` in place, repeated indices adding up: target
    (K, D), indices (N,) int in [0, K), values (N, D). The adjoint of a gather
    (``E[ids]``); a plain ``target[idx] += v`` keeps one of the repeated rows, the
    classic embedding-gradient bug (see scratchformer/engine/device/segment.py)."""
    _impl().scatter_add(target, indices, values)


def segment_sum(indices, values, K: int):
    """indices (N,) int in [0, K), values (N, D)  ->  (K, D): row k the sum of the rows of
    ``values`` whose index is k (zeros where none is); ``scatter_add`` into zeros."""
    out = backend.xp.zeros((K,) + tuple(values.shape[1:]), dtype=values.dtype)
    _impl().scatter_add(out, indices, values)
    return out


def pass_block(n: int) -> int:
    """Entries per block when passes over a flat buffer of ``n`` entries go block by
    block (Adam's update): a block that stays in the cache on the CPU, the whole buffer
    on a GPU."""
    return _impl().pass_block(n)


def rowdot(a, b):
    """``sum(a * b, axis=-1)``: (..., K), (..., K) -> (...), without the (..., K) product
    where the backend allows."""
    return _impl().rowdot(a, b)


def generator(seed=None, *, counter: bool = False):
    """The generator of dropout masks on the active backend, seeded with ``seed``:
    NumPy's PCG64 on NumPy (the fastest there), the counter-based generator on CuPy
    (device-independent, nothing to initialise on the GPU); ``counter=True`` gives the
    counter-based one on NumPy too, whose draws equal CuPy's.

    Randomness is always explicit: nothing in the package draws from a global state.
    """
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral)):
        raise GeneratorError(
            f"the generator's seed must be a whole number >= 0 (or None), got "
            f"{type(seed).__name__} {seed!r:.40}"
        )
    if seed is not None and seed < 0:
        raise GeneratorError(f"the generator's seed must be a whole number >= 0, got {seed}")
    if counter:
        return CounterGenerator(0 if seed is None else seed)
    return _impl().generator(seed)


class GeneratorError(ScratchformerError):
    """A dropout generator (or its seed) that is not one the models can draw from."""


def check_generator(rng) -> None:
    """A dropout generator must draw arrays of the active backend: on CuPy a NumPy
    generator's host masks cannot multiply device arrays. Raises GeneratorError (a
    ValueError) in one line naming what to use; None (dropout off) and the counter-based
    generator always do; anything else (a string, a seed) is refused."""
    if rng is None or isinstance(rng, CounterGenerator):
        return
    host = isinstance(rng, backend.np.random.Generator)
    if not host and not type(rng).__module__.startswith("cupy"):
        raise GeneratorError(
            f"rng must be a generator, scratchformer.engine.device.generator(seed), or None (no "
            f"dropout), got {type(rng).__name__} {rng!r:.40}"
        )
    if host != (backend.backend_name() == "numpy"):
        raise GeneratorError(
            f"rng is a {type(rng).__module__.split('.')[0]} generator but the backend is "
            f"{backend.backend_name()}: make it with scratchformer.engine.device.generator(seed)"
        )


def fork(rng):
    """An independent generator that continues ``rng``'s stream from its current state:
    drawing from the fork gives exactly what drawing from ``rng`` would (a backward pass
    regenerating a forward's dropout masks). A copy of the state, not a new seeding."""
    if isinstance(rng, CounterGenerator):
        return rng.fork()
    return copy.deepcopy(rng)


__all__ = [
    "CounterGenerator",
    "GeneratorError",
    "check_generator",
    "fork",
    "generator",
    "rowdot",
    "scatter_add",
    "segment_sum",
    "pass_block",
]
