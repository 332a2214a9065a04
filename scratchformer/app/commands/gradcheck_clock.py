"""A gradient check's time, said before it starts, and its clock while it runs.

The estimate counts what the check runs (a copy of the model in the check's dtype, the
forward and backward pass that give the analytic gradient, two forward passes per entry
or direction, every entry a direction moves) and times the passes on that copy, on the
check's own batch, just before the check. Each pass is timed twice, in wall time and in
this process's CPU time, and the smaller is taken: other work on the machine stretches a
pass's wall time but not the computing it needs (its CPU time, on one BLAS thread), and
several BLAS threads share a pass's computing (its wall time, on a quiet machine). So a
busy machine does not fool the estimate; it is said before the wait instead (``busy``):
how much of a core the passes got, what to expect, and, with several BLAS threads, to
use one.
"""

from __future__ import annotations

import copy
import os
import statistics
import sys
import time
from dataclasses import dataclass, field

from scratchformer.app.train.limits import cores
from scratchformer.engine import device
from scratchformer.engine.errors import ScratchformerError

#: seconds per parameter entry a directional check spends drawing, scaling and applying
#: its directions (every entry twice: its tensor's row and the row of all parameters);
#: measured 72-75 ns on the small preset (2026-11-27, 2-core AMD EPYC, one BLAS thread)
ENTRY_SECONDS = 75e-9
#: the longest estimated check started without --force, in seconds
TIME_LIMIT = 3600.0
#: below this share of a core while its passes were timed (one BLAS thread), the
#: process is sharing its core with other work
SHARED = 0.8


@dataclass
class Probe:
    """What timing the check's passes found: seconds of computing to copy the model and
    of one forward and one backward pass; the share of a core the passes got (CPU time
    over wall time: 1.0 on a quiet core; meaningful with one BLAS thread); the loss of
    the check's batch and each gradient's largest entry and norm (for ``resolution``)."""

    copy: float
    forward: float
    backward: float
    share: float = 1.0
    loss: float = 0.0
    largest: dict = field(default_factory=dict)  # name -> max |g|
    norm: dict = field(default_factory=dict)  # name -> ||g||_2


def probe(model, dtype, batch, seed: int = 0) -> Probe:
    """Copy ``model`` into ``dtype`` and time one forward and one backward pass of the
    copy on ``batch`` (``(src, tgt_in, tgt_out)``, dropout seeded by ``seed``), which is
    what the check runs: the median of at least three, and of as many as fit in a quarter
    of a second (up to 50), after one to warm up, each in wall and in CPU time (the
    smaller median is the pass's computing)."""
    w0, c0 = time.perf_counter(), time.process_time()
    m = copy.deepcopy(model).astype(dtype)
    copied = min(time.perf_counter() - w0, time.process_time() - c0)
    wall, cpu = ([], []), ([], [])
    start = time.perf_counter()
    for i in range(51):
        if i > 3 and time.perf_counter() - start > 0.25:
            break
        w0, c0 = time.perf_counter(), time.process_time()
        loss, cache = m.loss_forward(*batch, rng=device.generator(seed))
        w1, c1 = time.perf_counter(), time.process_time()
        m.zero_grad()
        m.loss_backward(cache)
        w2, c2 = time.perf_counter(), time.process_time()
        if i:
            wall[0].append(w1 - w0), wall[1].append(w2 - w1)
            cpu[0].append(c1 - c0), cpu[1].append(c2 - c1)
    forward, backward = (min(statistics.median(w), statistics.median(c)) for w, c in zip(wall, cpu))
    share = sum(map(sum, cpu)) / max(sum(map(sum, wall)), 1e-12)
    grads = m.gradients()
    return Probe(
        copied, forward, backward, min(share, 1.0), abs(float(loss)),
        {n: float(abs(g).max()) for n, g in grads.items()},
        {n: float((g * g).sum()) ** 0.5 for n, g in grads.items()},
    )


def duration(seconds: float) -> str:
    """``"40 s"``, ``"12 min"``, ``"5.2 h"``, ``"61 days"``: a time in a message."""
    for unit, size, limit in (("s", 1, 60), ("min", 60, 3600), ("h", 3600, 2 * 86400)):
        if seconds < limit:
            return (
                f"{seconds / size:.2g} {unit}"
                if seconds < 10 * size
                else f"{seconds / size:.0f} {unit}"
            )
    return f"{seconds / 86400:,.0f} days"


def load_average() -> float:
    """The machine's load over the last minute (0 where the system does not say)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return 0.0


def busy(found: Probe, threads: int, estimate: float) -> tuple[str, float]:
    """``(note, expected seconds)``: the line said before the check when the machine is
    busy ("" when it is not), and the time to expect. With one BLAS thread the passes'
    own share of a core tells (below ``SHARED``: expect the estimate over that share);
    with several, the load average against the cores (their threads then wait on each
    other, for a time nothing can estimate: one thread is the advice)."""
    n, load = cores(), load_average()
    if threads == 1:
        if found.share >= SHARED:
            return "", estimate
        expected = estimate / max(found.share, 0.05)
        return (
            f"note: the cores are busy (load {load:.1f} on {n} cores; this check's passes "
            f"had {found.share:.0%} of a core while they were timed): the estimate is the "
            f"computing it needs, and sharing a core it may take about {duration(expected)}",
            expected,
        )
    if load + (threads or n) <= n + 0.5:
        return "", estimate
    many = f"{threads} BLAS threads" if threads else "the BLAS's own threads"
    return (
        f"note: the cores are busy (load {load:.1f} on {n} cores): with {many} on busy "
        "cores each product waits for its slowest thread, and the check can take many "
        "times its estimate; --threads 1 (the default) avoids that",
        estimate,
    )


class Clock:
    """A check's estimate against its time: the progress callback of ``watch`` says
    once, while the check runs, when it has taken more than twice what was expected (and
    no note said before it started that the machine is busy); ``took`` is what the
    check's last line shows."""

    def __init__(self, estimate: float, expected: float | None = None, warned=False, threads=1):
        self.estimate, self.warned, self.threads = estimate, warned, threads
        self.expected = estimate if expected is None else expected
        self.t0, self.c0 = time.perf_counter(), time.process_time()

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def watch(self, show):
        """The progress callback for a stage shown by ``show`` (a bar or a ticker)."""
        return lambda n: (show.update(n), self._check(show))

    def _check(self, show) -> None:
        if not self.warned and self.elapsed() > 2 * self.expected:
            self.warned = True
            advice = (
                "" if self.threads == 1 else "; on busy cores give it one BLAS thread (--threads 1)"
            )
            show.emit(
                f"note: this check has run more than twice its estimate ({duration(self.elapsed())}"
                f", estimated {duration(self.estimate)}): the cores are likely busy with other "
                f"work{advice} (docs/gradient-checks.md)\n",
                sys.stderr,
            )

    def took(self) -> str:
        """``"6.4 s; estimated 4.1 s"``, and the CPU time when the check shared its cores
        (``"38 s; estimated 13 s; 14 s of CPU time"``)."""
        wall, cpu = self.elapsed(), time.process_time() - self.c0
        shared = f"; {duration(cpu)} of CPU time" if cpu < SHARED * wall else ""
        return f"{duration(wall)}; estimated {duration(self.estimate)}{shared}"


def bounded_time(found: Probe, forwards: int, fewer: str, *, force: bool, entries=0, setups=1):
    """The check's estimated time: ``setups`` times its copy of the model and the
    forward and backward pass that give the analytic gradient, then ``forwards`` more
    forward passes and ``entries`` parameter entries moved along directions, each part
    timed (``found``) or counted. Printed, and returned; beyond ``TIME_LIMIT`` without
    ``force`` the check is refused in one line saying what to lower (``fewer``)."""
    estimate = setups * (found.copy + found.forward + found.backward) + forwards * found.forward
    estimate += entries * ENTRY_SECONDS
    what = (
        f"{forwards + setups:,} forward passes of {found.forward * 1e3:.1f} ms and "
        f"{setups} backward pass{'es' if setups > 1 else ''} of {found.backward * 1e3:.1f} "
        "ms, timed"
    )
    if entries:
        what += f"; {entries:,} entries moved along directions"
    if estimate > TIME_LIMIT and not force:
        raise ScratchformerError(
            f"this check would take about {duration(estimate)} ({what}): {fewer}, or pass "
            "--force to run it anyway"
        )
    print(f"estimated time: about {duration(estimate)} ({what})", flush=True)
    return estimate


def start_clock(found: Probe, estimate: float, threads: int) -> Clock:
    """The busy note (``busy``), printed before the check when there is one, and the
    check's clock."""
    note, expected = busy(found, threads, estimate)
    if note:
        print(note, flush=True)
    return Clock(estimate, expected, warned=bool(note), threads=threads)


__all__ = [
    "ENTRY_SECONDS",
    "TIME_LIMIT",
    "Clock",
    "Probe",
    "bounded_time",
    "busy",
    "duration",
    "probe",
    "start_clock",
]
