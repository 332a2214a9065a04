"""``scratchformer <command>``: the command-line interface.

Each command lives in its own module that defines ``add_parser(subparsers)``; the
parser it adds sets ``func`` to a function taking the parsed arguments and returning
an exit code. Modules are listed in ``COMMANDS`` and imported on start.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib
import os
import re
import select
import signal
import sys
import threading
import time

from scratchformer import __version__
from scratchformer.app import distributed, progress, writer
from scratchformer.app.errors import Interrupted, signal_name
from scratchformer.engine import backend
from scratchformer.engine.errors import ScratchformerError

DEBUG_HELP = "on an error, show Python's traceback instead of the one-line message"
NO_PROGRESS_HELP = (
    "no progress bar: a line every 10 s on stderr instead (the way it is when stderr is "
    "not a terminal)"
)

#: Modules that contribute sub-commands, in the order ``--help`` lists them.
COMMANDS = [
    "scratchformer.app.commands.gradcheck",
    "scratchformer.app.commands.exercise",
    "scratchformer.app.commands.train",
    "scratchformer.app.commands.average",
    "scratchformer.app.commands.export",
    "scratchformer.app.commands.import_model",
    "scratchformer.app.commands.translate",
    "scratchformer.app.commands.evaluate",
    "scratchformer.app.commands.plot",
    "scratchformer.app.commands.data",
    "scratchformer.app.commands.generate",
    "scratchformer.app.commands.kernels",
]


class Parser(argparse.ArgumentParser):
    """argparse that reports a bad command line in one line: the problem, a guess at the
    flag or choice meant where one is close, and where to read more (no usage block)."""

    def parse_known_args(self, args=None, namespace=None):
        self._given = list(sys.argv[1:] if args is None else args)  # for ``_negative``
        return super().parse_known_args(args, namespace)

    def error(self, message: str):
        message = self._negative(message) or message
        self.exit(2, f"{self.prog}: error: {message}{self._guess(message)} (see --help)\n")

    def _negative(self, message: str) -> str:
        """argparse takes a negative number in scientific notation (``--h -1e-3``) for an
        option and says the flag before it has no value: the message for the number
        itself instead (its type's verdict, or how to give it: ``--flag=-1e-3``)."""
        m = re.match(r"argument (\S+): expected (?:at least )?one argument", message)
        given = getattr(self, "_given", [])
        if not m:
            return ""
        for flag in m.group(1).split("/"):
            if flag in given and given.index(flag) + 1 < len(given):
                value = given[given.index(flag) + 1]
                try:
                    float(value)
                except ValueError:
                    return ""
                action = self._option_string_actions.get(flag)
                try:
                    if action is not None and action.type is not None:
                        action.type(value)
                except argparse.ArgumentTypeError as e:
                    return f"argument {m.group(1)}: {e}"
                return f"argument {m.group(1)}: for a negative number, write {flag}={value}"
        return ""

    def _guess(self, message: str) -> str:
        m = re.match(r"unrecognized arguments: (\S+)", message)
        if m:
            known = [o for a in self._actions for o in a.option_strings if o.startswith("--")]
            close = difflib.get_close_matches(m.group(1).split("=")[0], known, n=1)
            return f" (did you mean {close[0]}?)" if close else ""
        m = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if m:
            choices = [c.strip().strip("'") for c in m.group(2).split(",")]  # quoted or not
            close = difflib.get_close_matches(m.group(1), choices, n=1, cutoff=0.5)
            return f" (did you mean {close[0]}?)" if close else ""
        return ""


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="scratchformer",
        description="The Transformer of 'Attention Is All You Need', from scratch on NumPy.",
    )
    backend = {
        "choices": ["numpy", "cupy"],
        "help": "array backend (default: $SCRATCHFORMER_BACKEND or numpy)",
    }
    parser.add_argument("--backend", **backend, default=None)
    parser.add_argument("--version", action="version", version=f"scratchformer {__version__}")
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        importlib.import_module(name).add_parser(sub)
    for command in sub.choices.values():  # also after the command: train ... --debug
        command.add_argument(
            "--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP
        )
    for command in _leaves(sub):  # every command takes it, whether it shows progress or not
        if "--no-progress" not in command._option_string_actions:
            command.add_argument("--no-progress", action="store_true", help=NO_PROGRESS_HELP)
        # also after the command (train --backend cupy), as people write it
        command.add_argument("--backend", **backend, default=argparse.SUPPRESS)
    _plain_help(parser)
    return parser


def _leaves(sub) -> list[argparse.ArgumentParser]:
    """The parsers of every command (``plot attention``, not ``plot``)."""
    found = []
    for command in sub.choices.values():
        nested = [a for a in command._actions if isinstance(a, argparse._SubParsersAction)]
        found += _leaves(nested[0]) if nested else [command]
    return found


def _plain_help(parser: argparse.ArgumentParser) -> None:
    """Help as plain text: the commands' descriptions are their module docstrings, whose
    ``literal`` marks are for the API documentation; the layout of their examples is kept."""
    if parser.description:
        parser.description = re.sub(r"``([^`]+)``", r"\1", parser.description)
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _plain_help(sub)


def _command_parser(parser: argparse.ArgumentParser, args) -> argparse.ArgumentParser:
    """The (sub-)parser of the command ``args`` were parsed for: ``scratchformer plot
    schedule`` for ``plot schedule --stpes 3``, so that the error names it."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = action.choices.get(getattr(args, action.dest, None) or "")
            if chosen is not None:
                return _command_parser(chosen, args)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    if not (sys.argv[1:] if argv is None else argv):  # bare `scratchformer`: what it can do
        parser.print_help()
        return 0
    args, extra = parser.parse_known_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # for ``--ranks``' mpiexec
    if extra:
        _command_parser(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command not in SEVERAL_PROCESSES and distributed.launched_size() > 1:
        return _one_process_only(args.command)
    # before anything is made: a run's name is printed in its header
    unusable = closed_streams(args) or progress.unwritable(args.argv)
    if unusable:
        print(f"scratchformer {args.command}: error: {unusable}", file=sys.stderr)
        return 2
    try:
        with _terminate_interrupts():
            if args.backend:
                backend.set_backend(args.backend)
            else:
                backend.require_env_backend()
            backend.quiet_float_warnings()
            from scratchformer.engine import dispatch  # noqa: PLC0415  (loaded once the guard is on)

            if dispatch.env_error is not None:  # SCRATCHFORMER_KERNELS misspelt
                raise dispatch.env_error
            return int(args.func(args) or 0)
    except KeyboardInterrupt as e:
        return _interrupted(args, e)
    except Exception as e:
        if isinstance(e, BrokenPipeError) and _reader_gone():
            return 128 + signal.SIGPIPE
        if args.debug:
            raise
        return _end_every_rank(args, e)


def closed_streams(args) -> str:
    """Why the command cannot run with the standard streams it was given, in one line,
    or '': standard output closed (``>&-``: Python then has no ``sys.stdout``), where every
    command writes what it does; standard input closed (``<&-``) for a command that reads
    it (``translate`` without ``--input``)."""
    if sys.stdout is None:
        return (
            "standard output is closed (>&-): what the command writes would go nowhere; "
            "redirect it to a file, or to /dev/null to silence it"
        )
    if sys.stdin is None and getattr(args, "input", None) == "-":
        return (
            "standard input is closed (<&-), and the sentences are read from it: give "
            "--input FILE, or send them through a pipe"
        )
    return ""


def _reader_gone() -> bool:
    """Whether the reader of standard output has left (``scratchformer ... | head``):
    then the command stops quietly, as Unix tools do, with the shell's code for SIGPIPE.
    Standard output is pointed at /dev/null, so that Python's flush at exit does not
    fail again. A broken pipe elsewhere (a child process, a socket) is an error."""
    try:
        fd = sys.stdout.fileno()
        poll = select.poll()
        poll.register(fd, select.POLLOUT)
        gone = any(ev & select.POLLERR for _, ev in poll.poll(0))  # a pipe with no reader
    except (OSError, ValueError, AttributeError):  # no file behind stdout
        return False
    if gone:
        null = writer.devnull_descriptor()
        os.dup2(null, fd)
        os.close(null)
    return gone


#: the commands that run as several processes (data parallel); every other one refuses
#: an MPI launcher's several processes (each would do the whole work, or race to write)
SEVERAL_PROCESSES = ("train",)


def _one_process_only(command: str) -> int:
    """A command started as several processes by an MPI launcher: refused in one line,
    told by rank 0 alone (the others end at once, saying nothing)."""
    if distributed.launched_rank() in (0, None):
        print(
            f"scratchformer {command}: error: {command} runs as one process, and "
            f"{distributed.launched_size()} were started (mpiexec -n ...): start it "
            "without mpiexec (only train runs as several)",
            file=sys.stderr,
            flush=True,
        )
    return 2


@contextlib.contextmanager
def _terminate_interrupts():
    """SIGTERM ends a command as Ctrl-C does (an exception, so that what is open is
    closed and a run's lock released), not by the operating system's default. A training
    run puts its own handlers of both on top while it trains (train/interrupts.py)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum, frame):
        raise Interrupted(signum, f"stopped by {signal_name(signum)}", at_once=True)

    previous = signal.signal(signal.SIGTERM, terminate)
    # Ctrl-C raises KeyboardInterrupt while the command runs (the program's start-up
    # handler, ``__main__``, ends it at once), and the start-up handler is back after it
    previous_int = signal.getsignal(signal.SIGINT)
    if previous_int is not signal.SIG_IGN:  # ignored (a background job): left ignored
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        if previous_int is not None:  # None: set outside Python, left as it is
            signal.signal(signal.SIGINT, previous_int)


def _interrupted(args, e: KeyboardInterrupt) -> int:
    """The end of a command stopped by Ctrl-C or SIGTERM: its message (by rank 0 alone
    with several processes) and the shell's code for it, 128 + the signal's number. A
    rank stopped where it was ends the others, which may be waiting for it."""
    signum = getattr(e, "signum", signal.SIGINT)
    message = getattr(e, "message", f"stopped by {signal_name(signum)}")
    w = distributed.current()
    if message and (w is None or w.main):
        print(f"scratchformer {args.command}: {message}", file=sys.stderr, flush=True)
    code = 128 + signum
    if w is not None and w.size > 1 and getattr(e, "at_once", True):
        w.abort(code)
    return code


def _end_every_rank(args, e: Exception) -> int:
    """Report ``e``; with more than one process, a failed rank then ends them all: the
    others would wait for it forever in the next all-reduce. Another rank than 0 waits a
    second before it says anything, so that an error every rank meets (a bad setting) is
    told once, by rank 0, whose end of the job stops the others before they speak."""
    w = distributed.current()
    if w is None or w.size == 1:  # one process, or ranks without MPI: each tells its own
        return _report(args.command + distributed.rank_label(), e)
    if not w.main:
        time.sleep(1.0)
        if not getattr(args, "no_progress", True):
            print(file=sys.stderr)  # off the line of rank 0's progress bar, still drawn
    code = _report(f"{args.command} ({w.describe()})", e)
    w.abort(code)
    return code


#: what to lower when a command runs out of memory, by command
LOWER = {
    "train": "lower train.max_tokens (--max-tokens; raise --accum-steps to keep the batch)",
    "translate": "lower --batch-size, --beam or --samples",
    "evaluate": "lower --batch-size or --beam",
    "generate": "ask for fewer --samples or a shorter --max-new",
    "gradcheck": "check a smaller model (--preset, --layers) or fewer --directions",
}


def out_of_memory(command: str, e: MemoryError) -> str:
    """The one line for a MemoryError: on a GPU (CuPy's OutOfMemoryError) or the host,
    with CuPy's figures, and the setting to lower for ``command``."""
    name = command.split()[0]
    where = "GPU" if type(e).__module__.startswith("cupy") else "host"
    figures = f" ({str(e).rstrip('.')})" if where == "GPU" and str(e) else ""
    advice = LOWER.get(name, "ask for less (a smaller batch, beam, model or length)")
    return f"out of {where} memory{figures}: {advice}; nothing written so far is lost"


def _report(command: str, e: Exception) -> int:
    """One line on stderr for an error that reached the top; the exit code."""
    if isinstance(e, UnicodeEncodeError):  # text read from a file, written to a terminal
        print(
            f"scratchformer {command}: error: the output encoding cannot write "
            f"{e.object[e.start : e.end]!r} ({e.encoding}): set PYTHONIOENCODING=utf-8, or a "
            "UTF-8 locale",
            file=sys.stderr,
        )
        return 2
    if isinstance(e, (ScratchformerError, OSError, RuntimeError)):
        print(f"scratchformer {command}: error: {e}", file=sys.stderr)
        return 2
    if isinstance(e, MemoryError):  # every request is estimated first: this one fell short
        print(f"scratchformer {command}: error: {out_of_memory(command, e)}", file=sys.stderr)
        return 2
    # The last line of defence: every error a user can cause has its own message; one
    # that gets here is a bug of ours, reported in one line rather than a traceback.
    first = str(e).splitlines()[0] if str(e) else ""
    print(
        f"scratchformer {command}: internal error: {type(e).__name__}: {first} "
        "(run with --debug for the traceback)",
        file=sys.stderr,
    )
    return 3


if __name__ == "__main__":
    sys.exit(main())
