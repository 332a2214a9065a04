"""The parity harness: every registered implementation against its table's reference, on
fresh random inputs (each op module's ``cases``), per dtype it takes.

For each case both sides run on their own copies of the inputs, with the same dropout
draws, through the table's own call (so the donation rules hold: an implementation that
works in an input is given it as donated), under the debug switch that fills donated
inputs with NaN. Their outputs are compared, then both backward passes run on the same
random ``dout`` and each gradient is compared (an update: each array it writes). Every
input an implementation was not given to keep (not donated, not written by an update's
contract) must be unchanged afterwards, ``dout`` included. One error metric serves the
whole project, per tensor:

    relative_error(a, b) = max|a - b| / max|b|       (max|a - b| when b is all zeros)

An implementation registered as exact must be bitwise equal (error 0); the others must
be within ``TOLERANCE[dtype]``. While a table is checked, the tables its implementations
call (a composite's parts) run their references. This checks agreement with the
reference; that the reference's gradients are right is the finite-difference tests'
job (the op gradient tests run every registered implementation too).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from scratchformer import backend, device
from scratchformer.backend import np
from scratchformer.kernels.cases import Seed
from scratchformer.kernels.table import OpTable, poison_donated, reference

#: the largest relative error an inexact implementation may show, per dtype
TOLERANCE = {"float32": 1e-5, "float64": 1e-12}


def relative_error(a, b) -> float:
    """``max|a - b| / max|b|`` over the whole tensor (``max|a - b|`` when b is zero)."""
    a = np.asarray(backend.asnumpy(a), dtype=np.float64)
    b = np.asarray(backend.asnumpy(b), dtype=np.float64)
    if a.shape != b.shape:
        return float("inf")
    if a.size == 0:
        return 0.0
    diff = float(np.max(np.abs(a - b)))
    scale = float(np.max(np.abs(b)))
    return diff / scale if scale > 0 else diff


@dataclass
class Row:
    """One tensor of one case: an output, a gradient, or an input that must not change."""

    table: str
    implementation: str
    dtype: str
    case: str
    tensor: str  # "out", a gradient's name ("dQ", ...), "theta" or "x unchanged"
    error: float
    limit: float  # the error allowed (0: bitwise)

    @property
    def passed(self) -> bool:
        return self.error <= self.limit


def _fresh(value):
    """A copy of a case's input for one run (Seed -> a new generator)."""
    if isinstance(value, Seed):
        return device.generator(value.n, counter=value.counter)
    return copy.deepcopy(value) if backend.is_array(value) else value


def _as_tuple(grads):
    return grads if isinstance(grads, tuple) else (grads,)


def _kept(table: OpTable, args, kwargs, before, before_kw, donate: bool) -> list:
    """``(name, after, before)`` of every input array the implementation must not
    have written: not donated to it, not written by an update's contract."""
    names = table.schema.inputs
    given = set(table.schema.writes) | (set(table.schema.donatable) if donate else set())
    found = []
    for i, (a, b) in enumerate(zip(args, before)):
        name = names[i] if i < len(names) else f"arg{i}"
        if backend.is_array(a) and name not in given:
            found.append((f"{name} unchanged", a, b))
    for k, a in kwargs.items():
        if backend.is_array(a) and k not in given:
            found.append((f"{k} unchanged", a, before_kw[k]))
    return found


def _run(table: OpTable, impl, case, dout):
    """One side: forward (and backward on ``dout``) through the table's own calls.
    Returns (output, gradients, inputs that must be unchanged)."""
    args = tuple(_fresh(a) for a in case.args)
    kwargs = {k: _fresh(v) for k, v in case.kwargs.items()}
    before = [copy.deepcopy(a) if backend.is_array(a) else a for a in args]
    before_kw = {k: copy.deepcopy(v) for k, v in kwargs.items() if backend.is_array(v)}
    donate = bool(impl.forward_donates)
    if table.schema.is_update:
        impl.forward(*args, **kwargs)
        written = {n: a for n, a in zip(table.schema.inputs, args) if n in table.schema.writes}
        return written, (), _kept(table, args, kwargs, before, before_kw, False)
    out, cache = table.run_forward(impl, args, kwargs, donate)
    kept = _kept(table, args, kwargs, before, before_kw, donate)
    if dout is None:
        return out, None, kept
    d = copy.deepcopy(dout)
    grads = _as_tuple(table.backward(d, cache))
    if "dout" not in impl.donates and backend.is_array(d):
        kept.append(("dout unchanged", d, dout))
    return out, grads, kept


def _kept_rows(kept, make_row) -> list:
    return [make_row(name, 0.0 if np.array_equal(backend.asnumpy(a), backend.asnumpy(b))
                     else float("inf"))
            for name, a, b in kept]  # fmt: skip


def check_implementation(table: OpTable, name: str, dtype: str, seed: int = 0) -> list[Row]:
    """Rows for every case of ``table``'s implementation ``name`` against the reference."""
    impl = table.get(name)
    limit = 0.0 if impl.exact else TOLERANCE[dtype]
    r = np.random.default_rng(seed)
    rows = []
    with reference(), poison_donated():  # the parts run their references
        for case in table.cases(r, dtype):

            def row(tensor, err, limit=limit, label=case.label):
                return Row(table.name, name, dtype, label, tensor, err, limit)

            rows += _check_case(table, impl, case, dtype, r, row)
    return rows


def _check_case(table, impl, case, dtype, r, row) -> list[Row]:
    if table.schema.is_update:
        want, _, _ = _run(table, table.reference, case, None)
        got, _, kept = _run(table, impl, case, None)
        rows = [row(k, relative_error(got[k], want[k])) for k in want]
        return rows + _kept_rows(kept, lambda n, e: row(n, e, 0.0))
    out_ref, _, _ = _run(table, table.reference, case, None)
    shape = np.shape(backend.asnumpy(out_ref))
    dout = backend.asarray(r.standard_normal(shape), dtype=dtype)
    out_ref, grads_ref, _ = _run(table, table.reference, case, dout)
    out, grads, kept = _run(table, impl, case, dout)
    names = table.schema.gradients
    found = [("out", out, out_ref)]
    for i, (got, want) in enumerate(zip(grads, grads_ref)):
        if want is not None:
            found.append((names[i] if i < len(names) else f"d{i}", got, want))
    if len(grads) != len(grads_ref):  # a backward that returns too few or too many
        found.append(("gradients", np.zeros(len(grads)), np.zeros(len(grads_ref))))
    if impl.backward_into is not None:  # adding into a buffer: zeros + it = backward
        args = tuple(_fresh(a) for a in case.args)
        kwargs = {k: _fresh(v) for k, v in case.kwargs.items()}
        _, cache = table.run_forward(impl, args, kwargs, False)
        into = backend.xp.zeros_like(grads_ref[0])
        table.backward_into(into, copy.deepcopy(dout), cache)
        found.append((f"{names[0] if names else 'd0'} (into)", into, grads_ref[0]))
    rows = [
        row(tensor, relative_error(got, want) if got is not None else float("inf"))
        for tensor, got, want in found
    ]
    return rows + _kept_rows(kept, lambda n, e: row(n, e, 0.0))


def check_all(tables: dict, dtypes=("float32", "float64"), every=False) -> list[Row]:
    """Rows for every registered implementation (with ``every``, the reference against
    itself too) that runs on the active backend, per dtype it takes."""
    rows = []
    for table in tables.values():
        for impl in table.implementations():
            if impl is table.reference and not every:
                continue
            for dtype in dtypes:
                if impl.runs_on(backend.backend_name(), dtype):
                    rows += check_implementation(table, impl.name, dtype)
    return rows


def summary(rows: list[Row]) -> list[tuple]:
    """``(table, implementation, dtype, tensor, largest error, limit, passed)`` per tensor
    name: the largest error over the cases."""
    worst: dict = {}
    for row in rows:
        key = (row.table, row.implementation, row.dtype, row.tensor)
        err, limit, ok = worst.get(key, (0.0, row.limit, True))
        worst[key] = (max(err, row.error), limit, ok and row.passed)
    return [(*key, *value) for key, value in worst.items()]


__all__ = ["TOLERANCE", "Row", "check_all", "check_implementation", "relative_error", "summary"]
