"""The ``scratchformer`` program (and ``python -m scratchformer``): ``cli.main``.

Loading NumPy and every command's module takes a few tenths of a second before the
command's own handling of Ctrl-C begins. From the first line of ``main`` until then,
Ctrl-C ends the program at once in one line with the shell's code for it (130): nothing
has been written yet, and an exception raised into an import would come out of NumPy
wrapped in a long ImportError. Once the command has returned, Ctrl-C is ignored: there
is nothing left to stop, and the exit code is the command's. The guard goes in as this
module is imported, through the C ``_signal`` module (``signal`` builds enums first),
and the package's ``__init__`` imports nothing: what comes before it is Python's own
start-up, the environment's ``site`` and ``.pth`` files (an editable install's finder
takes some 20 ms), where a Ctrl-C is Python's to report.

A standard stream closed by the shell (``<&-``, ``>&-``, ``2>&-``) is given /dev/null at
its descriptor, so that no file the program opens takes its number (a checkpoint read as
standard input, a log written where standard output was); the command line then refuses
a command that needs the closed stream (``cli.closed_streams``)."""

import _signal  # the C module: ``signal`` builds its enums first (a millisecond unguarded)
import os
import sys


def _stop(signum, frame) -> None:
    """Ctrl-C outside a command's own handling: one line, exit 130, nothing unwound."""
    try:
        os.write(2, b"scratchformer: stopped by Ctrl-C\n")
    finally:
        os._exit(128 + _signal.SIGINT)


def _guard() -> None:
    if _signal.getsignal(_signal.SIGINT) is not _signal.SIG_IGN:  # a background job's stays
        _signal.signal(_signal.SIGINT, _stop)  # the command puts Python's own back meanwhile


# Importing this module is starting the program (its script does it, then calls main):
# the guard goes in here, before anything more is loaded.
_guard()

import signal  # noqa: E402  (after the guard)


def main() -> int:
    _guard()
    try:
        from scratchformer.app import writer

        writer.fill_closed_standard_streams()
        from scratchformer.app.cli import main as run

        code = run()
        # the command is over: a Ctrl-C now stops nothing, and Python's teardown would
        # die of it silently; its exit code is the command's
        if sys.stdout is not None:
            sys.stdout.flush()
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        return code
    except KeyboardInterrupt:  # raised by code, not a signal: told the same way
        print("scratchformer: stopped by Ctrl-C", file=sys.stderr, flush=True)
        return 130


if __name__ == "__main__":
    sys.exit(main())
