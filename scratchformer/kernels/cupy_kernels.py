"""The kernel seam's GPU kernels: compiled at run time by CuPy (NVRTC) from the sources of
scratchformer/kernels/cuda_sources.py, and checked without a GPU by ``nvrtc_compile``.

A kernel written without a GPU is registered in its op's table with ``proven=False``:
never chosen by default until a GPU run has shown it equal to its reference
(``scratchformer kernels --check`` on the GPU; benchmarks/gpu/run_all.sh runs it).
"""

from __future__ import annotations

import functools

import cupy
from cupy.cuda import nvrtc

from scratchformer.device.counter import CounterGenerator
from scratchformer.kernels.cuda_sources import SOURCES
from scratchformer.ops.dropout import DropoutCache

THREADS = 256


def nvrtc_compile(source: str, arch: str = "sm_90", name: str = "kernel.cu") -> bytes:
    """Compile ``source`` with NVRTC for ``arch`` (no GPU needed) and return the cubin;
    a compile error raises ``nvrtc.NVRTCError`` whose message holds NVRTC's log
    (file:line: error ...)."""
    prog = nvrtc.createProgram(source, name, [], [])
    try:
        nvrtc.compileProgram(prog, [f"-arch={arch}", "-std=c++14"])
    except nvrtc.NVRTCError as e:
        log = nvrtc.getProgramLog(prog)
        raise nvrtc.NVRTCError(e.status) from RuntimeError(log)
    return nvrtc.getCUBIN(prog)


@functools.cache
def _kernel(source_name: str, kernel: str):
    source, _ = SOURCES[source_name]
    return cupy.RawKernel(source, kernel, options=("-std=c++14",))


def dropout_forward(x, p: float, rng=None):
    """``dropout_forward`` in one launch: the mask drawn by the kernel from the
    counter-based generator ``rng`` (advanced by ``x.size`` draws, as the op would)."""
    if rng is None or p == 0.0:
        return x, DropoutCache(None)
    if not isinstance(rng, CounterGenerator):
        raise TypeError("the dropout kernel draws from the counter-based generator only")
    x = cupy.ascontiguousarray(x)
    out = cupy.empty_like(x)
    keep = cupy.empty(x.shape, dtype=bool)
    n = x.size
    name = "sf_dropout_f32" if x.dtype == cupy.float32 else "sf_dropout_f64"
    scale = 1.0 / (1.0 - p)
    blocks = min((n + THREADS - 1) // THREADS, 65535) or 1
    args = (x, out, keep, cupy.uint64(n), cupy.uint64(rng.key), cupy.uint64(rng.counter),
            x.dtype.type(p), x.dtype.type(scale))  # fmt: skip
    _kernel("dropout", name)((blocks,), (THREADS,), args)
    rng.counter += n
    return out, DropoutCache(keep, scale)


__all__ = ["THREADS", "dropout_forward", "nvrtc_compile"]
