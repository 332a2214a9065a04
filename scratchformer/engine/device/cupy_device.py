"""The device primitives on CuPy (see scratchformer/engine/device/__init__.py)."""

from __future__ import annotations

from scratchformer.engine.device.counter import CounterGenerator
from scratchformer.engine.device.segment import scatter_add

__all__ = ["scatter_add", "rowdot", "generator", "pass_block"]


def pass_block(n: int) -> int:
    """The whole array: one launch per pass (a GPU's memory bandwidth, not a cache, is
    what a pass costs; more launches would only add their overhead)."""
    return max(1, n)


def rowdot(a, b):
    """The plain expression (CuPy has no ``vecdot``)."""
    return (a * b).sum(axis=-1)


def generator(seed=None):
    """The counter-based generator (scratchformer/engine/device/counter.py): CuPy's default
    generator keeps a state per GPU thread (about 270,000 on an H100), slow to set up
    and different on another GPU model."""
    return CounterGenerator(0 if seed is None else seed)
