"""Device primitives: the few array operations whose best form depends on the backend.

The ops (the readable reference, one floor up) call these by name, once each, and never
branch on the backend themselves; each backend has one implementation of every
primitive, in its own module:

    numpy_device.py    NumPy (the host)
    cupy_device.py     CuPy (an NVIDIA GPU); the only files of the package beside
                       backend.py that import cupy are this one and the kernels' CuPy side

    scatter_add(target, indices, values)   target[indices[i]] += values[i], repeats add up
    rowdot(a, b)                           sum(a * b, axis=-1) without the temporary
    generator(seed)                        the random generator of dropout masks

Whole forward/backward pairs that are faster on one backend (fused kernels) are not
primitives: they live in the kernel seam's tables (scratchformer/kernels/).
"""

from __future__ import annotations

from scratchformer import backend


def _impl():
    """The primitives of the active backend."""
    if backend.backend_name() == "cupy":
        from scratchformer.device import cupy_device  # noqa: PLC0415  (the gpu extra only)

        return cupy_device
    from scratchformer.device import numpy_device  # noqa: PLC0415

    return numpy_device


def scatter_add(target, indices, values) -> None:
    """``target[indices[i]] += values[i]`` in place, repeated indices accumulating.

    target (V, D), indices (N,) int, values (N, D). Plain ``target[idx] += v`` keeps
    only one of the repeated rows: the classic embedding-gradient bug.
    """
    _impl().scatter_add(target, indices, values)


def rowdot(a, b):
    """``sum(a * b, axis=-1)``: (..., K), (..., K) -> (...), without the (..., K) product
    where the backend allows."""
    return _impl().rowdot(a, b)


def generator(seed=None):
    """The generator of dropout masks on the active backend, seeded with ``seed``.

    Randomness is always explicit: nothing in the package draws from a global state.
    """
    return _impl().generator(seed)


__all__ = ["generator", "rowdot", "scatter_add"]
