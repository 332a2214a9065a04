"""The learner's code run in a child process, with a time limit: whatever it does (exit(),
os._exit, an endless loop, a crash, a signal), the command that ran it goes on and says
in one line what happened.

    g = graded(ex, path, seed, limit=10.0)      # load and grade ``path`` in a child
    value = isolated(fn, limit, path)           # any fn() -> picklable, in a child

The child is a fork (the engine already imported: it costs milliseconds); it sends its
result back through a pipe. A child that ends without sending one, or runs past the
limit (then it is killed), becomes ``LearnerError``. Where fork is not available, or on
a GPU backend (a CUDA context does not survive a fork), the code runs in this process.
"""

from __future__ import annotations

import multiprocessing
import signal
import sys
import traceback

from scratchformer.engine import backend
from scratchformer.exercises import files
from scratchformer.exercises import grade as grading
from scratchformer.exercises.spec import LearnerError, Mistake, shown

#: seconds the learner's code may run per exercise before it is stopped
DEFAULT_LIMIT = 10.0


def available() -> bool:
    return "fork" in multiprocessing.get_all_start_methods() and backend.backend_name() == "numpy"


def _where(paths, tb) -> tuple[str, tuple] | None:
    """The learner's file (of ``paths``, one or several) and ``(line, function)`` of the
    last frame of ``tb`` in one of them."""
    wanted = {paths} if isinstance(paths, str) else set(paths or ())
    found = None
    for frame in traceback.extract_tb(tb):  # the deepest frame of theirs
        if frame.filename in wanted:
            found = (frame.filename, (frame.lineno, frame.name))
    return found


def _exit_line(e: SystemExit, paths) -> str:
    at = _where(paths, e.__traceback__)
    where = f" ({shown(at[0])}, line {at[1][0]})" if at else ""
    return f"your code called exit({'' if e.code is None else repr(e.code)}){where}"


def _child(conn, fn, path) -> None:
    # Ctrl-C is the parent's to handle (it stops this child); a signal to this process
    # ends it, as it would end a program of the learner's
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        try:
            result = ("ok", fn())
        except SystemExit as e:
            result = ("error", _exit_line(e, path))
        except LearnerError as e:
            result = ("learner", str(e))
        except BaseException as e:  # noqa: BLE001 - anything the learner's code raises
            at = _where(path, e.__traceback__)
            where = f"{shown(at[0])}, line {at[1][0]}: " if at else ""
            result = ("error", f"{where}{type(e).__name__}: {e}".split("\n")[0])
            if at is None:  # ours, not theirs: the traceback is for whoever fixes it
                traceback.print_exc()
        conn.send(result)
    finally:
        conn.close()


def _ended(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the process running your code was killed by {name}"
    return (
        f"the process running your code ended (exit status {code}) before it returned: "
        "os._exit, or a crash"
    )


def isolated(fn, limit: float | None = DEFAULT_LIMIT, path=None):
    """``fn()`` in a child process: its value, or LearnerError in one line saying why
    there is none (the learner's exit, a crash, a signal, the time limit). ``path``: the
    learner's file, or a tuple of them, that an error is traced to."""
    if not available():
        return fn()
    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    for stream in (sys.stdout, sys.stderr):  # nothing buffered is printed twice
        stream.flush()
    child = ctx.Process(target=_child, args=(send, fn, path), daemon=True)
    child.start()
    send.close()
    try:
        if not receive.poll(limit):
            if child.is_alive():
                child.kill()
                child.join()
                raise LearnerError(
                    f"your code ran past the time limit of {limit:g} s and was stopped (an "
                    "endless loop? --time-limit gives it more)"
                )
        try:
            kind, value = receive.recv()
        except EOFError:
            child.join()
            raise LearnerError(_ended(child.exitcode)) from None
    finally:
        receive.close()
        if child.is_alive():
            child.join(1.0)
        if child.is_alive():
            child.kill()
    if kind == "ok":
        return value
    raise LearnerError(value)


# -- grading in a child ------------------------------------------------------------------
def _portable(g) -> dict:
    """What a Grade holds, without the exercise and its mistakes' code (not picklable)."""
    return {
        "status": g.status,
        "message": g.message,
        "rows": g.rows,
        "wrong": g.wrong,
        "diagnosis": [(m.name, m.says, m.hint, parts) for m, parts in g.diagnosis],
        "seconds": g.seconds,
        "seed": g.seed,
    }


def graded(ex, path, seed=None, limit: float | None = DEFAULT_LIMIT):
    """``grade(ex, files.load(path, ex), path, seed=seed)`` run in a child process; a Grade
    of status "broken" with the one line when the child gives no result."""

    def work():
        return _portable(grading.grade(ex, files.load(path, ex), path, seed=seed))

    try:
        found = isolated(work, limit, str(path.resolve()) if path else None)
    except LearnerError as e:
        return grading.Grade(ex, path, status=grading.BROKEN, message=str(e), seed=seed)
    diagnosis = [
        (Mistake(n, says, hint, {}), parts) for n, says, hint, parts in found.pop("diagnosis")
    ]
    return grading.Grade(ex, path, diagnosis=diagnosis, **found)


__all__ = ["DEFAULT_LIMIT", "available", "graded", "isolated"]
