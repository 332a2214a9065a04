"""The learner's code runs in a process of its own, which only computes; everything that
judges runs here, in the checker, which never imports the learner's file.

    g = graded(ex, path, seed, limit=10.0)        # check one file
    with Session({name: (path, text)}, folder) as s:
        code = s.code(name)                       # {function: a stand-in that calls it there}
        with s.plugged([name, ...]): ...          # the stand-ins in the engine's seams

The learner's process (learner.py) is forked from this one with the learner's files
read here (the text that is checked for shortcuts is the text that runs). Each call of
a stand-in sends its arguments there (dout, the cache, the module: made here, by the
engine's forward), runs the learner's function on them, and gets back plain arrays
(wire.py: never unpickled, checked for dtype and shape), which the grader then judges
as it judged the learner's own results in one process: the finite differences, the
comparison, the diagnosis, ``exercise train``'s verdict all run here. So no rebinding
or patching inside the learner's process (of the grader, of NumPy, of the pipe) reaches
the judgement.

The learner's code gets ``limit`` seconds in all (an endless loop is stopped; with
``each``, ``exercise train``'s verdict, each exercise's code gets ``limit`` in all of
each whole-model gradient: ``anew``), a new
session without a terminal, a scratch copy of the folder as its current folder
(sandbox.py), and what it prints is kept and shown under "your code printed:". When the
session ends, every process the code started is ended (procs.py), what it changed in
the folder is put back and said. Where fork is not available, or on a GPU backend (a
CUDA context does not survive a fork), the code is graded in this process.
"""

from __future__ import annotations

import contextlib
import mmap
import multiprocessing
import os
import select
import signal
import sys
import time
import traceback
from pathlib import Path

from scratchformer.engine import backend
from scratchformer.engine.backend import np
from scratchformer.exercises import EXERCISES, files, learner, procs, sandbox, wire
from scratchformer.exercises import grade as grading
from scratchformer.exercises.in_process import InProcess
from scratchformer.exercises.spec import LearnerError, NotWritten, Shortcut, shown

#: seconds the learner's code may run per exercise before it is stopped
DEFAULT_LIMIT = 10.0
#: what is kept of what the learner's code prints (the rest is counted)
PRINTED_LINES, PRINTED_WIDTH = 40, 200
FRAME = wire.HEADER


def available() -> bool:
    return "fork" in multiprocessing.get_all_start_methods() and backend.backend_name() == "numpy"


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


def shown_line(raw: str) -> str:
    """A line the learner's code printed, as the checker shows it: control characters
    (a terminal's escape sequences, a carriage return) written out, never obeyed."""
    out = "".join(c if c.isprintable() or c == "\t" else repr(c)[1:-1] for c in raw)
    return out[:PRINTED_WIDTH] + (" ..." if len(out) > PRINTED_WIDTH else "")


class Session:
    """The learner's process for the files ``texts`` (``{exercise: (path, text)}``) of
    ``folder``; see the module docstring. ``check``: the engine's own backward made
    unavailable there (a check; not for ``train``, whose files passed theirs).
    ``keep``: paths of the folder the code may write. ``jobs``: ``{name: fn(code)}``
    run there by ``run`` (forked with it: the demonstration run). ``stream``: called
    with each line the code prints, as it prints it (else the lines are kept).
    ``each``: ``limit`` is each exercise's (until ``anew``), as in its check, and an
    error of a call names the file and the function (``stopped``: the exercise that
    stopped)."""

    def __init__(self, texts: dict, folder, limit=DEFAULT_LIMIT, check=True, keep=(),
                 jobs=None, stream=None, each=False):
        self.texts, self.folder, self.limit = texts, Path(folder), limit
        self.check, self.keep, self.jobs, self.stream = check, keep, jobs or {}, stream
        self.each = each
        self.spent: dict = {}  # seconds per exercise since ``anew`` (None: loading)
        self.most: dict = {}  # the most seconds per exercise between two ``anew``
        self.current: str | None = None  # the exercise whose code runs now
        self.stopped: str | None = None
        self.dead: LearnerError | None = None
        self.names: dict = {}
        self.active: tuple = ()
        self.used = 0.0
        self.printed: list[str] = []
        self.more = 0  # lines printed past PRINTED_LINES
        self.notes: list[str] = []
        self.pid = None
        self._seq = 0
        self._out_open = True
        self._rep = bytearray()
        self._partial = b""

    # -- the process -----------------------------------------------------------------------
    def __enter__(self) -> Session:
        self.box = sandbox.Sandbox(self.folder, self.keep)
        self._guard = procs.guarding()
        self._guard.__enter__()
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start(self) -> None:
        req_r, self.req = os.pipe()
        self.rep, rep_w = os.pipe()
        self.out, out_w = os.pipe()
        self.before = procs.children_now()
        self.slot = mmap.mmap(-1, learner.SLOT)  # shared: the learner's function running
        texts = {n: (Path(p), t, str(self.box.scratch / Path(p).name), str(Path(p).resolve()))
                 for n, (p, t) in self.texts.items()}
        for stream in (sys.stdout, sys.stderr):  # nothing buffered is printed twice
            stream.flush()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the learner's process: it never returns from here
            try:
                for fd in (self.req, self.rep, self.out):
                    os.close(fd)
                learner.start(parent, (req_r, rep_w, out_w), str(self.box.scratch),
                              self.box.name, self.box.token)
                learner.serve(req_r, rep_w, learner.Learner(texts, self.check, self.slot),
                              self.jobs)
            except BaseException:  # noqa: BLE001 - ours: said on the output pipe
                traceback.print_exc()
            finally:
                os._exit(70)
        self.pid = pid
        for fd in (req_r, rep_w, out_w):
            os.close(fd)
        os.set_blocking(self.req, False)
        self.box.started(pid, (self.req, self.rep, self.out))
        try:
            found = self._ask(("load",))
            if found[0] != "ok" or len(found) != 2:
                self._fail(found)
            if not isinstance(found[1], dict) or set(found[1]) != set(self.texts):
                self._fail(("tampered", "its answer to the checker's first request"))
        except LearnerError as e:  # the file did not load: the session holds why
            self.dead = e
            return
        self.names = {n: [f for f in fs if isinstance(f, str)]
                      for n, fs in found[1].items() if n in self.texts and isinstance(fs, list)}

    def close(self) -> None:
        """End every process the code started, keep what it printed, put the folder back."""
        if getattr(self, "box", None) is None:
            return
        try:
            if self.pid is not None:
                procs.end_all(self.pid, self.before)
                self.pid = None
            for fd in (getattr(self, "out", None),):
                if fd is not None:
                    with contextlib.suppress(OSError):
                        while select.select([fd], [], [], 0.05)[0]:
                            chunk = os.read(fd, 1 << 16)
                            if not chunk:
                                break
                            self._printed(chunk)
            self._printed(b"", end=True)
            for fd in ("req", "rep", "out"):
                with contextlib.suppress(OSError, AttributeError, TypeError):
                    os.close(getattr(self, fd))
            if getattr(self, "slot", None) is not None:
                self.slot.close()
        finally:
            self._guard.__exit__(None, None, None)
            self.notes += self.box.close()
            self.box = None

    # -- the learner's functions, called from here -------------------------------------------
    def code(self, exercise: str) -> dict:
        """``{function: stand-in}`` for the functions the learner's file of ``exercise``
        defines: each call runs the learner's function in its process."""
        path = str(Path(self.texts[exercise][0]).resolve())
        found = {}
        for fn in self.names.get(exercise, []):
            def stand_in(*args, _fn=fn, **kwargs):
                return self.call(exercise, _fn, args, kwargs)

            stand_in.__name__ = stand_in.__qualname__ = fn
            stand_in.learner_file = path
            found[fn] = stand_in
        return found

    @contextlib.contextmanager
    def plugged(self, names):
        """The exercises ``names`` in the engine's seams here, their stand-ins calling
        the learner's code with the same exercises in place there."""
        with contextlib.ExitStack() as stack:
            for name in names:
                stack.enter_context(EXERCISES[name].plug(self.code(name)))
            old, self.active = self.active, tuple(names)
            try:
                yield
            finally:
                self.active = old

    def anew(self) -> None:
        """Each exercise's code gets ``limit`` seconds again (with ``each``)."""
        for k, t in self.spent.items():
            self.most[k] = max(t, self.most.get(k, 0.0))
        self.spent = {}

    def call(self, exercise: str, function: str, args: tuple, kwargs: dict):
        self.current = exercise
        try:
            return self._call(exercise, function, args, kwargs)
        except LearnerError as e:
            if not self.each or isinstance(e, Shortcut):
                raise
            self.stopped = exercise  # (the time limit: the function running then)
            raise self._named(e, exercise, function) from None
        finally:
            self.current = None

    def _named(self, e: LearnerError, exercise: str, function: str) -> LearnerError:
        """``e`` said with the learner's file and function, when it does not say them;
        for the time limit, the function that was running then (one of the learner's
        that ``function`` called, in their process: the slot says which)."""
        if isinstance(e, TimeLimit):
            top = exercise
            inner = learner.running(self.slot) if getattr(self, "slot", None) else None
            if inner and inner[0] in self.texts:
                exercise, function = inner
            self.stopped = exercise
            called = "" if exercise == top else f", called by your {top}"
            said = LearnerError(
                f"{shown(str(self.texts[exercise][0]))}: {function} ran past the time limit "
                f"of {self.limit:g} s in one of the whole model's gradients{called}, and was "
                "stopped: slow at the model's sizes, or an endless loop? --time-limit gives "
                "it more")
            said.at = None
            if self.dead is e:
                self.dead = said
            return said
        where = shown(str(self.texts[exercise][0]))
        if where in str(e):
            return e
        said = LearnerError(f"{where}: {function}: {e}")
        said.at = getattr(e, "at", None)
        if self.dead is e:
            self.dead = said
        return said

    def _call(self, exercise: str, function: str, args: tuple, kwargs: dict):
        given = wire.slots(args, kwargs)
        read_only = [n for n, (a, _, _) in given.items()
                     if isinstance(a, np.ndarray) and not a.flags.writeable]
        data = wire.request((args, kwargs))
        found = self._ask(("call", exercise, function, read_only, self.active, data))
        if found[0] != "ok" or len(found) != 4:
            self._fail(found)
        _, result, changed, gone = found
        if not isinstance(changed, dict) or not isinstance(gone, list):
            self._fail(("tampered", "an answer of a form the checker does not know"))
        wire.write_back(function, given, changed, gone)
        return wire.resolve(result, given)

    def run(self, job: str):
        """The job ``job`` (see ``jobs``) run in the learner's process: what it returned."""
        found = self._ask(("run", job))
        if found[0] != "ok" or len(found) != 2:
            self._fail(found)
        return found[1]

    def _fail(self, found):
        """Raise what the learner's process answered instead of a result: an error of
        the code, "not written", a shortcut; anything else is an answer the learner's
        process was made to give (``tampered``), and ends the session."""
        kind = found[0] if isinstance(found, tuple) and found else None
        text = found[1] if len(found) > 1 and isinstance(found[1], str) else ""
        if kind == "not written":
            raise NotWritten(text)
        if kind == "shortcut":
            raise Shortcut(text)
        if kind == "learner":
            e = LearnerError(text or "your code failed")
            at = found[2] if len(found) > 2 else None
            if isinstance(at, tuple) and len(at) == 2 and isinstance(at[0], int):
                e.at = at
            raise e
        self.dead = tampered(text if kind == "tampered" else "an answer that is no result")
        raise self.dead

    # -- the pipe ---------------------------------------------------------------------------
    def _ask(self, message):
        if self.dead is not None:
            raise self.dead
        self._seq += 1
        data = wire.request((self._seq, message))
        t0 = time.perf_counter()
        try:
            self._send(FRAME.pack(len(data)) + data, t0)
            seq, value = self._receive(t0)
        except LearnerError as e:
            self.dead = e
            if self.pid is not None:
                procs.end_all(self.pid, self.before)
                self.pid = None
            raise
        finally:
            dt = time.perf_counter() - t0
            self.used += dt
            self.spent[self.current] = self.spent.get(self.current, 0.0) + dt
        if seq != self._seq:
            self.dead = tampered("an answer out of turn (written into the checker's pipe)")
            raise self.dead
        return value if isinstance(value, tuple) and value else ("error", "")

    def _left(self, t0: float) -> float | None:
        if self.limit is None:
            return None
        spent = self.spent.get(self.current, 0.0) if self.each else self.used
        left = self.limit - spent - (time.perf_counter() - t0)
        if left <= 0:
            raise TimeLimit(
                f"your code ran past the time limit of {self.limit:g} s and was stopped (an "
                "endless loop? --time-limit gives it more)"
            )
        return left

    def _send(self, data: bytes, t0: float) -> None:
        view = memoryview(data)
        while view:
            w = select.select([self.out] if self._out_open else [], [self.req], [],
                              self._left(t0))
            if self.out in w[0]:
                self._read_out()
            if self.req in w[1]:
                try:
                    view = view[os.write(self.req, view[: 1 << 16]) :]
                except BrokenPipeError:
                    raise LearnerError(self._gone()) from None

    def _receive(self, t0: float):
        while True:
            if len(self._rep) >= FRAME.size:
                (n,) = FRAME.unpack_from(self._rep)
                if n > wire.MAX_MESSAGE:
                    raise LearnerError("your code's process sent more than the checker takes")
                if len(self._rep) >= FRAME.size + n:
                    data = bytes(self._rep[FRAME.size : FRAME.size + n])
                    del self._rep[: FRAME.size + n]
                    try:
                        found = wire.read_reply(data)
                    except wire.WireError as e:
                        raise tampered(str(e)) from None
                    if not isinstance(found, tuple) or len(found) != 2:
                        raise tampered("an answer out of form")
                    return found
            watch = [self.rep, self.out] if self._out_open else [self.rep]
            ready = select.select(watch, [], [], self._left(t0))[0]
            if self.out in ready:
                self._read_out()
            if self.rep in ready:
                chunk = os.read(self.rep, 1 << 20)
                if not chunk:
                    raise LearnerError(self._gone())
                self._rep += chunk

    def _gone(self) -> str:
        """Why the learner's process stopped answering (it is reaped here)."""
        for _ in range(100):
            with contextlib.suppress(ChildProcessError):
                pid, status = os.waitpid(self.pid, os.WNOHANG)
                if pid:
                    self.pid = None
                    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else (
                        os.WEXITSTATUS(status))
                    return _ended(code)
            time.sleep(0.01)
        return "your code closed the checker's pipe"

    def _read_out(self) -> None:
        chunk = os.read(self.out, 1 << 16)
        if chunk:
            self._printed(chunk)
        else:
            self._out_open = False

    def _printed(self, chunk: bytes, end: bool = False) -> None:
        text = self._partial + chunk
        lines = text.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
        self._partial = b"" if end else lines.pop()
        for raw in lines:
            if end and not raw:
                continue
            line = shown_line(raw.decode("utf-8", "replace"))
            if self.stream is not None:
                self.stream(line)
            elif len(self.printed) < PRINTED_LINES:
                self.printed.append(line)
            else:
                self.more += 1

    def printed_block(self, indent: str = "  ") -> list[str]:
        """What the code printed, under its header, indented; [] if nothing."""
        if not self.printed:
            return []
        block = [f"{indent}your code printed:"] + [f"{indent}  | {x}" for x in self.printed]
        if self.more:
            block.append(f"{indent}  | ... and {self.more} more lines")
        return block


def session(texts: dict, folder, **kw):
    """A ``Session`` for the files ``texts``, or ``InProcess`` where there can be none."""
    return Session(texts, folder, **kw) if available() else InProcess(texts, folder, **kw)


class TimeLimit(LearnerError):
    """The learner's code ran past its time limit, and was stopped."""


def tampered(what: str) -> Shortcut:
    """The learner's process answered what no learner's function returns: its answers
    were changed (the pipe, the reply, the protocol patched). Nothing it computes can be
    graded, so the file fails (a shortcut, not a crash)."""
    return Shortcut(f"your code changed how its process answers the checker ({what}): "
                    "nothing it computes can be graded, so nothing passes while it does")


# -- grading in the learner's process ----------------------------------------------------------
def graded(ex, path, seed=None, limit: float | None = DEFAULT_LIMIT):
    """``grade`` of the learner's file ``path`` for ``ex``, its code run in a process of its
    own; a Grade of status "broken" with the one line when the code gives no result."""
    path = Path(path)
    if not available():
        try:
            code = files.load(path, ex)
        except LearnerError as e:
            return grading.Grade(ex, path, status=grading.BROKEN, message=str(e), seed=seed)
        return grading.grade(ex, code, path, seed=seed)
    try:
        text = files.read(path)
    except (LearnerError, OSError) as e:
        return grading.Grade(ex, path, status=grading.BROKEN, message=str(e), seed=seed)
    with Session({ex.name: (path, text)}, path.resolve().parent, limit) as s:
        if s.dead is None:
            g = grading.grade(ex, s.code(ex.name), path, seed=seed, text=text)
        else:  # the file did not load (or reached the engine's backward as it did)
            status = grading.FAILING if isinstance(s.dead, Shortcut) else grading.BROKEN
            g = grading.Grade(ex, path, status=status, message=str(s.dead), seed=seed)
    g.printed = s.printed_block()
    if s.notes:
        g.notes = s.notes
        if g.status == grading.PASSING:
            g.status = grading.FAILING
    return g


__all__ = ["DEFAULT_LIMIT", "InProcess", "Session", "TimeLimit", "available", "graded",
           "session", "shown_line"]
