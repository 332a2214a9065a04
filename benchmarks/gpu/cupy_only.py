"""A pytest plugin for the GPU run (``-p cupy_only``, benchmarks/gpu on the path): where
CuPy has a GPU, the numeric tests' NumPy copy (``backend`` = numpy) is deselected, so that
the GPU's minutes go to their CuPy copy (the NumPy copies run in CI). Elsewhere it
changes nothing."""

from __future__ import annotations


def pytest_collection_modifyitems(config, items):
    from scratchformer.engine import backend

    if not backend.cupy_available():
        return
    kept, dropped = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        (dropped if params.get("backend") == "numpy" else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
