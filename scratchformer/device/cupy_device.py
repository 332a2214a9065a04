"""The device primitives on CuPy (see scratchformer/device/__init__.py)."""

from __future__ import annotations

import cupy
import cupyx


def scatter_add(target, indices, values) -> None:
    """``cupyx.scatter_add``: atomic adds."""
    cupyx.scatter_add(target, indices, values)


def rowdot(a, b):
    """The plain expression (CuPy has no ``vecdot``)."""
    return (a * b).sum(axis=-1)


def generator(seed=None):
    """CuPy's default generator."""
    return cupy.random.default_rng(seed)
