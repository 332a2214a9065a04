"""One table per op: its schema, the reference pair from ops/ and the implementations
registered beside it, and the choice between them.

An **implementation** is a forward/backward pair for the op's inputs, with the
backends and dtypes it runs on. Its cache is its own business: ``OpTable.forward``
wraps it in an ``OpCache`` that records which implementation made it, and
``OpTable.backward`` hands it back to that implementation, whatever is chosen by then.
Code outside the implementation never reads inside a cache; what it may need (the
attention weights for a plot, the post-dropout weights for a value term, the loss's
token count) is declared by the op's schema as an **accessor**, and every
implementation provides it.

**Donation.** An implementation that works in the buffer of an input (the softmax in
its logits' buffer, ReLU in its input's) declares that input in ``donates``; it is
chosen only where the caller says it gives the input up (``forward(..., donate=True)``).
``"dout"`` in ``donates`` means its backward works in the incoming gradient's buffer:
without ``backward(..., donate=True)`` the table gives it a copy. With the debug switch
on (``poison_donated()``, or ``SCRATCHFORMER_POISON_DONATED=1``), a donated input is
filled with NaN once the call has taken it, so a caller that reads it again sees NaN.

**The choice** (``OpTable.chosen``), for the active backend and the inputs' dtype:

    1. the reference, when forced everywhere (``reference()``, or
       ``SCRATCHFORMER_KERNELS=reference``);
    2. an implementation put in place with ``use(table, name)`` (a learner's backward,
       a check, a benchmark);
    3. for a composite (an op whose steps are other ops, ``Schema.parts``), whenever
       one of those has an implementation put in place: its ``composite`` entry (or its
       reference, where that is written through the tables), which calls the steps
       through their tables; so a learner's softmax is reached through every attention
       even where a fused core would be chosen;
    4. the first registered default that runs on the backend and dtype, is proven, and
       whose donated inputs the caller gave up;
    5. else the reference.

An implementation that has never run on its device (a CUDA kernel written without a
GPU) is registered with ``proven=False``: it is never chosen by default until a run on
that device has shown it equal to its reference.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from scratchformer import backend
from scratchformer.errors import ScratchformerError

REFERENCE = "reference"
COMPOSITE = "composite"
BACKENDS = ("numpy", "cupy")
DTYPES = ("float32", "float64")
#: the values SCRATCHFORMER_KERNELS may take ("" or unset: the defaults)
SWITCH_VALUES = ("reference", "default")


class KernelError(ScratchformerError, ValueError):
    """An implementation asked for that the table does not hold or cannot run here."""


@dataclass(frozen=True)
class Schema:
    """What an op takes and gives, by name.

    inputs      the forward's arguments, in order ("Z", "V", "mask", ...)
    gradients   what the backward returns, in order ("dZ", "dV")
    accessors   what code outside an implementation may read from a cache
    donatable   the inputs a caller gives up with ``forward(..., donate=True)``
    parts       a composite's steps: the tables its ``composite`` entry calls
    writes      an update (no backward): the inputs it writes, by contract
    """

    inputs: tuple
    gradients: tuple = ()
    accessors: tuple = ()
    donatable: tuple = ()
    parts: tuple = ()
    writes: tuple = ()

    @property
    def is_update(self) -> bool:
        return bool(self.writes)


@dataclass(frozen=True)
class Implementation:
    """A forward/backward pair of an op (an update: ``forward`` alone)."""

    name: str
    forward: Callable
    backward: Callable | None = None
    backends: tuple = BACKENDS  # the backends it runs on
    dtypes: tuple = DTYPES  # the floating dtypes it takes
    default: bool = False  # chosen without being asked for, where it runs
    proven: bool = True  # has run on every backend it names and equalled the reference
    exact: bool = False  # bitwise equal to the reference (the same operations in order)
    note: str = ""  # what it does differently (in place, fused, ...)
    # the inputs it works in ("dout": the backward's incoming gradient): chosen only
    # where the caller donates them
    donates: tuple = ()
    # its backward writes over its own cache: one backward per cache (its accessors
    # read only what that backward leaves alone)
    consumes_cache: bool = False
    # (target, dout, cache): add the gradient into ``target`` without making it first
    backward_into: Callable | None = None
    # name -> f(cache): the schema's accessors, for this implementation's caches
    accessors: dict = field(default_factory=dict)

    def runs_on(self, backend_name: str, dtype: str | None = None) -> bool:
        return backend_name in self.backends and (dtype is None or dtype in self.dtypes)

    @property
    def forward_donates(self) -> tuple:
        return tuple(d for d in self.donates if d != "dout")


class OpCache:
    """A cache made by ``OpTable.forward``: the implementation that made it and its own
    cache (``value``), which only that implementation reads."""

    __slots__ = ("impl", "value", "spent")

    def __init__(self, impl: Implementation, value):
        self.impl = impl
        self.value = value
        self.spent = False  # a backward has written over it

    def __repr__(self) -> str:
        return f"<cache of {self.impl.name}{' (spent)' if self.spent else ''}>"


# -- global switches -------------------------------------------------------------------
def _env_switch() -> bool:
    value = os.environ.get("SCRATCHFORMER_KERNELS", "")
    if value and value not in SWITCH_VALUES:
        raise KernelError(
            f"SCRATCHFORMER_KERNELS={value!r} is not a setting: expected one of "
            f"{', '.join(SWITCH_VALUES)} (or unset)"
        )
    return value == REFERENCE


#: why SCRATCHFORMER_KERNELS could not be read (the command line refuses to start on it)
env_error: KernelError | None = None
try:
    _reference_env = _env_switch()
except KernelError as e:
    env_error, _reference_env = e, False

_state = {
    "reference": _reference_env,
    "poison": os.environ.get("SCRATCHFORMER_POISON_DONATED", "") not in ("", "0"),
    "epoch": 0,  # bumped by every change that can change a choice
}


def _changed() -> None:
    _state["epoch"] += 1


def _dtype_of(args) -> str | None:
    """The floating dtype of the first floating array among ``args`` (None: none)."""
    for a in args:
        dt = getattr(a, "dtype", None)
        if dt is not None and dt.kind == "f":
            return dt.name
    return None


def _poisoned(value):
    """A copy of ``value`` for the call, and ``value`` filled with NaN (a donated input
    under the debug switch)."""
    if not backend.is_array(value) or value.dtype.kind != "f":
        return value
    copy = value.copy()
    value.fill(float("nan"))
    return copy


# -- the table ---------------------------------------------------------------------------
@dataclass(eq=False)
class OpTable:
    """The implementations of one op: ``reference`` first, then the registered ones."""

    name: str
    schema: Schema
    reference: Implementation
    cases: Callable | None = None  # cases(r, dtype) -> [Case]: the parity inputs
    entries: dict = field(default_factory=dict)  # name -> Implementation, in order
    override: Implementation | None = None  # set by ``use``
    tables: dict | None = None  # every table, by name (to see a composite's parts)
    _memo: dict = field(default_factory=dict)  # (backend, dtype, donate, forced) -> choice
    _epoch: int = -1  # the switches' epoch the memo was made in

    # -- registration ----------------------------------------------------------------------
    def register(self, impl: Implementation) -> Implementation:
        if impl.name == REFERENCE or impl.name in self.entries:
            raise KernelError(f"{self.name}: an implementation named {impl.name!r} exists")
        if impl.default and not impl.proven:
            raise KernelError(f"{self.name}: {impl.name!r} is not proven, so not a default")
        if self.schema.is_update != (impl.backward is None):
            raise KernelError(
                f"{self.name}: {impl.name!r} must "
                + ("have no backward (an update)" if self.schema.is_update else "have a backward")
            )
        missing = [a for a in self.schema.accessors if a not in impl.accessors]
        if missing:
            raise KernelError(f"{self.name}: {impl.name!r} lacks the accessors {missing}")
        unknown = [d for d in impl.forward_donates if d not in self.schema.donatable]
        if unknown:
            raise KernelError(
                f"{self.name}: {impl.name!r} works in {unknown}, which callers cannot donate "
                f"(donatable: {list(self.schema.donatable)})"
            )
        self.entries[impl.name] = impl
        _changed()
        return impl

    def unregister(self, name: str) -> None:
        self.entries.pop(name, None)
        if self.override is not None and self.override.name == name:
            self.override = None
        _changed()

    def implementations(self) -> list[Implementation]:
        """The reference and every registered implementation, in order."""
        return [self.reference, *self.entries.values()]

    def get(self, name: str) -> Implementation:
        for impl in self.implementations():
            if impl.name == name:
                return impl
        names = ", ".join(i.name for i in self.implementations())
        raise KernelError(f"{self.name} has no implementation {name!r} (it has: {names})")

    # -- the choice ------------------------------------------------------------------------
    def default_for(self, backend_name: str, dtype: str = "float32", donate: bool = True):
        """What is chosen on ``backend_name`` for ``dtype`` inputs when nothing is forced
        or put in place (``donate``: the caller gives up the inputs it may)."""
        for impl in self.entries.values():
            if (
                impl.default
                and impl.proven
                and impl.runs_on(backend_name, dtype)
                and (donate or not impl.forward_donates)
            ):
                return impl
        return self.reference

    def _part_in_place(self) -> bool:
        return any(
            self.tables[p].override is not None for p in self.schema.parts if p in self.tables
        )

    def chosen(self, dtype: str | None = None, donate: bool = True) -> Implementation:
        """The implementation a call with ``dtype`` inputs runs now (``donate``: the
        caller gives up its inputs)."""
        if self._epoch != _state["epoch"]:
            self._memo.clear()
            self._epoch = _state["epoch"]
        key = (backend.backend_name(), dtype, donate, _state["reference"])
        impl = self._memo.get(key)
        if impl is None:
            impl = self._memo[key] = self._choose(key[0], dtype or "float32", donate)
        return impl

    def _choose(self, backend_name: str, dtype: str, donate: bool) -> Implementation:
        if _state["reference"]:
            return self.reference
        if self.override is not None:
            return self.override
        if self.schema.parts and self._part_in_place():
            return self.entries.get(COMPOSITE, self.reference)
        return self.default_for(backend_name, dtype, donate)

    # -- calls -----------------------------------------------------------------------------
    def forward(self, *args, donate: bool = False, **kwargs):
        """``(out, OpCache)`` of the chosen implementation; ``donate=True``: the caller
        gives up the inputs the op may work in (it never reads them again)."""
        impl = self.chosen(_dtype_of(args), donate)
        return self.run_forward(impl, args, kwargs, donate)

    def run_forward(self, impl: Implementation, args, kwargs, donate: bool):
        """``impl``'s forward, under the donation rules (and the debug switch)."""
        if donate and _state["poison"]:
            args = self._poison_args(args)
        out, value = impl.forward(*args, **kwargs)
        return out, OpCache(impl, value)

    def _poison_args(self, args):
        names = self.schema.inputs
        return tuple(
            _poisoned(a) if i < len(names) and names[i] in self.schema.donatable else a
            for i, a in enumerate(args)
        )

    def backward(self, dout, cache: OpCache, *more, donate: bool = False):
        """The gradients of the inputs, by the implementation that made ``cache``;
        ``donate=True``: the caller gives up ``dout``."""
        impl, value = self._open(cache)
        dout = self._dout(impl, dout, donate)
        grads = impl.backward(dout, value, *more)
        if impl.consumes_cache:
            cache.spent = True
        return grads

    def backward_into(self, target, dout, cache: OpCache) -> None:
        """``target += backward(dout, cache)``, by the implementation's own way of adding
        into a buffer where it has one (no gradient-sized temporary)."""
        impl, value = self._open(cache)
        if impl.backward_into is not None:
            impl.backward_into(target, dout, value)
        else:
            target += impl.backward(dout, value)

    def update(self, *args, **kwargs) -> None:
        """An update op (Adam's): the chosen implementation writes the inputs the schema
        names in ``writes``."""
        self.chosen(_dtype_of(args)).forward(*args, **kwargs)

    def read(self, accessor: str, cache: OpCache):
        """What the schema's ``accessor`` gives of ``cache`` (e.g. the attention weights)."""
        if accessor not in self.schema.accessors:
            raise KernelError(f"{self.name} declares no accessor {accessor!r}")
        impl, value = self._open(cache, reading=True)
        return impl.accessors[accessor](value)

    def accessor(self, name: str) -> Callable:
        """``read`` bound to ``name``: ``weights = table.accessor("weights")``."""
        if name not in self.schema.accessors:
            raise KernelError(f"{self.name} declares no accessor {name!r}")
        return lambda cache: self.read(name, cache)

    def _open(self, cache, reading: bool = False):
        if not isinstance(cache, OpCache):
            raise KernelError(
                f"{self.name}: expected the cache that {self.name}'s forward returned, "
                f"got a {type(cache).__name__}"
            )
        if cache.spent and not reading:  # accessors read what a backward leaves alone
            raise ValueError(
                f"this {self.name} cache was spent by a backward that wrote over it: run "
                "the forward again"
            )
        return cache.impl, cache.value

    @staticmethod
    def _dout(impl: Implementation, dout, donate: bool):
        if donate and _state["poison"]:
            return _poisoned(dout)
        if "dout" in impl.donates and not donate and backend.is_array(dout):
            return dout.copy()
        return dout


#: every table, by op name
TABLES: dict[str, OpTable] = {}


def new_table(name: str, schema: Schema, forward, backward=None, cases=None, **reference):
    """The table of the op ``name``, its reference pair first (``reference``: more
    fields of that Implementation, its accessors); listed in ``TABLES``."""
    if name in TABLES:
        raise KernelError(f"a table named {name!r} exists")
    ref = Implementation(REFERENCE, forward, backward, **reference)
    table = OpTable(name, schema, ref, cases, tables=TABLES)
    missing = [a for a in schema.accessors if a not in ref.accessors]
    if missing:
        raise KernelError(f"{name}: the reference lacks the accessors {missing}")
    TABLES[name] = table
    return table


# -- switches ----------------------------------------------------------------------------
@contextlib.contextmanager
def reference():
    """Force the reference ops of ops/ everywhere (teaching, debugging, parity checks)."""
    old = _state["reference"]
    _state["reference"] = True
    try:
        yield
    finally:
        _state["reference"] = old


def set_reference(on: bool) -> None:
    """Force (True) or release (False) the reference ops everywhere."""
    _state["reference"] = bool(on)


def reference_forced() -> bool:
    """True while the reference ops are forced everywhere."""
    return _state["reference"]


@contextlib.contextmanager
def poison_donated(on: bool = True):
    """The debug switch: while on, every input a caller donates is filled with NaN once
    the call has taken it (the call works on a copy), so that reading it again shows."""
    old = _state["poison"]
    _state["poison"] = bool(on)
    try:
        yield
    finally:
        _state["poison"] = old


def poisoning() -> bool:
    """True while donated inputs are filled with NaN after use."""
    return _state["poison"]


@contextlib.contextmanager
def use(table: OpTable, name: str):
    """Put the implementation ``name`` of ``table`` in place for the duration; it must
    run on the active backend."""
    impl = table.get(name)
    if not impl.runs_on(backend.backend_name()):
        raise KernelError(
            f"{table.name}: {name!r} runs on {', '.join(impl.backends)}, "
            f"not on {backend.backend_name()}"
        )
    old, table.override = table.override, impl
    _changed()
    try:
        yield impl
    finally:
        table.override = old
        _changed()


__all__ = [
    "BACKENDS",
    "COMPOSITE",
    "DTYPES",
    "REFERENCE",
    "Implementation",
    "KernelError",
    "OpCache",
    "OpTable",
    "Schema",
    "TABLES",
    "env_error",
    "new_table",
    "poison_donated",
    "poisoning",
    "reference",
    "reference_forced",
    "set_reference",
    "use",
]
