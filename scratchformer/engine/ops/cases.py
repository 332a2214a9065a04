"""Makers of the inputs an op's implementations are checked on: each op's file writes
its own cases (``cases(r, dtype) -> [Case]``) with these, chosen where
implementations go wrong (odd sizes, T != S != Dh, more than one head, a query row with
nothing to see, padding, a repeated id, dropout on). A ``Seed(n)`` in a case stands for
a fresh dropout generator seeded with ``n`` (each run of the case gets its own, so two
implementations draw the same masks).

Dimension key: ``B`` batch, ``H`` heads, ``T`` queries, ``S`` keys, ``Dh`` d_k,
``Dv`` d_v, ``D`` features, ``V`` vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scratchformer.engine import backend
from scratchformer.engine.backend import np


@dataclass(frozen=True)
class Seed:
    """A dropout generator seeded with ``n``, made afresh for each run of a case (the
    counter-based one with ``counter``: the draws every device and kernel shares)."""

    n: int
    counter: bool = False


@dataclass
class Case:
    label: str
    args: tuple
    kwargs: dict = field(default_factory=dict)


def randn(r, shape, dtype):
    """A standard normal array of the active backend, drawn from the host generator r."""
    return backend.asarray(r.standard_normal(shape), dtype=dtype)


def mask(r, shape, empty_row=True):
    """A random bool mask (True: may attend) with, optionally, one row that sees nothing."""
    m = r.random(shape) > 0.3
    if empty_row:
        m[(-1,) * (len(shape) - 2) + (0,)] = False
    return backend.asarray(m)


def ids(r, shape, V, pad=None):
    """Random ids in [0, V) (1 up with pad 0), with a repeated id and, with ``pad``,
    padding at the end of the last row."""
    out = r.integers(1 if pad == 0 else 0, V, shape)
    out[0, 0] = out[0, -1] = out.flat[1]  # a repeated id
    if pad is not None:
        out[-1, -2:] = pad
    return backend.asarray(out)


def qkv(r, dt, T=5, S=7, Dh=4, Dv=6):
    """Q (2, 3, T, Dh), K (2, 3, S, Dh), V (2, 3, S, Dv)."""
    return randn(r, (2, 3, T, Dh), dt), randn(r, (2, 3, S, Dh), dt), randn(r, (2, 3, S, Dv), dt)


def targets(r):
    """(3, 4) target ids in [1, 7) with one padded (0) target."""
    t = r.integers(1, 7, (3, 4))
    t[-1, -1] = 0
    return backend.asarray(t)


def pointwise(r, dt):
    """The cases of an elementwise op: one (2, 3, 5) input."""
    return [Case("(2, 3, 5)", (randn(r, (2, 3, 5), dt),))]


__all__ = ["Case", "Seed", "ids", "mask", "np", "pointwise", "qkv", "randn", "targets"]
