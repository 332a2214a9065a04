"""Host memory: how much this process can still allocate, and refusing up front a request
estimated to need more (one line naming what to lower, instead of a MemoryError minutes
later or the kernel's out-of-memory killer)."""

from __future__ import annotations

import os

from scratchformer.engine import backend
from scratchformer.engine.errors import ResourceError, gigabytes

__all__ = ["available_memory", "need_memory"]


def available_memory() -> int | None:
    """Bytes this process can still allocate on the host: the smallest of the system's
    available memory, what its cgroup (container) limit leaves and what its address-space
    limit (``ulimit -v``) leaves; None where none is known. (On a GPU, CuPy's own
    out-of-memory error is what reports a shortage.)"""
    found = _address_space_left()
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


def _address_space_left() -> list[int]:
    """What ``ulimit -v`` (RLIMIT_AS) leaves of this process's address space: the limit
    less the virtual size already mapped (``VmSize``); [] without such a limit."""
    try:
        import resource  # Unix only

        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
        if limit == resource.RLIM_INFINITY:
            return []
        with open("/proc/self/status", encoding="ascii") as f:
            size = [int(ln.split()[1]) * 1024 for ln in f if ln.startswith("VmSize:")]
        return [max(limit - size[0], 0)] if size else []
    except (ImportError, OSError, ValueError, IndexError):
        return []


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
