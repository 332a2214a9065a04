"""The process that runs a learner's code: it only computes.

Forked by the checker (isolate.py), it loads the learner's files and then answers
requests until it is killed:

    ("load",)                                   -> {exercise: [functions it defines]}
    ("call", exercise, function, read_only, plugged, pickled (args, kwargs))
                                                -> ("ok", result, changed, gone)
    ("run", name)                               -> ("ok", what the checker's job returned)

A call runs the learner's function on the arrays the checker sent (copies of its own),
with the exercises named in ``plugged`` put in place as in the checker, and returns
what it returned and every array it was given that it changed (``wire.slots``: the
checker writes those into its own arrays, so a write into ``dout`` is seen there). An
error is ``("learner", one line, (line, function) or None)``, ``("not written", ...)``
or ``("shortcut", ...)``. Replies are plain data (wire.py): nothing decides here.

Before the learner's file is loaded, the engine's own backward for the exercise is
made unavailable here (``tripwire``): its functions, by whatever name or route they
are reached (an import, the op's table, a computed name, ``pickle``), raise instead;
an audit hook catches the engine's source compiled or run again (``reload``, ``exec``
of it, the module loaded afresh); and while the learner's function runs, a call of
the exercise's forward is finite differences of its own. The forwards still work:
the file's stubs import them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import traceback

from scratchformer.app import writer
from scratchformer.exercises import EXERCISES, files, procs, shortcuts, wire
from scratchformer.exercises.spec import (
    LearnerError,
    NotWritten,
    Shortcut,
    learner_code,
    shown,
    shown_from,
)


def start(parent: int, pipes: tuple, scratch: str, name: str, token: str) -> None:
    """The forked child's first steps: a session of its own, standard streams to the
    checker's output pipe, no other descriptor, the scratch folder as current."""
    req, rep, out = pipes
    procs.become_learner(parent, name)
    os.environ[procs.MARK] = token
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    low = 3
    for fd in sorted(k for k in (req, rep) if k >= 3):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 1 << 16)
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stdout, sys.stderr = writer.text_stream(1), writer.text_stream(2)
    sys.dont_write_bytecode = True
    shown_from(os.getcwd())
    os.chdir(scratch)


# -- the engine's backward made unavailable --------------------------------------------------
def forbidden(ex) -> list:
    """The engine's functions that compute the exercise's answer."""
    from scratchformer.engine import dispatch  # noqa: PLC0415

    found = list(ex.engine().values())
    names, tables, methods = shortcuts._engine_names(ex)
    for t in tables:
        for impl in dispatch.table(t).implementations():
            found += [impl.backward, impl.backward_into]
    for m in getattr(ex, "methods", ()):
        found.append(m.cls.__dict__.get(m.attr))
    if ex.kind == "optimizer":
        from scratchformer.engine.optim import adam  # noqa: PLC0415

        found += [adam.adam_update, adam.blocked_update, adam._block]
    return [f for f in dict.fromkeys(found) if f is not None and hasattr(f, "__code__")]


def tripwire(ex, paths: set) -> None:
    """Every function of ``forbidden(ex)`` raises Shortcut when called, from now on in
    this process; the engine's source of them compiled or run again raises too."""
    fns = forbidden(ex)
    names = {f.__code__.co_name for f in fns}
    sources = {os.path.realpath(f.__code__.co_filename) for f in fns}

    def reached(what: str):
        raise Shortcut(_said(paths, f"it reached the engine's own {what} while it ran"))

    for f in fns:
        glob = f.__globals__
        glob["_scratchformer_reached_"] = reached
        text = (f"def {f.__code__.co_name}(*a, **k):\n"
                f"    _scratchformer_reached_({f.__qualname__!r})\n")
        scope: dict = {}
        exec(compile(text, f.__code__.co_filename, "exec"), scope)
        if not f.__code__.co_freevars:
            f.__code__ = scope[f.__code__.co_name].__code__

    def hook(event, args):
        if event == "compile" and len(args) >= 2:
            src, filename = args[0], args[1]
            filename = os.path.realpath(str(filename)) if filename else ""
            if filename in paths:
                return
            text = src.decode("utf-8", "replace") if isinstance(src, bytes) else src
            if filename in sources or (
                isinstance(text, str) and any(f"def {n}(" in text for n in names)
            ):
                reached("code again, compiled from its source")
        elif event == "exec" and args and hasattr(args[0], "co_filename"):
            code = args[0]
            if os.path.realpath(code.co_filename) in sources and _defines(code, names):
                reached("code again, its module run afresh")

    sys.addaudithook(hook)


def _defines(code, names: set) -> bool:
    return any(hasattr(c, "co_name") and (c.co_name in names or _defines(c, names))
               for c in code.co_consts)


def _said(paths: set, what: str) -> str:
    """``what`` with the learner's line it came from, as shortcuts.py words it."""
    where = ""
    for frame in traceback.extract_stack():
        if os.path.realpath(frame.filename) in paths:
            where = f"{shown(frame.filename)}, line {frame.lineno}: "
    return (f"{where}{what}: a check of that proves nothing about your backward pass, so "
            "nothing passes while it is there")


@contextlib.contextmanager
def no_forward(ex, namespace: dict, paths: set):
    """A call of the exercise's forward (the engine's, or the file's copy of it) while
    the learner's function runs is finite differences of its own: Shortcut."""
    codes = set()
    for fname in shortcuts._forward_names(ex):
        for fn in (namespace.get(fname), getattr(ex, "forward", None)):
            if getattr(fn, "__name__", None) == fname and hasattr(fn, "__code__"):
                codes.add(fn.__code__)
    for m in getattr(ex, "methods", ()):
        fwd = m.cls.__dict__.get("forward")
        if fwd is not None:
            codes.add(fwd.__code__)
    if not codes:
        yield
        return
    seen: list = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code in codes and not seen:
            caller = frame.f_back
            while caller is not None and os.path.realpath(caller.f_code.co_filename) not in paths:
                caller = caller.f_back
            line = "" if caller is None else (
                f"{shown(caller.f_code.co_filename)}, line {caller.f_lineno}: ")
            seen.append((frame.f_code.co_name, line))

    old = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield
    finally:
        sys.setprofile(old)
    if seen:
        name, line = seen[0]
        raise Shortcut(f"{line}your backward called the forward ({name}) while it ran: finite "
                       "differences of your own: a check of that proves nothing about your "
                       "backward pass, so nothing passes while it is there")


# -- answering -------------------------------------------------------------------------------
class Learner:
    """The learner's functions, per exercise, and how to call them."""

    def __init__(self, texts: dict, check: bool, slot=None):
        # {exercise: (path as given, text, its copy in the scratch folder, absolute path)}
        self.texts, self.check = texts, check
        self.slot = slot  # shared with the checker: the learner's function running now
        self.code: dict = {}
        self.namespaces: dict = {}  # the whole of each file's namespace
        self.plugged: tuple = ()
        self.stack = contextlib.ExitStack()
        self.paths = {os.path.realpath(r) for _, _, _, r in texts.values()}

    def load(self) -> dict:
        if self.check:
            for name in self.texts:
                tripwire(EXERCISES[name], self.paths)
        found = {}
        for name, (path, text, scratch_file, resolved) in self.texts.items():
            ex = EXERCISES[name]
            self.namespaces[name] = {}
            self.code[name] = files.load_text(text, path, ex, scratch_file, resolved,
                                              self.namespaces[name])
            found[name] = [f for f, fn in self.code[name].items() if callable(fn)]
        return found

    def plug(self, plugged: tuple) -> None:
        """The exercises ``plugged`` in place, as in the checker (kept between calls: a
        cache the checker sends may name a learner's implementation in a table)."""
        if plugged == self.plugged:
            return
        self.stack.close()
        self.stack = contextlib.ExitStack()
        for name in plugged:
            self.stack.enter_context(EXERCISES[name].plug(self.marked(name)))
        self.plugged = plugged

    def marked(self, exercise: str) -> dict:
        """The exercise's functions, each saying in ``slot`` while it runs that it does
        (the checker, stopping the code at its time limit, names what ran then)."""
        if self.slot is None:
            return self.code[exercise]
        return {f: _marking(fn, exercise, f, self.slot) if callable(fn) else fn
                for f, fn in self.code[exercise].items()}

    def call(self, exercise, function, read_only, plugged, data):
        ex = EXERCISES[exercise]
        self.plug(tuple(plugged))
        args, kwargs = wire.read_request(data)
        fn = self.marked(exercise)[function]
        path = self.texts[exercise][3]
        doing = " / ".join(ex.functions) if ex.kind == "layer" else function
        given = wire.slots(args, kwargs)
        before = {n: (a, a.copy()) for n, (a, _, _) in given.items()}
        for n in read_only:
            if n in given:
                given[n][0].flags.writeable = False
        at: list = []
        try:
            with contextlib.ExitStack() as stack:
                if ex.kind == "layer" and exercise not in plugged:
                    stack.enter_context(ex.plug(self.marked(exercise)))
                stack.enter_context(learner_code(str(path), doing))
                if self.check:
                    stack.enter_context(no_forward(ex, self.namespaces[exercise], self.paths))
                try:
                    result = fn(*args, **kwargs)
                except BaseException as e:
                    at.append(_where(path, e.__traceback__))
                    if isinstance(e, SystemExit):
                        raise LearnerError(_exit_line(e, path)) from None
                    raise
        except LearnerError as e:
            e.at = at[0] if at else None
            raise
        now = wire.slots(args, kwargs)
        changed = {n: a for n, (a, _, _) in now.items()
                   if n in before and (a is not before[n][0] or wire.differs(a, before[n][1]))}
        gone = [n for n in before if n not in now]
        aliases = {id(a): n for n, (a, _, _) in now.items()}
        return "ok", _aliased(result, aliases), changed, gone


#: bytes of the slot that says which learner's function runs
SLOT = 256


def _marking(fn, exercise: str, function: str, slot):
    """``fn`` writing ``exercise NUL function`` into ``slot`` while it runs (what ran
    before it, back when it returns)."""
    label = f"{exercise}\0{function}".encode()[: SLOT - 1].ljust(SLOT, b"\0")

    def marked(*args, **kwargs):
        before = slot[:]
        slot[:] = label
        try:
            return fn(*args, **kwargs)
        finally:
            slot[:] = before

    marked.__name__ = marked.__qualname__ = getattr(fn, "__name__", function)
    return marked


def running(slot) -> tuple[str, str] | None:
    """``(exercise, function)`` that ``slot`` says runs, or None."""
    parts = bytes(slot[:]).rstrip(b"\0").decode("utf-8", "replace").split("\0")
    return (parts[0], parts[1]) if len(parts) == 2 else None


def _aliased(x, aliases: dict):
    """``x`` with each input array it holds itself (``aliases``: id -> name) an Alias."""
    if id(x) in aliases and not isinstance(x, (tuple, list)):
        return wire.Alias(aliases[id(x)])
    if isinstance(x, tuple) and not hasattr(x, "_fields"):
        return tuple(_aliased(v, aliases) for v in x)
    if type(x) is list:
        return [_aliased(v, aliases) for v in x]
    return x


def _where(path, tb):
    found = None
    for frame in traceback.extract_tb(tb):
        if os.path.realpath(frame.filename) == os.path.realpath(str(path)):
            found = (frame.lineno, frame.name)
    return found


def _exit_line(e: SystemExit, path) -> str:
    at = _where(path, e.__traceback__)
    where = f" ({shown(str(path))}, line {at[0]})" if at else ""
    return f"your code called exit({'' if e.code is None else repr(e.code)}){where}"


def answer(learner: Learner, message, jobs: dict):
    """The reply to one request."""
    kind = message[0]
    try:
        if kind == "load":
            return "ok", learner.load()
        if kind == "call":
            return learner.call(*message[1:])
        if kind == "run":
            return "ok", jobs[message[1]](learner.code)
        return "error", f"unknown request {kind!r}"
    except Shortcut as e:
        return "shortcut", str(e)
    except NotWritten as e:
        return "not written", str(e)
    except LearnerError as e:
        return "learner", str(e), getattr(e, "at", None)
    except SystemExit as e:  # while the file loads, or a job
        paths = [r for _, _, _, r in learner.texts.values()]
        return "learner", _exit_line(e, paths[0] if paths else "")
    except BaseException as e:  # noqa: BLE001 - anything the learner's code raises
        return "learner", f"{type(e).__name__}: {e}".split("\n")[0], None


def serve(req: int, rep: int, lrn, jobs: dict) -> None:
    """The learner's process: answer requests until killed."""
    buf, head = bytearray(), wire.HEADER
    while True:
        while len(buf) < head.size or len(buf) < head.size + head.unpack_from(buf)[0]:
            chunk = os.read(req, 1 << 20)
            if not chunk:
                os._exit(0)
            buf += chunk
        (n,) = head.unpack_from(buf)
        seq, message = wire.read_request(bytes(buf[head.size : head.size + n]))
        del buf[: head.size + n]
        value = answer(lrn, message, jobs)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        data = wire.reply((seq, value))
        view = memoryview(head.pack(len(data)) + data)
        while view:
            view = view[os.write(rep, view) :]


__all__ = ["SLOT", "Learner", "answer", "forbidden", "running", "serve", "start", "tripwire"]
