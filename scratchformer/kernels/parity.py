"""The parity harness: every registered implementation against its table's reference, on
fresh random inputs (kernels/cases.py), in float32 and float64.

For each case both pairs run on their own copies of the inputs (an implementation may
work in their buffers), with the same dropout draws; their outputs are compared, then
both backward passes run on the same random ``dout`` and each gradient is compared. One
error metric serves the whole project, per tensor:

    relative_error(a, b) = max|a - b| / max|b|       (max|a - b| when b is all zeros)

An implementation registered as exact must be bitwise equal (error 0); the others must
be within ``TOLERANCE[dtype]``. This checks agreement with the reference; that the
reference's gradients are right is the finite-difference tests' job (the op gradient
tests run every registered implementation too).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from scratchformer import backend, device
from scratchformer.backend import np
from scratchformer.kernels.cases import CASES, GRADIENTS, Seed
from scratchformer.kernels.table import OpTable

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
    """One tensor of one case: an output or a gradient."""

    table: str
    implementation: str
    dtype: str
    case: str
    tensor: str  # "out", or the gradient's name ("dQ", ...)
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


def _run(impl, case, dout):
    args = tuple(_fresh(a) for a in case.args)
    kwargs = {k: _fresh(v) for k, v in case.kwargs.items()}
    out, cache = impl.forward(*args, **kwargs)
    if dout is None:
        return out, None
    grads = impl.backward(copy.deepcopy(dout), cache)
    return out, _as_tuple(grads)


def check_implementation(table: OpTable, name: str, dtype: str, seed: int = 0) -> list[Row]:
    """Rows for every case of ``table``'s implementation ``name`` against the reference."""
    impl = table.get(name)
    limit = 0.0 if impl.exact else TOLERANCE[dtype]
    r = np.random.default_rng(seed)
    rows = []
    for case in CASES[table.name](r, dtype):
        out_ref, _ = _run(table.reference, case, None)
        dout = backend.asarray(r.standard_normal(np.shape(backend.asnumpy(out_ref))), dtype=dtype)
        out_ref, grads_ref = _run(table.reference, case, dout)
        out, grads = _run(impl, case, dout)
        names = GRADIENTS.get(table.name, ())
        found = [("out", out, out_ref)]
        for i, (got, want) in enumerate(zip(grads, grads_ref)):
            if want is not None:
                found.append((names[i] if i < len(names) else f"d{i}", got, want))
        if len(grads) != len(grads_ref):  # a backward that returns too few or too many
            found.append(("gradients", np.zeros(len(grads)), np.zeros(len(grads_ref))))
        if impl.backward_into is not None:  # adding into a buffer: zeros + it = backward
            args = tuple(_fresh(a) for a in case.args)
            _, cache = impl.forward(*args, **{k: _fresh(v) for k, v in case.kwargs.items()})
            into = backend.xp.zeros_like(grads_ref[0])
            impl.backward_into(into, copy.deepcopy(dout), cache)
            found.append((f"{names[0] if names else 'd0'} (into)", into, grads_ref[0]))
        for tensor, got, want in found:
            err = relative_error(got, want) if got is not None else float("inf")
            rows.append(Row(table.name, name, dtype, case.label, tensor, err, limit))
    return rows


def check_all(tables: dict, dtypes=("float32", "float64"), every=False) -> list[Row]:
    """Rows for every registered implementation (with ``every``, the reference against
    itself too) that runs on the active backend."""
    rows = []
    for table in tables.values():
        for impl in table.implementations():
            if impl is table.reference and not every:
                continue
            if backend.backend_name() not in impl.backends:
                continue
            for dtype in dtypes:
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
