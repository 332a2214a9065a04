"""The array backend: the only module in scratchformer that imports numpy or cupy.

Everything else writes ``from scratchformer.engine.backend import xp`` and calls ``xp.exp``,
``xp.matmul`` and so on. ``xp`` is a thin proxy that forwards every attribute to the
active array module, so switching the backend at run time is seen everywhere at once.

    set_backend("numpy")            # the default
    set_backend("cupy")             # or SCRATCHFORMER_BACKEND=cupy in the environment

Dtype policy: parameters and activations are float32 by default; gradient checks run
in float64 (``with precision("float64"): ...``). Integer token ids are int64. Mixed
precision computes the activations in float16 while the parameters stay float32
(``with autocast("float16"): ...``: the models cast their embeddings' output, and every
op's float16 implementation takes it from there; see engine/step.py).

The few primitives whose best form depends on the backend (scatter-add, row dot
products, the dropout generator) are in scratchformer/engine/device/; ``host_rng`` here gives
the host generator of data order and initialisation.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import numpy

__all__ = [
    "xp",
    "np",
    "set_backend",
    "backend_name",
    "cupy_available",
    "asnumpy",
    "asarray",
    "get_dtype",
    "set_dtype",
    "precision",
    "autocast",
    "compute_dtype",
    "COMPUTE_DTYPES",
    "host_rng",
    "is_array",
    "on_host",
    "BackendError",
    "quiet_float_warnings",
    "blas_threads",
]

#: NumPy itself, for host-side work (data pipelines, checkpoints on disk).
np = numpy


class BackendError(RuntimeError):
    """The requested backend cannot be used (CuPy not installed, or no GPU)."""


_state: dict[str, Any] = {
    "name": "numpy",
    "module": numpy,
    "dtype": numpy.float32,
    "compute": None,  # the activations' dtype under ``autocast`` (None: the parameters')
}

#: the dtypes activations can be computed in under ``autocast``
COMPUTE_DTYPES = ("float16",)


class _ArrayModule:
    """Forwards attribute access to the active array module (numpy or cupy)."""

    def __getattr__(self, attr: str) -> Any:
        return getattr(_state["module"], attr)

    def __repr__(self) -> str:
        return f"<scratchformer array module: {_state['name']}>"


#: The active array module. Use it as you would use ``numpy``.
xp = _ArrayModule()


#: how to install CuPy, by the CUDA of the NVIDIA driver (``nvidia-smi`` says which)
CUPY_INSTALL = (
    "pip install 'scratchformer[cuda12]' for a CUDA 12 driver, or 'scratchformer[cuda13]' "
    "for CUDA 13 (driver 580 or newer); never both: two CuPy packages break 'import cupy'"
)


def _import_cupy():
    try:
        import cupy  # noqa: PLC0415  (optional, the gpu extra: a CPU install has no cupy)
    except ImportError as e:
        raise BackendError(f"the cupy backend needs CuPy ({e}): {CUPY_INSTALL}") from None
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # CUDA driver missing or broken
        raise BackendError(
            f"no usable GPU for the cupy backend: CuPy {cupy.__version__}{_cupy_cuda()} says "
            f"{e}; which CuPy suits which driver: docs/gpu.md"
        ) from None
    if n < 1:
        raise BackendError(f"CuPy is installed but no GPU is visible: {CUPY_INSTALL}")
    return cupy


def _cupy_cuda() -> str:
    """`` (for CUDA 13)``: the CUDA major version the installed CuPy wheel is built for,
    from its package name (cupy-cuda13x), or '' for a CuPy built from source."""
    from importlib.metadata import distributions  # noqa: PLC0415  (only on this error)

    for d in distributions():
        name = (d.metadata["Name"] or "").lower()
        if name.startswith("cupy-cuda") and name.endswith("x"):
            return f" (for CUDA {name.removeprefix('cupy-cuda').removesuffix('x')})"
    return ""


def cupy_available() -> bool:
    """True when CuPy imports and at least one GPU is visible."""
    try:
        _import_cupy()
    except BackendError:
        return False
    return True


def set_backend(name: str) -> None:
    """Select the array module: ``"numpy"`` or ``"cupy"``.

    Arrays made under one backend are not converted: build models after choosing.
    """
    global env_error
    name = name.lower()
    if name == "numpy":
        _state.update(name="numpy", module=numpy)
    elif name == "cupy":
        _state.update(name="cupy", module=_import_cupy())
    else:
        raise BackendError(f"unknown backend {name!r}: expected 'numpy' or 'cupy'")
    env_error = None  # chosen here: what SCRATCHFORMER_BACKEND named no longer matters


def backend_name() -> str:
    """The name of the active backend, ``"numpy"`` or ``"cupy"``."""
    return _state["name"]


def get_dtype():
    """The floating dtype new parameters and activations are created with."""
    return _state["dtype"]


def set_dtype(dtype) -> None:
    """Set the default floating dtype (``"float32"`` or ``"float64"``)."""
    dt = numpy.dtype(dtype)
    if dt not in (numpy.float32, numpy.float64):
        raise ValueError(f"unsupported floating dtype {dt}: use float32 or float64")
    _state["dtype"] = dt.type


@contextlib.contextmanager
def precision(dtype):
    """Temporarily change the default dtype: ``with precision("float64"): ...``."""
    old = _state["dtype"]
    set_dtype(dtype)
    try:
        yield
    finally:
        _state["dtype"] = old


@contextlib.contextmanager
def autocast(dtype):
    """Compute the activations in ``dtype`` ("float16"; None: the parameters' dtype) for
    the duration: mixed precision, the parameters staying in their own dtype."""
    if dtype is not None and numpy.dtype(dtype).name not in COMPUTE_DTYPES:
        raise ValueError(f"unsupported compute dtype {dtype}: use one of {COMPUTE_DTYPES}")
    old = _state["compute"]
    _state["compute"] = None if dtype is None else numpy.dtype(dtype).type
    try:
        yield
    finally:
        _state["compute"] = old


def compute_dtype():
    """The activations' dtype under ``autocast``, or None outside it."""
    return _state["compute"]


def is_array(x) -> bool:
    """True for an ndarray of the active backend (or a NumPy array)."""
    return isinstance(x, numpy.ndarray) or (
        _state["name"] == "cupy" and type(x).__module__.startswith("cupy")
    )


def on_host(x) -> bool:
    """True for a NumPy array (host memory), False for a device array (even where the
    device is NumPy itself: an array the package made through ``xp``)."""
    return type(x) is numpy.ndarray


def asnumpy(x):
    """Copy an array to the host as a NumPy array (a no-op for NumPy arrays)."""
    if isinstance(x, numpy.ndarray):
        return x
    if hasattr(x, "get"):  # cupy.ndarray
        return x.get()
    return numpy.asarray(x)


def asarray(x, dtype=None):
    """Move ``x`` to the active backend (host -> device for CuPy)."""
    return _state["module"].asarray(x, dtype=dtype)


def host_rng(seed=None) -> numpy.random.Generator:
    """A NumPy generator: for data order and initialisation, which happen on the host."""
    return numpy.random.default_rng(seed)


#: Why the backend named by ``SCRATCHFORMER_BACKEND`` could not be selected at import
#: (None when it was, or when none was named, or once ``set_backend`` chose one). Importing
#: never fails on it, so that a test run still runs and reports the CuPy tests as skipped;
#: NumPy stays active, and the command line and the models' constructors (the Python API)
#: refuse to start: ``require_env_backend()`` raises it.
env_error: BackendError | None = None

_env = os.environ.get("SCRATCHFORMER_BACKEND")
if _env:
    try:
        set_backend(_env)
    except BackendError as e:
        env_error = BackendError(f"SCRATCHFORMER_BACKEND={_env}: {e}")


def quiet_float_warnings() -> None:
    """Turn off NumPy's warnings about overflow, NaN and division by zero for the rest
    of the process (the command line's): the program finds and reports non-finite
    values itself (training's non-finite stop, the decoders' and the checks' own
    messages), and a raw warning naming a line of our source explains nothing to a user.
    A library user keeps NumPy's settings."""
    numpy.seterr(all="ignore")


def blas_threads(threads: int):
    """A context in which the host's BLAS runs on ``threads`` threads (0: as many as the
    BLAS chooses). Small matrices run fastest on one: extra BLAS threads mostly wait for
    each other, and on cores busy with other work a waiting thread holds up every product
    (the training loop and the gradient check both run inside this)."""
    if not threads:
        return contextlib.nullcontext()
    from threadpoolctl import threadpool_limits  # only where threads are set

    return threadpool_limits(threads, user_api="blas")


def require_env_backend() -> None:
    """Raise ``env_error`` when ``SCRATCHFORMER_BACKEND`` named a backend that could not
    start (the command line calls this before any work)."""
    if env_error is not None:
        raise env_error
