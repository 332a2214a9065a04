"""The ``scratchformer`` program (and ``python -m scratchformer``): ``cli.main``.

Loading NumPy and every command's module takes a few tenths of a second before the
command's own handling of Ctrl-C begins. From the first line of ``main`` until then,
Ctrl-C ends the program at once in one line with the shell's code for it (130): nothing
has been written yet, and an exception raised into an import would come out of NumPy
wrapped in a long ImportError. Once the command has returned, Ctrl-C is ignored: there
is nothing left to stop, and the exit code is the command's. The package's ``__init__``
and this module import nothing heavy, so only Python's own start-up comes before the
guard.

A standard stream closed by the shell (``<&-``, ``>&-``, ``2>&-``) is given /dev/null at
its descriptor, so that no file the program opens takes its number (a checkpoint read as
standard input, a log written where standard output was); the command line then refuses
a command that needs the closed stream (``cli.closed_streams``)."""

import os
import signal
import sys


def _stop(signum, frame) -> None:
    """Ctrl-C outside a command's own handling: one line, exit 130, nothing unwound."""
    try:
        os.write(2, b"scratchformer: stopped by Ctrl-C\n")
    finally:
        os._exit(128 + signal.SIGINT)


def main() -> int:
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # a background job's stays
        signal.signal(signal.SIGINT, _stop)  # the command puts Python's own back meanwhile
    try:
        from scratchformer import writer

        writer.fill_closed_standard_streams()
        from scratchformer.cli import main as run

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
