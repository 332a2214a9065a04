"""A stand-in for a GPU that counts host reads: every array the package makes through
``xp`` is a ``DeviceArray`` (a NumPy array that records each read of its values on the
host), so a training or decoding step run under ``recording()`` shows exactly where it
would stall a GPU's launch queue.

Counted as reads, as CuPy would make them: ``float()``, ``int()``, ``bool()`` and
``index()`` of an array, ``.item()``, ``.tolist()``, formatting it, iterating over it, a
boolean-mask get or set (CuPy reads the mask's count to size the result), and every
transfer to NumPy (``backend.asnumpy``). Host arrays (plain NumPy: the data pipeline,
the decoder's bookkeeping) are free, and so is moving a host array to the device.
"""

from __future__ import annotations

import contextlib
import os
import traceback

import numpy as np

import scratchformer
from scratchformer.engine import backend

READS: list[str] = []

#: the package's own folder: a frame is the package's when its file lies under it (a
#: clone named ``scratchformer`` has the tests under a ``/scratchformer/`` too)
PACKAGE = os.path.dirname(os.path.realpath(scratchformer.__file__)) + os.sep


def _where() -> str:
    """The package's frame that made the read (file:line function)."""
    for f in reversed(traceback.extract_stack()[:-2]):
        path = os.path.realpath(f.filename)
        if path.startswith(PACKAGE):
            return f"{path[len(PACKAGE) :]}:{f.lineno} {f.name}"
    return "outside the package"


def _read(kind: str) -> None:
    READS.append(f"{kind} at {_where()}")


def _bool_key(key) -> bool:
    keys = key if isinstance(key, tuple) else (key,)
    return any(isinstance(k, np.ndarray) and k.dtype == bool for k in keys)


class DeviceArray(np.ndarray):
    """A NumPy array standing for a device array: reading its values records a read."""

    def __array_wrap__(self, arr, context=None, return_scalar=False):
        return np.asarray(arr).view(DeviceArray)

    def __float__(self):
        _read("float()")
        return float(self.view(np.ndarray))

    def __int__(self):
        _read("int()")
        return int(self.view(np.ndarray))

    def __index__(self):
        _read("index()")
        return self.view(np.ndarray).__index__()

    def __bool__(self):
        _read("bool()")
        return bool(self.view(np.ndarray))

    def __format__(self, spec):
        _read("format")
        return format(self.view(np.ndarray)[()] if self.ndim == 0 else self.view(np.ndarray), spec)

    def __iter__(self):
        _read("iteration")
        return iter(self.view(np.ndarray))

    def item(self, *args):
        _read(".item()")
        return self.view(np.ndarray).item(*args)

    def tolist(self):
        _read(".tolist()")
        return self.view(np.ndarray).tolist()

    def __getitem__(self, key):
        if _bool_key(key):
            _read("boolean-mask get")
        out = super().__getitem__(key)
        return out if isinstance(out, np.ndarray) else np.asarray(out).view(DeviceArray)

    def __setitem__(self, key, value):
        if _bool_key(key):
            _read("boolean-mask set")
        super().__setitem__(key, value)


def _device(x):
    """Results of the array module as device arrays (scalars as 0-d arrays)."""
    if isinstance(x, DeviceArray):
        return x
    if isinstance(x, np.ndarray):
        return x.view(DeviceArray)
    if isinstance(x, np.generic):
        return np.asarray(x).view(DeviceArray)
    if isinstance(x, tuple):
        return tuple(_device(v) for v in x)
    if isinstance(x, list):
        return [_device(v) for v in x]
    return x


class _Module:
    """NumPy as a device's array module: every array it returns is a DeviceArray."""

    def __init__(self, module):
        self._module = module

    def __getattr__(self, name):
        value = getattr(self._module, name)
        if isinstance(value, np.ufunc) or isinstance(value, type):
            return value  # ufuncs keep DeviceArray inputs as they are (__array_wrap__)
        if callable(value):
            return lambda *a, **k: _device(value(*a, **k))
        if hasattr(value, "__name__") and value.__name__.startswith("numpy."):
            return _Module(value)  # xp.random, xp.linalg
        return value


def _asnumpy(x):
    if isinstance(x, DeviceArray):
        _read("transfer to NumPy")
        return x.view(np.ndarray)
    return np.asarray(x) if not isinstance(x, np.ndarray) else x


@contextlib.contextmanager
def recording(monkeypatch):
    """NumPy as a counted device for the duration: arrays made through ``xp`` are
    DeviceArrays, ``backend.asnumpy`` counts transfers, and the device primitives are the
    GPU's (scratchformer/engine/device/cupy_device.py, which imports no CuPy: segment sums with
    no size read from the data, the counter-based generator), not the host's forms that
    NumPy runs. ``READS`` is emptied first."""
    from scratchformer.engine import device
    from scratchformer.engine.device import cupy_device

    READS.clear()
    monkeypatch.setitem(backend._state, "module", _Module(np))
    monkeypatch.setattr(backend, "asnumpy", _asnumpy)
    monkeypatch.setattr(device, "_impl", lambda: cupy_device)
    yield READS
