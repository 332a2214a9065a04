"""Shared fixtures. Numeric tests take the ``backend`` fixture: they run on NumPy and
again on CuPy when a GPU is present, and show as skipped (never silently passed) when
it is not."""

from collections import Counter

import pytest

from scratchformer import backend as B
from scratchformer import kernels

pytest_plugins = ["mpi_jobs"]  # the fixtures of the tests that start mpiexec

_BACKENDS = [
    "numpy",
    pytest.param(
        "cupy",
        marks=[
            pytest.mark.gpu,
            pytest.mark.skipif(not B.cupy_available(), reason="CuPy with a GPU is not available"),
        ],
    ),
]


def pytest_report_header(config):
    """Say so at the top of the run when SCRATCHFORMER_BACKEND named a backend that
    could not start (the tests then run on NumPy; the CuPy copies skip)."""
    if B.env_error is not None:
        return f"scratchformer: {B.env_error}; tests run on numpy"
    return None


@pytest.fixture(params=_BACKENDS)
def backend(request):
    """Run the test under the given backend, restoring NumPy afterwards."""
    B.set_backend(request.param)
    try:
        yield request.param
    finally:
        B.set_backend("numpy")
        B.set_dtype("float32")


@pytest.fixture
def plant():
    """``plant(op, backward, forward=None)``: put an implementation of the op ``op`` in
    place through the kernel seam for the rest of the test (a deliberately broken
    backward, say), with the reference's forward unless one is given; it is removed
    afterwards. Returns the implementation."""
    planted = []

    def put(op, backward, forward=None):
        table = kernels.table(op)
        impl = kernels.Implementation(
            "planted", forward or table.reference.forward, backward, note="planted by a test"
        )
        table.register(impl)
        context = kernels.use(table, impl.name)
        context.__enter__()
        planted.append((table, context))
        return impl

    yield put
    for table, context in reversed(planted):
        context.__exit__(None, None, None)
        table.unregister("planted")


@pytest.fixture
def f64():
    """Make float64 the default dtype for the test."""
    with B.precision("float64"):
        yield


def pytest_terminal_summary(terminalreporter):
    """One line per reason a test was skipped, with the count per backend, in place of
    a line per test (the CuPy copies alone are hundreds on a machine without a GPU)."""
    counts = Counter()
    for rep in terminalreporter.stats.get("skipped", []):
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        # a module skipped at collection (an optional extra missing) has no keywords
        backend = "cupy" if "gpu" in getattr(rep, "keywords", {}) else "numpy"
        counts[reason.removeprefix("Skipped: "), backend] += 1
    if counts:
        terminalreporter.write_sep("-", "skipped")
    for (reason, backend), n in sorted(counts.items()):
        where = "" if backend == "numpy" else " on cupy"
        terminalreporter.write_line(f"{n} skipped{where}: {reason}")
