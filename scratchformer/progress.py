"""Progress of stages that take a while, so that no stage is a silent stretch.

    bar = progress_bar(total, "decoding test", "sentence")   # a bar (tqdm), redrawn every
    ...; bar.update(n); ...; bar.close()                    # few seconds even if no work
                                                            # finished meanwhile
    ticker = Ticker(total, "decoding test", print)           # for logs: a line every 10 s

Both count work with ``update(n)`` and stop with ``close()``; both redraw from a
background thread, so one slow batch does not leave the screen or the log unchanged.
"""

from __future__ import annotations

import sys
import threading
import time

from tqdm.auto import tqdm


def clock(seconds: float) -> str:
    """``h:mm:ss``."""
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class _Repeater:
    """Calls ``fn()`` every ``every`` seconds from a daemon thread until ``stop()``."""

    def __init__(self, fn, every: float):
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(fn, every), daemon=True)
        self._thread.start()

    def _run(self, fn, every):
        while not self._done.wait(every):
            fn()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


class Ticker:
    """Progress for logs without a progress bar: while the stage runs, a line
    ``  <what>: done/total (elapsed)`` every ``every`` seconds through ``echo``."""

    def __init__(self, total: int, what: str, echo, every: float = 10.0):
        self.total, self.what, self.echo = total, what, echo
        self.done = 0
        self.t0 = time.perf_counter()
        self._repeat = _Repeater(self._line, every)

    def _line(self) -> None:
        elapsed = clock(time.perf_counter() - self.t0)
        self.echo(f"  {self.what}: {self.done}/{self.total} ({elapsed})")

    def update(self, n: int) -> None:
        self.done += n

    def close(self) -> None:
        self._repeat.stop()


class _Bar(tqdm):
    """A tqdm bar that also redraws itself every few seconds (its elapsed time moves)."""

    def __init__(self, *args, redraw: float = 5.0, **kwargs):
        super().__init__(*args, **kwargs)
        self._repeat = _Repeater(self.refresh, redraw) if not self.disable else None

    def close(self):
        if getattr(self, "_repeat", None) is not None:
            self._repeat.stop()
            self._repeat = None
        super().close()


def progress_bar(total: int | None, what: str, unit: str, file=None, disable: bool | None = False):
    """A progress bar (on stderr unless ``file``) that disappears when the stage ends.

    ``total=None``: the amount of work is not known beforehand (input from a pipe): the
    bar counts and shows the rate, without a percentage. ``disable=None``: drawn only
    when ``file`` is a terminal, for commands whose stderr is otherwise read by programs
    and should hold nothing but their messages."""
    return _Bar(
        total=total,
        desc=what,
        unit=unit,
        leave=False,
        file=file or sys.stderr,
        mininterval=1.0,
        dynamic_ncols=True,
        disable=disable,
    )


__all__ = ["Ticker", "clock", "progress_bar"]
