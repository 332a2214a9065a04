"""The parity harness: every registered implementation against its table's reference, on
fresh random inputs (the ``cases`` of each op's file), per dtype it takes.

For each case both sides run on their own copies of the inputs, with the same dropout
draws, through the table's own call (so the donation rules hold: an implementation that
works in an input is given it as donated), under the debug switch that fills donated
inputs with NaN. Their outputs are compared, then both backward passes run on the same
random ``dout`` and each gradient is compared. Every input an implementation was not
given to keep (not donated) must be unchanged afterwards, ``dout`` included. One error
metric serves the whole project, per tensor:

    relative_error(a, b) = max|a - b| / max|b|       (max|a - b| when b is all zeros)

An implementation registered as exact must be bitwise equal (error 0); the others may
differ from the reference by twice as much as the reference itself differs from exact
arithmetic: its error in the case's dtype against its float64 result on the same inputs
(the case's **baseline**), and at least ``TOLERANCE[dtype]``. A case with dropout takes
the largest baseline of the op's cases without (its float64 run would draw other masks).
While a table is checked, the tables its implementations call (a composite's parts) run
their references. This checks agreement with the
reference; that the reference's gradients are right is the finite-difference tests'
job (the op gradient tests run every registered implementation too).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from scratchformer.engine import backend, device
from scratchformer.engine.backend import np
from scratchformer.engine.dispatch import Op, poison_donated, reference
from scratchformer.engine.ops.cases import Seed

#: the least relative error an inexact implementation is allowed, per dtype (the limit is
#: twice the reference's own error against float64 where that is more)
TOLERANCE = {"float16": 2e-3, "float32": 1e-5, "float64": 1e-12}


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
    tensor: str  # "out", a gradient's name ("dQ", ...) or "x unchanged"
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


def _kept(table: Op, args, kwargs, before, before_kw, donate: bool) -> list:
    """``(name, after, before)`` of every input array the implementation must not
    have written (not donated to it)."""
    names = table.inputs
    given = set(table.donatable) if donate else set()
    found = []
    for i, (a, b) in enumerate(zip(args, before)):
        name = names[i] if i < len(names) else f"arg{i}"
        if backend.is_array(a) and name not in given:
            found.append((f"{name} unchanged", a, b))
    for k, a in kwargs.items():
        if backend.is_array(a) and k not in given:
            found.append((f"{k} unchanged", a, before_kw[k]))
    return found


def _run(table: Op, impl, case, dout):
    """One side: forward (and backward on ``dout``) through the table's own calls.
    Returns (output, gradients, inputs that must be unchanged)."""
    args = tuple(_fresh(a) for a in case.args)
    kwargs = {k: _fresh(v) for k, v in case.kwargs.items()}
    before = [copy.deepcopy(a) if backend.is_array(a) else a for a in args]
    before_kw = {k: copy.deepcopy(v) for k, v in kwargs.items() if backend.is_array(v)}
    donate = any(d != "dout" for d in impl.donates)
    out, cache = table.forward_with(impl, args, kwargs, donate)
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
            for name, a, b in kept]


def _random(case) -> bool:
    """Whether the case draws dropout masks."""
    return any(isinstance(v, Seed) for v in (*case.args, *case.kwargs.values()))


def _as64(value):
    if backend.is_array(value) and value.dtype.kind == "f":
        return value.astype(np.float64)
    return value


def _tensors(table, case, dout) -> dict:
    """``{tensor name: array}`` of the reference on the case."""
    out, grads, _ = _run(table, table.reference, case, dout)
    found = {"out": out}
    found.update({n: g for n, g in zip(table.gradients, grads) if g is not None})
    return found


def baseline(table: Op, case, dout) -> dict:
    """``{tensor: error}`` of the reference in the case's dtype against its float64 run on
    the same inputs: what rounding alone does to the op."""
    low = _tensors(table, case, dout)
    args = tuple(map(_as64, case.args))
    case64 = type(case)(case.label, args, {k: _as64(v) for k, v in case.kwargs.items()})
    high = _tensors(table, case64, _as64(dout))
    return {k: relative_error(low[k], high[k]) for k in low if k in high}


def _dout(table: Op, case, dtype: str, r):
    """A random incoming gradient the shape of the reference's output."""
    out, _, _ = _run(table, table.reference, case, None)
    return backend.asarray(r.standard_normal(np.shape(backend.asnumpy(out))), dtype=dtype)


def _baselines(table: Op, cases: list, dtype: str) -> dict:
    """``{case label: {tensor: error}}`` for the cases without dropout; the others get
    the largest of those per tensor."""
    if dtype == "float64":
        return {}
    base = {c.label: baseline(table, c, d) for c, d in cases if not _random(c)}
    largest: dict = {}
    for errors in base.values():
        for k, e in errors.items():
            largest[k] = max(largest.get(k, 0.0), e)
    return {c.label: base.get(c.label, largest) for c, _ in cases}


def check_implementation(table: Op, name: str, dtype: str, seed: int = 0) -> list[Row]:
    """Rows for every case of ``table``'s implementation ``name`` against the reference."""
    impl = table.get(name)
    r = np.random.default_rng(seed)
    rows = []
    with reference(), poison_donated():  # the parts run their references
        cases = [(case, _dout(table, case, dtype, r)) for case in table.cases(r, dtype)]
        base = {} if impl.exact else _baselines(table, cases, dtype)
        for case, dout in cases:
            errors = base.get(case.label, {})

            def row(tensor, err, limit=None, errors=errors, label=case.label):
                if limit is None:
                    floor = TOLERANCE[dtype]
                    limit = 0.0 if impl.exact else max(floor, 2 * errors.get(tensor, 0.0))
                return Row(table.name, name, dtype, label, tensor, err, limit)

            rows += _check_case(table, impl, case, dout, row)
    return rows


def _check_case(table, impl, case, dout, row) -> list[Row]:
    out_ref, grads_ref, _ = _run(table, table.reference, case, dout)
    out, grads, kept = _run(table, impl, case, dout)
    names = table.gradients
    found = [("out", out, out_ref)]
    for i, (got, want) in enumerate(zip(grads, grads_ref)):
        if want is not None:
            found.append((names[i] if i < len(names) else f"d{i}", got, want))
    if len(grads) != len(grads_ref):  # a backward that returns too few or too many
        found.append(("gradients", np.zeros(len(grads)), np.zeros(len(grads_ref))))
    if impl.backward_into is not None:  # adding into a buffer: zeros + it = backward
        args = tuple(_fresh(a) for a in case.args)
        kwargs = {k: _fresh(v) for k, v in case.kwargs.items()}
        _, cache = table.forward_with(impl, args, kwargs, False)
        into = backend.xp.zeros_like(grads_ref[0])
        table.backward_into(into, copy.deepcopy(dout), cache)
        found.append((f"{names[0] if names else 'd0'} (into)", into, grads_ref[0]))
    rows = [
        row(tensor, relative_error(got, want) if got is not None else float("inf"))
        for tensor, got, want in found
    ]
    return rows + _kept_rows(kept, lambda n, e: row(n, e, 0.0))


def check_all(tables: dict, dtypes=("float16", "float32", "float64"), every=False) -> list[Row]:
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
