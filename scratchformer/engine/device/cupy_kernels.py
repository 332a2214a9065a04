"""The ops' CUDA side: the ``.cu`` files beside the op files (ops/), compiled at run time
by CuPy (NVRTC, ``RawModule``) and launched; checked without a GPU by ``nvrtc_compile``,
which CI runs for sm_80 and sm_90.

The sources ship in the package (``ops/*.cu``, and the ``.cuh`` headers they include,
beside the primitive they mirror: ``device/counter.cuh``) and are read with
``importlib.resources``, so an installed wheel finds them as an editable checkout does.
A kernel written without a GPU is registered in its op's table with ``proven=False``:
never chosen by default until a GPU run has shown it equal to its reference
(``scratchformer kernels --check`` on the GPU).
"""

from __future__ import annotations

import functools
from importlib import resources

import cupy
from cupy.cuda import nvrtc

THREADS = 256
#: options of every compile: C++14, and the package's folder for the ``.cuh`` headers
_STD = "-std=c++14"


#: the package folders of the kernel sources (``.cu``) and of their headers (``.cuh``)
KERNELS = "scratchformer.engine.ops"
HEADERS = ("scratchformer.engine.device", "scratchformer.engine.ops")


def sources() -> list[str]:
    """The names of the package's kernel sources (``dropout`` for ``dropout.cu``)."""
    folder = resources.files(KERNELS)
    return sorted(p.name[:-3] for p in folder.iterdir() if p.name.endswith(".cu"))


def _header(name: str) -> str:
    for package in HEADERS:
        path = resources.files(package) / name
        if path.is_file():
            return path.read_text()
    raise FileNotFoundError(f"no CUDA header {name} in {', '.join(HEADERS)}")


def source(name: str) -> str:
    """The text of ``<name>.cu``, its ``#include "x.cuh"`` lines replaced by the
    headers' text (NVRTC then needs no include path, wherever the package lies)."""
    lines = []
    for line in (resources.files(KERNELS) / f"{name}.cu").read_text().splitlines():
        if line.startswith('#include "') and line.rstrip().endswith('.cuh"'):
            header = line.split('"')[1]
            lines += [f"// {header}", _header(header)]
        else:
            lines.append(line)
    return "\n".join(lines) + "\n"


def nvrtc_compile(text: str, arch: str = "sm_90", name: str = "kernel.cu") -> bytes:
    """Compile the CUDA source ``text`` with NVRTC for ``arch`` (no GPU needed) and
    return the cubin; a compile error raises ``nvrtc.NVRTCError`` whose cause holds
    NVRTC's log (file(line): error ...)."""
    prog = nvrtc.createProgram(text, name, [], [])
    try:
        nvrtc.compileProgram(prog, [f"-arch={arch}", _STD])
    except nvrtc.NVRTCError as e:
        log = nvrtc.getProgramLog(prog)
        raise nvrtc.NVRTCError(e.status) from RuntimeError(log)
    return nvrtc.getCUBIN(prog)


@functools.cache
def module(name: str) -> cupy.RawModule:
    """The compiled ``<name>.cu`` (compiled once per process; CuPy caches the binary)."""
    return cupy.RawModule(code=source(name), options=(_STD,))


def launch(name: str, kernel: str, n: int, args: tuple) -> None:
    """Run ``kernel`` of ``<name>.cu`` over ``n`` entries (a grid-stride loop inside:
    at most 65,535 blocks of ``THREADS``)."""
    blocks = min((n + THREADS - 1) // THREADS, 65535) or 1
    module(name).get_function(kernel)((blocks,), (THREADS,), args)


__all__ = ["THREADS", "launch", "module", "nvrtc_compile", "source", "sources"]
