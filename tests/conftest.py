"""Shared fixtures. Numeric tests take the ``backend`` fixture: they run on NumPy and
again on CuPy when a GPU is present, and show as skipped (never silently passed) when
it is not."""

import numpy as np
import pytest

from scratchformer import backend as B

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
def f64():
    """Make float64 the default dtype for the test."""
    with B.precision("float64"):
        yield


@pytest.fixture
def nprng():
    return np.random.default_rng(1234)
