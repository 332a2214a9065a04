"""Shared fixtures. Numeric tests take the ``backend`` fixture: they run on NumPy and
again on CuPy when a GPU is present, and show as skipped (never silently passed) when
it is not.

``SCRATCHFORMER_BACKEND=cupy python -m pytest`` on a GPU runs every other test (the
trainer, decoding, the command line, subprocesses too) on CuPy as well; where the named
backend cannot start, the run says so in its header and every test runs on NumPy, its
subprocesses included (the variable is taken out of their environment).
"""

import os
import signal
import tempfile
from collections import Counter

import pytest

import scratchformer.engine.ops  # noqa: F401  (every op registered)
from scratchformer.engine import backend as B
from scratchformer.engine import dispatch

pytest_plugins = ["mpi_jobs"]  # the fixtures of the tests that start mpiexec

# The writer's ledger of the files it wrote (scratchformer/app/writer/) in a folder of this
# test run's, never the user's ~/.local/state (subprocesses inherit it)
os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="scratchformer-tests-state-")

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


#: the backend the run's tests use outside the ``backend`` fixture
DEFAULT_BACKEND = B.backend_name()
#: why SCRATCHFORMER_BACKEND could not start, if it could not: the tests then run on NumPy
#: as if it were not set (the command line in-process, and every subprocess)
UNUSABLE_BACKEND = B.env_error
if UNUSABLE_BACKEND is not None:
    os.environ.pop("SCRATCHFORMER_BACKEND", None)
    B.env_error = None


def pytest_report_header(config):
    """Say so at the top of the run when SCRATCHFORMER_BACKEND named a backend that
    could not start (the tests then run on NumPy; the CuPy copies skip)."""
    if UNUSABLE_BACKEND is not None:
        return f"scratchformer: {UNUSABLE_BACKEND}; tests run on numpy"
    if DEFAULT_BACKEND != "numpy":
        return f"scratchformer: every test runs on {DEFAULT_BACKEND} (SCRATCHFORMER_BACKEND)"
    return None


@pytest.fixture(params=_BACKENDS)
def backend(request):
    """Run the test under the given backend, restoring the run's default afterwards (so
    that the tests after it run on the backend they would alone)."""
    B.set_backend(request.param)
    try:
        yield request.param
    finally:
        B.set_backend(DEFAULT_BACKEND)
        B.set_dtype("float32")


@pytest.fixture
def plant():
    """``plant(op, backward, forward=None)``: put an implementation of the op ``op`` in
    place through its table for the rest of the test (a deliberately broken
    backward, say), with the reference's forward unless one is given; it is removed
    afterwards. Returns the implementation."""
    planted = []

    def put(op, backward, forward=None):
        table = dispatch.table(op)
        impl = table.register("planted", forward or table.reference.forward, backward,
                              note="planted by a test", accessors=table.reference.accessors)
        context = dispatch.use(table, impl.name)
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
    a line per test (the CuPy copies alone are hundreds on a machine without a GPU); what
    the deselected tests are; and the header's note on the backend, which ``-q`` hides."""
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
    deselected = terminalreporter.stats.get("deselected", [])
    slow = sum(1 for item in deselected if item.get_closest_marker("slow"))
    if slow and "not slow" in (terminalreporter.config.option.markexpr or ""):
        terminalreporter.write_line(
            f"{slow} deselected: the checks marked slow (python -m pytest -m slow runs them)"
        )
    note = pytest_report_header(terminalreporter.config)  # -q hides the header
    if note:
        terminalreporter.write_line(note)


@pytest.fixture(autouse=True)
def _ctrl_c_as_python_has_it():
    """Every test starts with Python's own Ctrl-C (KeyboardInterrupt), and a handler a test
    installs in this process (the program's start-up guard, a check's) ends with it: a
    test that sends itself SIGINT never meets another's handler."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, signal.default_int_handler)
