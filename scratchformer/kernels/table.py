"""One table per op: the reference pair from ops/ and the implementations registered
beside it, and the choice between them.

An implementation is a forward/backward pair with the reference's signatures and caches
(so a module cannot tell them apart), the backends it runs on, and whether it is chosen
by default. ``OpTable.forward`` / ``OpTable.backward`` call the chosen one:

    1. with the reference forced (``reference()``, or ``SCRATCHFORMER_KERNELS=reference``
       in the environment): the reference, everywhere;
    2. an implementation put in place with ``use(table, name)`` (a learner's backward,
       a parity check, a benchmark);
    3. the first registered default implementation for the active backend;
    4. else the reference.

An implementation that has never run on its device (a CUDA kernel written without a
GPU) is registered with ``proven=False``: it is never chosen by default until a run on
that device has shown it equal to its reference, and says so in ``scratchformer kernels``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from scratchformer import backend

REFERENCE = "reference"
_BACKENDS = ("numpy", "cupy")


@dataclass(frozen=True)
class Implementation:
    """A forward/backward pair of an op, with the reference's signatures and caches."""

    name: str
    forward: Callable
    backward: Callable
    backends: tuple = _BACKENDS  # the backends it runs on
    default: bool = False  # chosen without being asked for, on those backends
    proven: bool = True  # has run on every backend it names and equalled the reference
    exact: bool = False  # bitwise equal to the reference (the same operations in order)
    note: str = ""  # what it does differently (in place, fused, ...)
    # (target, *backward's arguments): add the gradient into ``target`` without making it
    # first (a parameter's gradient buffer); None: ``target += backward(...)``
    backward_into: Callable | None = None


class KernelError(ValueError):
    """An implementation asked for that the table does not hold or cannot run here."""


_switch = {"reference": os.environ.get("SCRATCHFORMER_KERNELS", "") == REFERENCE}


@dataclass
class OpTable:
    """The implementations of one op: ``reference`` first, then the registered ones."""

    name: str
    reference: Implementation
    entries: dict = field(default_factory=dict)  # name -> Implementation, in order
    override: Implementation | None = None  # set by ``use``

    def register(self, impl: Implementation) -> Implementation:
        if impl.name == REFERENCE or impl.name in self.entries:
            raise KernelError(f"{self.name}: an implementation named {impl.name!r} exists")
        if impl.default and not impl.proven:
            raise KernelError(f"{self.name}: {impl.name!r} is not proven, so not a default")
        self.entries[impl.name] = impl
        return impl

    def unregister(self, name: str) -> None:
        self.entries.pop(name, None)
        if self.override is not None and self.override.name == name:
            self.override = None

    def implementations(self) -> list[Implementation]:
        """The reference and every registered implementation, in order."""
        return [self.reference, *self.entries.values()]

    def get(self, name: str) -> Implementation:
        for impl in self.implementations():
            if impl.name == name:
                return impl
        names = ", ".join(i.name for i in self.implementations())
        raise KernelError(f"{self.name} has no implementation {name!r} (it has: {names})")

    def default_for(self, backend_name: str) -> Implementation:
        """What is chosen on ``backend_name`` when nothing is forced or put in place."""
        for impl in self.entries.values():
            if impl.default and backend_name in impl.backends:
                return impl
        return self.reference

    def chosen(self) -> Implementation:
        """The implementation ``forward`` and ``backward`` call now."""
        if _switch["reference"]:
            return self.reference
        if self.override is not None:
            return self.override
        return self.default_for(backend.backend_name())

    def forward(self, *args, **kwargs):
        return self.chosen().forward(*args, **kwargs)

    def backward(self, *args, **kwargs):
        return self.chosen().backward(*args, **kwargs)

    def backward_into(self, target, *args, **kwargs) -> None:
        """``target += backward(*args)``, by the chosen implementation's own way of adding
        into a buffer where it has one (no gradient-sized temporary)."""
        impl = self.chosen()
        if impl.backward_into is not None:
            impl.backward_into(target, *args, **kwargs)
        else:
            target += impl.backward(*args, **kwargs)


@contextlib.contextmanager
def reference():
    """Force the reference ops of ops/ everywhere (teaching, debugging, parity checks)."""
    old = _switch["reference"]
    _switch["reference"] = True
    try:
        yield
    finally:
        _switch["reference"] = old


def set_reference(on: bool) -> None:
    """Force (True) or release (False) the reference ops everywhere."""
    _switch["reference"] = bool(on)


def reference_forced() -> bool:
    """True while the reference ops are forced everywhere."""
    return _switch["reference"]


@contextlib.contextmanager
def use(table: OpTable, name: str):
    """Put the implementation ``name`` of ``table`` in place for the duration; it must
    run on the active backend."""
    impl = table.get(name)
    if backend.backend_name() not in impl.backends:
        raise KernelError(
            f"{table.name}: {name!r} runs on {', '.join(impl.backends)}, "
            f"not on {backend.backend_name()}"
        )
    old, table.override = table.override, impl
    try:
        yield impl
    finally:
        table.override = old


__all__ = [
    "REFERENCE",
    "Implementation",
    "KernelError",
    "OpTable",
    "reference",
    "reference_forced",
    "set_reference",
    "use",
]
