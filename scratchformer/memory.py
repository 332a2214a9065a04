"""Host memory: how much this process can still allocate, and refusing up front a request
estimated to need more (one line naming what to lower, instead of a MemoryError minutes
later or the kernel's out-of-memory killer)."""

from __future__ import annotations

import os

from scratchformer import backend
from scratchformer.errors import ResourceError, gigabytes

__all__ = ["available_memory", "need_memory"]


def available_memory() -> int | None:
    """Bytes this process can still allocate on the host: the smaller of the system's
    available memory and what its cgroup (container) limit leaves; None where neither
    is known. (On a GPU, CuPy's own out-of-memory error is what reports a shortage.)"""
    found = []
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            found += [int(ln.split()[1]) * 1024 for ln in f if ln.startswith("MemAvailable:")]
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open("/sys/fs/cgroup/memory.max", encoding="ascii") as f:
            limit = f.read().strip()
        with open("/sys/fs/cgroup/memory.current", encoding="ascii") as f:
            used = int(f.read().strip())
        if limit != "max":
            found.append(max(int(limit) - used, 0))
    except (OSError, ValueError):
        pass
    if not found:
        try:
            found.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError, AttributeError):
            return None
    return min(found)


def need_memory(nbytes: float, what: str, advice: str) -> None:
    """Refuse up front a request estimated to need ``nbytes`` when the host has less
    available: one line with the estimate, the memory available and ``advice`` (what to
    lower), rather than minutes of work ending in a MemoryError or the OOM killer.
    Only the NumPy backend's host memory is judged."""
    if backend.backend_name() != "numpy":
        return
    free = available_memory()
    if free is not None and nbytes > free:
        raise ResourceError(
            f"{what} would need about {gigabytes(nbytes)} of memory, and "
            f"{gigabytes(free)} is available: {advice}"
        )
