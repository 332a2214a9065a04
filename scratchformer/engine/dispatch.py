"""The dispatcher: each op's table, and the choice of what a call runs.

Every op of the engine has one table, made at the bottom of the op's file in ops/: its
**reference** pair (the readable forward and backward at the top of that file) and the
faster **implementations** written below it. Modules call the table:

    out, cache = layernorm.forward(x, gamma, beta, eps)
    dx, dgamma, dbeta = layernorm.backward(dout, cache)

**The choice**, for the active backend and the dtype of the call's first floating input:

    1. the reference, when forced everywhere (``reference()``, or the environment's
       ``SCRATCHFORMER_KERNELS=reference``);
    2. an implementation put in place with ``use(op, name)`` (a learner's backward, a
       check, a benchmark);
    3. the first registered default that runs on that backend and dtype, is proven, and
       works in no input the caller did not give up;
    4. else the reference.

**Caches are opaque.** ``forward`` wraps the implementation's cache in a ``Cache`` that
records which implementation made it, and ``backward`` hands it back to that one,
whatever would be chosen by then. What code outside an op may read of a cache (the
attention weights for a plot, the loss's token count) the op declares as an accessor,
read with ``op.read(cache, name)``. A backward written for one forward (a learner's,
paired with the reference's) may read that forward's fields through the ``Cache``.

**Composites.** An op whose reference calls other ops through their tables (the
attention core: softmax and dropout; Add & Norm's exit: dropout and layer norm) names
them in ``parts``. ``use()`` of a part puts every composite's reference in place too, so
the part runs wherever the composite does (a learner's softmax in every attention).

**Donation.** An implementation that works in the buffer of an input (the softmax in its
logits', ReLU in its input's) names it in ``donates``; it is chosen only where the caller
gives that input up (``forward(..., donate=True)``). ``"dout"`` in ``donates``: its
backward works in the incoming gradient's buffer, which the table copies unless the
caller gives it up (``backward(..., donate=True)``). With the debug switch on
(``poison_donated()``, or ``SCRATCHFORMER_POISON_DONATED=1``) a donated input is filled
with NaN once the call has taken it, so a caller that reads it again sees NaN.

**Proven.** A form that has never run on its device (a CUDA kernel written without a
GPU) is registered ``proven=False``: never a default until a run there has shown it equal
to its reference (scratchformer/engine/parity.py).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from scratchformer.engine import backend
from scratchformer.engine.errors import ScratchformerError

REFERENCE = "reference"
BACKENDS = ("numpy", "cupy")
DTYPES = ("float32", "float64")
#: the values SCRATCHFORMER_KERNELS may take ("" or unset: the defaults)
SWITCH_VALUES = ("reference", "default")


class KernelError(ScratchformerError, ValueError):
    """An implementation asked for that a table does not hold or cannot run here."""


@dataclass(frozen=True)
class Implementation:
    """One forward/backward pair of an op."""

    name: str
    forward: Callable
    backward: Callable
    backends: tuple = BACKENDS  # where it runs
    dtypes: tuple = DTYPES  # the floating dtypes it takes
    default: bool = False  # chosen without being asked for, where it runs
    proven: bool = True  # has run on every backend it names and equalled the reference
    exact: bool = False  # bitwise equal to the reference (the same operations in order)
    donates: tuple = ()  # the inputs it works in ("dout": its backward's incoming gradient)
    accessors: dict = field(default_factory=dict)  # name -> f(its cache)
    backward_into: Callable | None = None  # (target, dout, cache): target += gradient
    note: str = ""  # what it does differently

    def runs_on(self, backend_name: str, dtype: str | None = None) -> bool:
        return backend_name in self.backends and (dtype is None or dtype in self.dtypes)


class Cache:
    """What ``Op.forward`` returns as the cache: the implementation that made it and its
    own cache (``value``). Attribute reads fall through to ``value``'s fields."""

    __slots__ = ("impl", "value")

    def __init__(self, impl: Implementation, value):
        self.impl, self.value = impl, value

    def __getattr__(self, name):
        return getattr(object.__getattribute__(self, "value"), name)


_switch = os.environ.get("SCRATCHFORMER_KERNELS", "")
#: why SCRATCHFORMER_KERNELS could not be read (the command line refuses to start on it)
env_error = None if _switch in ("", *SWITCH_VALUES) else KernelError(
    f"SCRATCHFORMER_KERNELS={_switch!r} is not a setting: expected one of "
    f"{', '.join(SWITCH_VALUES)} (or unset)")
_state = {"reference": _switch == REFERENCE,
          "poison": os.environ.get("SCRATCHFORMER_POISON_DONATED", "") not in ("", "0")}

#: every op's table, by op name
TABLES: dict[str, Op] = {}


class Op:
    """The table of one op: its reference, then the implementations registered after it.

    ``inputs`` and ``gradients`` name the forward's arguments and the backward's results
    in order; ``accessors`` the reference's readers of its cache (every implementation
    provides the same names); ``donatable`` the inputs a caller may give up; ``parts``
    the ops a composite's reference calls through their tables; ``cases(r, dtype)`` the
    inputs the implementations are checked on (scratchformer/engine/parity.py).
    """

    def __init__(self, name, forward, backward, *, inputs, gradients, accessors=None,
                 donatable=(), parts=(), cases=None):
        if name in TABLES:
            raise KernelError(f"a table named {name!r} exists")
        self.name, self.inputs, self.gradients = name, tuple(inputs), tuple(gradients)
        self.donatable, self.parts, self.cases = tuple(donatable), tuple(parts), cases
        self.reference = Implementation(REFERENCE, forward, backward, accessors=accessors or {})
        self.entries: dict[str, Implementation] = {}
        self.override: Implementation | None = None  # set by ``use``
        self._memo: dict = {}  # (backend, dtype, donate) -> the choice
        TABLES[name] = self

    # -- registration ----------------------------------------------------------------------
    def register(self, name: str, forward, backward, **fields) -> Implementation:
        """Add the implementation ``name`` (``fields``: those of ``Implementation``)."""
        impl = Implementation(name, forward, backward, **fields)
        if name == REFERENCE or name in self.entries:
            raise KernelError(f"{self.name}: an implementation named {name!r} exists")
        if impl.default and not impl.proven:
            raise KernelError(f"{self.name}: {name!r} is not proven, so not a default")
        missing = [a for a in self.reference.accessors if a not in impl.accessors]
        if missing:
            raise KernelError(f"{self.name}: {name!r} lacks the accessors {missing}")
        unknown = [d for d in impl.donates if d != "dout" and d not in self.donatable]
        if unknown:
            raise KernelError(f"{self.name}: {name!r} works in {unknown}, which callers cannot "
                              f"donate (donatable: {list(self.donatable)})")
        self.entries[name] = impl
        self._memo.clear()
        return impl

    def unregister(self, name: str) -> None:
        self.entries.pop(name, None)
        if self.override is not None and self.override.name == name:
            self.override = None
        self._memo.clear()

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
    def default_for(self, backend_name: str, dtype: str, donate: bool = True) -> Implementation:
        """Rules 3 and 4: the first proven default for ``(backend_name, dtype)`` that works
        in no input the caller keeps (``donate``: it gives up what it may), else the
        reference."""
        for impl in self.entries.values():
            if (impl.default and impl.proven and impl.runs_on(backend_name, dtype)
                    and (donate or all(d == "dout" for d in impl.donates))):
                return impl
        return self.reference

    def chosen(self, dtype=None, donate: bool = True) -> Implementation:
        """What a call with ``dtype`` inputs (a dtype or its name; None: float32) runs now
        (the module doc's four rules)."""
        if _state["reference"]:
            return self.reference
        if self.override is not None:
            return self.override
        key = (backend.backend_name(), dtype, donate)
        impl = self._memo.get(key)
        if impl is None:
            name = dtype if isinstance(dtype, str) else getattr(dtype, "name", "float32")
            impl = self._memo[key] = self.default_for(key[0], name, donate)
        return impl

    # -- calls -----------------------------------------------------------------------------
    def forward(self, *args, donate: bool = False, **kwargs):
        """``(out, Cache)`` of the chosen implementation; ``donate=True``: the caller gives
        up the inputs the op may work in (it never reads them again)."""
        impl = self.chosen(_dtype_of(args), donate)
        if donate and _state["poison"]:
            args = self._poisoned_args(args)
        out, value = impl.forward(*args, **kwargs)
        return out, Cache(impl, value)

    def forward_with(self, impl: Implementation, args, kwargs, donate: bool = False):
        """``impl``'s forward under the donation rules (and the debug switch)."""
        if donate and _state["poison"]:
            args = self._poisoned_args(args)
        out, value = impl.forward(*args, **kwargs)
        return out, Cache(impl, value)

    def _poisoned_args(self, args):
        return tuple(_poisoned(a) if i < len(self.inputs) and self.inputs[i] in self.donatable
                     else a for i, a in enumerate(args))

    def backward(self, dout, cache: Cache, *more, donate: bool = False):
        """The gradients of the inputs, by the implementation that made ``cache``;
        ``donate=True``: the caller gives up ``dout``."""
        impl = self._made(cache)
        if donate and _state["poison"]:
            dout = _poisoned(dout)
        elif not donate and "dout" in impl.donates and backend.is_array(dout):
            dout = dout.copy()
        return impl.backward(dout, cache.value, *more)

    def backward_into(self, target, dout, cache: Cache) -> None:
        """``target += backward(dout, cache)``, without the gradient-sized temporary where
        the implementation can add into a buffer itself."""
        impl = self._made(cache)
        if impl.backward_into is not None:
            impl.backward_into(target, dout, cache.value)
        else:
            target += impl.backward(dout, cache.value)

    def read(self, cache: Cache, accessor: str):
        """What the op's ``accessor`` gives of ``cache`` (e.g. the attention weights)."""
        if accessor not in self.reference.accessors:
            raise KernelError(f"{self.name} declares no accessor {accessor!r}")
        return self._made(cache).accessors[accessor](cache.value)

    def _made(self, cache) -> Implementation:
        if not isinstance(cache, Cache):
            raise KernelError(f"{self.name}: expected the cache that {self.name}'s forward "
                              f"returned, got a {type(cache).__name__}")
        return cache.impl


def _dtype_of(args):
    """The dtype of the first floating array among ``args`` (None: none). The dtype
    object, not its ``name``: NumPy computes a dtype's name in Python, several
    microseconds a call."""
    for a in args:
        dt = getattr(a, "dtype", None)
        if dt is not None and dt.kind == "f":
            return dt
    return None


def _poisoned(value):
    """A copy of ``value`` for the call, and ``value`` filled with NaN."""
    if not backend.is_array(value) or value.dtype.kind != "f":
        return value
    copy = value.copy()
    value.fill(float("nan"))
    return copy


def table(name) -> Op:
    """The table of the op ``name`` (an ``Op`` is returned as it is)."""
    if isinstance(name, Op):
        return name
    try:
        return TABLES[name]
    except KeyError:
        raise KernelError(f"no op named {name!r}: expected one of {sorted(TABLES)}") from None


# -- switches ----------------------------------------------------------------------------
@contextlib.contextmanager
def use(op, name: str):
    """Put the implementation ``name`` of ``op`` (a table or its name) in place for the
    duration, and the reference of every composite that calls ``op``."""
    op = table(op)
    impl = op.get(name)
    if not impl.runs_on(backend.backend_name()):
        raise KernelError(f"{op.name}: {name!r} runs on {', '.join(impl.backends)}, "
                          f"not on {backend.backend_name()}")
    placed = [(op, impl)] + [(t, t.reference) for t in TABLES.values()
                             if op.name in t.parts and t.override is None]
    before = [(t, t.override) for t, _ in placed]
    for t, i in placed:
        t.override = i
    try:
        yield impl
    finally:
        for t, old in before:
            t.override = old


@contextlib.contextmanager
def _switched(key: str, on: bool):
    old, _state[key] = _state[key], on
    try:
        yield
    finally:
        _state[key] = old


def reference():
    """Force every op's reference for a ``with`` block (teaching, debugging, parity)."""
    return _switched("reference", True)


def reference_forced() -> bool:
    """True while the references are forced everywhere."""
    return _state["reference"]


def poison_donated(on: bool = True):
    """The debug switch for a ``with`` block: every input a caller donates is filled with
    NaN once the call has taken it (the call works on a copy), so a reuse shows."""
    return _switched("poison", bool(on))


__all__ = ["BACKENDS", "DTYPES", "REFERENCE", "TABLES", "Cache", "Implementation",
           "KernelError", "Op", "env_error", "poison_donated", "reference",
           "reference_forced", "table", "use"]
