"""The array backend: selection, dtype policy, RNG, host/device conversion, scatter-add."""

import numpy as np
import pytest

from scratchformer.engine import backend as B
from scratchformer.engine import device


def test_default_backend_is_numpy_float32():
    assert B.backend_name() == "numpy"
    assert B.get_dtype() is np.float32


def test_unknown_backend_is_a_clear_error():
    with pytest.raises(B.BackendError, match="unknown backend 'jax'"):
        B.set_backend("jax")


@pytest.mark.skipif(B.cupy_available(), reason="a GPU is present")
def test_cupy_without_gpu_is_a_clear_error():
    with pytest.raises(B.BackendError, match="CuPy|GPU"):
        B.set_backend("cupy")
    assert B.backend_name() == "numpy"  # a failed switch leaves the backend unchanged


def test_precision_context_restores_dtype():
    with B.precision("float64"):
        assert B.get_dtype() is np.float64
    assert B.get_dtype() is np.float32
    with pytest.raises(ValueError, match="unsupported floating dtype"):
        B.set_dtype("int32")


@pytest.mark.usefixtures("backend")
def test_rng_is_seeded():
    a = B.asnumpy(device.generator(3).random(5))
    b = B.asnumpy(device.generator(3).random(5))
    np.testing.assert_array_equal(a, b)


@pytest.mark.usefixtures("backend")
def test_host_device_round_trip():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = B.asarray(x)
    assert B.is_array(y)
    np.testing.assert_array_equal(B.asnumpy(y), x)
