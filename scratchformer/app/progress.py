"""Progress of stages that take a while, so that no stage is a silent stretch.

    show = stage(total, "translating", "sentence", bar=not args.no_progress)
    ...; show.update(n); show.emit(text, sys.stdout); ...; show.close()

``stage`` gives a progress bar (tqdm) on stderr when stderr is a terminal (or a
notebook), and a ``Ticker`` otherwise or with ``bar=False``: a log gets a line every
10 s, never a bar's redraws on one endless line. Both count work with ``update(n)``,
write results with ``emit`` (a bar is cleared first, so a result never shares its line)
and stop with ``close()``; both redraw from a background thread, so one slow batch does
not leave the screen or the log unchanged.
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


def time_left(seconds: float, done: int, total: int) -> float:
    """Seconds left for ``total - done`` more at the rate so far (``done`` in ``seconds``)."""
    return seconds * (total - done) / max(done, 1)


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


def terminal(stream=None) -> bool:
    """Whether ``stream`` (stderr by default) is shown as it is written: a terminal, or a
    notebook's output (where tqdm draws a widget). A file or a pipe is not."""
    stream = stream or sys.stderr
    try:
        if stream.isatty():
            return True
    except (AttributeError, ValueError):  # closed, or no isatty
        return False
    return "ipykernel" in sys.modules


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class Ticker:
    """Progress for logs without a progress bar: while the stage runs, a line
    ``  <what>: done/total (elapsed, about <time> left)`` every ``every`` seconds through
    ``echo`` (a ``print``-like function; stderr by default). The time left assumes the
    rate so far; without a total it is not shown."""

    def __init__(self, total: int | None, what: str, echo=None, every: float = 10.0):
        self.total, self.what, self.echo = total, what, echo or _say
        self.done = 0
        self.t0 = time.perf_counter()
        self._repeat = _Repeater(self._line, every)

    def _line(self) -> None:
        seconds = time.perf_counter() - self.t0
        total = "" if self.total is None else f"/{self.total}"
        left = ""
        if self.total and 0 < self.done < self.total:
            left = f", about {clock(time_left(seconds, self.done, self.total))} left"
        self.echo(f"  {self.what}: {self.done}{total} ({clock(seconds)}{left})")

    def update(self, n: int) -> None:
        self.done += n

    def emit(self, text: str, file) -> None:
        """Write ``text`` (results, whole lines) to ``file``."""
        file.write(text)
        file.flush()

    def close(self) -> None:
        self._repeat.stop()


class _Bar(tqdm):
    """A tqdm bar that also redraws itself every few seconds (its elapsed time moves)."""

    def __init__(self, *args, redraw: float = 5.0, **kwargs):
        super().__init__(*args, **kwargs)
        self._repeat = _Repeater(self.refresh, redraw) if not self.disable else None

    def emit(self, text: str, file) -> None:
        """Write ``text`` (results, whole lines) to ``file``, the bar cleared first and
        drawn again under it: never on the bar's line."""
        self.write(text, file=file, end="")
        file.flush()

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
    units = f" {unit[:-1]}ies" if unit.endswith("y") else f" {unit}s"  # "2 sentences"
    return _Bar(
        total=total,
        desc=what,
        unit=units,
        leave=False,
        file=file or sys.stderr,
        mininterval=1.0,
        dynamic_ncols=True,
        disable=disable,
    )


def stage(total: int | None, what: str, unit: str, bar: bool = True, echo=None):
    """How a long stage shows that it advances (see the module doc): a bar when ``bar``
    and stderr is a terminal, else a ``Ticker`` whose lines go through ``echo`` (stderr
    by default). ``total=None``: the amount of work is not known beforehand."""
    if bar and terminal():
        return progress_bar(total, what, unit)
    return Ticker(total, what, echo)


def unwritable(texts) -> str:
    """'' when standard output and error can write every one of ``texts`` (the command
    line, which names runs and prompts that are printed), else why not, in one line
    (stderr writes it with backslash escapes whatever its encoding). An argument whose
    bytes are not text in the locale's encoding (Python keeps each such byte as a lone
    surrogate, U+DC80-U+DCFF) is named as such: no output encoding can help it."""
    for text in texts:
        bad = [c for c in text if "\udc80" <= c <= "\udcff"]
        if bad:
            shown = text.encode("utf-8", "surrogateescape")
            return (
                f"the argument {shown!r} is not {sys.getfilesystemencoding().upper()} text (byte "
                f"0x{ord(bad[0]) - 0xDC00:02x}): give it as UTF-8, from a UTF-8 terminal or "
                "converted (iconv -t utf-8)"
            )
    for stream in (sys.stdout, sys.stderr):
        encoding = getattr(stream, "encoding", None) or "utf-8"
        for text in texts:
            try:
                text.encode(encoding)
            except UnicodeEncodeError as e:
                return (
                    f"the output encoding {encoding} cannot write {text[e.start]!r} (in "
                    f"{text!r}): set PYTHONIOENCODING=utf-8, or a UTF-8 locale"
                )
            except LookupError:
                return f"the output encoding {encoding} is not one Python knows"
    return ""


__all__ = ["Ticker", "clock", "progress_bar", "stage", "terminal", "unwritable"]
