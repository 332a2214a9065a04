"""Timing that is right on a GPU: work is queued, so a clock read on the host measures the
queueing unless the device is synchronised; CUDA events measure the device itself.

    t = Timer()            # CUDA events on CuPy (and for torch on CUDA), perf_counter else
    with t: step()
    t.ms                   # the device time of the block, in milliseconds
    cpu_ms                 # Timer.cpu: host CPU time of the block (the launch overhead)
"""

from __future__ import annotations

import time


def synchronize() -> None:
    """Wait for every queued kernel of the active backend (a no-op on NumPy)."""
    from scratchformer.engine import backend

    if backend.backend_name() == "cupy":
        backend.xp.cuda.Device().synchronize()


class Timer:
    """Wall time of a block on the device (CUDA events) or the host, and the host CPU
    time it took (how long Python spent queueing the work)."""

    def __init__(self, torch_cuda: bool = False):
        from scratchformer.engine import backend

        self.torch = torch_cuda
        self.cuda = torch_cuda or backend.backend_name() == "cupy"
        self.ms = self.cpu_ms = 0.0

    def _event(self):
        if self.torch:
            import torch

            return torch.cuda.Event(enable_timing=True)
        from scratchformer.engine import backend

        return backend.xp.cuda.Event()

    def __enter__(self):
        self.cpu0 = time.process_time()
        if self.cuda:
            self.start, self.end = self._event(), self._event()
            self.start.record()
        else:
            self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if self.cuda:
            self.end.record()
            self.end.synchronize()
            if self.torch:
                self.ms = self.start.elapsed_time(self.end)
            else:
                from scratchformer.engine import backend

                self.ms = backend.xp.cuda.get_elapsed_time(self.start, self.end)
        else:
            self.ms = 1e3 * (time.perf_counter() - self.t0)
        self.cpu_ms = 1e3 * (time.process_time() - self.cpu0)
        return False


__all__ = ["Timer", "synchronize"]
