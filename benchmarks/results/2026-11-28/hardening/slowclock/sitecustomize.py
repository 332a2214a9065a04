"""A machine that is busy, and gets busier, as the program sees it (for finding the tests
whose outcome depends on the machine's load; outside the package, put on PYTHONPATH so
that every subprocess starts with it too).

- ``time.perf_counter`` (the clock every duration of the program is measured with) runs
  ``SLOWCLOCK_FACTOR`` times fast (20: every piece of work looks 20 times slower), and
  with ``SLOWCLOCK_ACCEL=1`` faster and faster, ``SLOWCLOCK_FACTOR * e * (1 + e)``
  seconds for ``e`` real seconds since the process started, so that a duration measured
  late in a command looks far longer than the same work measured early (an estimate
  made at the start is soon exceeded: a machine getting busier);
- ``threading.Event.wait`` (the repeaters of the progress tickers, every 5 or 10 s) and
  ``multiprocessing`` connections' ``poll`` (the exercises' time limit) wait a
  ``SLOWCLOCK_FACTOR``-th of their timeout.

``time.monotonic`` is left alone: the tests' own subprocess timeouts use it."""

import multiprocessing.connection
import os
import threading
import time

FACTOR = float(os.environ.get("SLOWCLOCK_FACTOR", "20"))
ACCEL = os.environ.get("SLOWCLOCK_ACCEL", "0") == "1"
_real = time.perf_counter
_start = _real()


def perf_counter() -> float:
    e = _real() - _start
    return _start + FACTOR * e * ((1.0 + e) if ACCEL else 1.0)


time.perf_counter = perf_counter

_wait = threading.Event.wait


def wait(self, timeout=None):
    return _wait(self, None if timeout is None else timeout / FACTOR)


threading.Event.wait = wait

_poll = multiprocessing.connection.Connection.poll


def poll(self, timeout=0.0):
    return _poll(self, None if timeout is None else timeout / FACTOR)


multiprocessing.connection.Connection.poll = poll
