"""The processes a learner's code starts, found and ended: nothing is left behind.

The checker forks the process that runs the learner's code (``learner.py``) and, while
it runs, is a *subreaper* (Linux ``prctl(PR_SET_CHILD_SUBREAPER)``): a process the
learner's code starts and leaves (a double fork, ``setsid``, ``start_new_session``)
becomes the checker's child when its parent ends, instead of init's. So when the call
returns, ``end_all`` finds every descendant by walking ``/proc`` from the checker down
and kills it, until none is left. The learner's process dies with the checker
(``PR_SET_PDEATHSIG``); a process it started that outlives a killed checker is found by
the next check through ``leftovers`` (the session it was started in, the name the
learner's process gives itself, which forks inherit, the mark in its environment,
which programs it runs inherit, or the checker's pipes, which forks keep unless they
close them) and ended then.

While the learner's code runs, the checker is not *dumpable* (``PR_SET_DUMPABLE`` 0):
another process of the same user can then neither trace it nor read or write its
memory or open its files through ``/proc``.

Where there is no ``prctl`` (not Linux), a session and a process group are all there
is: ``end_all`` kills the learner's process group.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
PR_GET_DUMPABLE = 3
PR_SET_DUMPABLE = 4
PR_SET_NAME = 15
PR_SET_CHILD_SUBREAPER = 36
#: the environment variable every program the learner's code runs inherits
MARK = "SCRATCHFORMER_LEARNER_RUN"

_libc = None


def _prctl(option: int, value) -> int:
    """``prctl(option, value)``; -1 where there is none."""
    global _libc
    if not sys.platform.startswith("linux"):
        return -1
    if _libc is None:
        try:
            _libc = ctypes.CDLL(None, use_errno=True)
        except OSError:
            return -1
    arg = ctypes.c_char_p(value) if isinstance(value, bytes) else ctypes.c_ulong(value)
    return _libc.prctl(option, arg, ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))


def linux() -> bool:
    return os.path.isdir("/proc/self") and sys.platform.startswith("linux")


@contextlib.contextmanager
def guarding():
    """The checker as a subreaper, not dumpable, while the context is open."""
    dumpable = _prctl(PR_GET_DUMPABLE, 0)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_DUMPABLE, 0)
    try:
        yield
    finally:
        if dumpable in (0, 1):
            _prctl(PR_SET_DUMPABLE, dumpable)
        _prctl(PR_SET_CHILD_SUBREAPER, 0)


def become_learner(parent: int, name: str) -> None:
    """In the forked learner's process: a session of its own (no controlling terminal),
    death with the checker, a name its forks inherit, and dumpable again (so a later
    check may read its environment)."""
    os.setsid()
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the checker died before the line above
        os._exit(1)
    _prctl(PR_SET_DUMPABLE, 1)
    _prctl(PR_SET_NAME, name.encode()[:15])


# -- the process table ---------------------------------------------------------------------
def _stat(pid: int) -> tuple | None:
    """``(ppid, state, session, start time, name)`` of ``pid`` from /proc, or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    name = text[text.find("(") + 1 : text.rfind(")")]
    rest = text[text.rfind(")") + 2 :].split()
    try:
        return int(rest[1]), rest[0], int(rest[3]), int(rest[19]), name
    except (IndexError, ValueError):
        return None


def table() -> dict:
    """``{pid: (ppid, state, session, start time, name)}`` of every process seen."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _stat(int(entry))
            if st is not None:
                found[int(entry)] = st
    return found


def start_time(pid: int) -> int | None:
    st = _stat(pid)
    return None if st is None else st[3]


def descendants(root: int, procs: dict, skip=()) -> list[int]:
    """Every process below ``root`` in ``procs`` (``table()``), but the subtrees of
    ``skip``."""
    children: dict = {}
    for pid, st in procs.items():
        children.setdefault(st[0], []).append(pid)
    found, queue = [], [p for p in children.get(root, []) if p not in skip]
    while queue:
        pid = queue.pop()
        found.append(pid)
        queue += children.get(pid, [])
    return found


def children_now() -> set:
    """The checker's own children before the learner's process is started (another
    part of the program's, left alone)."""
    if not linux():
        return set()
    me = os.getpid()
    return {pid for pid, st in table().items() if st[0] == me}


def end_all(worker: int, before: set) -> int:
    """Kill the learner's process and every process below the checker but the children
    it had before (``before``), until none is left; reap them. The number ended."""
    ended: set = set()
    with contextlib.suppress(OSError):
        os.kill(worker, signal.SIGKILL)
    ended.add(worker)
    if not linux():
        with contextlib.suppress(OSError):
            os.killpg(worker, signal.SIGKILL)
        _reap([worker])
        return 1
    me = os.getpid()
    for _ in range(200):
        procs = table()
        alive = [p for p in descendants(me, procs, before) if procs[p][1] != "Z"]
        _reap([p for p in descendants(me, procs, before) if procs[p][0] == me])
        if not alive:
            break
        for pid in alive:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            ended.add(pid)
    procs = table()
    _reap([p for p, st in procs.items() if st[0] == me and p not in before])
    return len(ended)


def _reap(pids) -> None:
    for pid in pids:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)


def leftovers(session, started, name: str, token: str, pipes=()) -> list[int]:
    """Processes of an interrupted check still running: in its learner's session
    (``session``, the learner's process id, which started at ``started``), of the
    learner's process name, with its mark in their environment, or holding one of its
    pipes (``pipes``: their inode numbers; a fork keeps the descriptors it was born with
    unless it closes them). A session is only taken for the learner's while its
    number is not another process's (a number is used again once its process is gone)."""
    if not linux():
        return []
    me, found, procs = os.getpid(), [], table()
    held = {f"pipe:[{ino}]" for ino in pipes if isinstance(ino, int)}
    leader = procs.get(session) if isinstance(session, int) else None
    if not isinstance(session, int) or not isinstance(started, int) or (
            leader is not None and leader[3] != started):
        session = None
    for pid, st in procs.items():
        if pid == me or st[1] == "Z":
            continue
        if ((session and st[2] == session and st[3] >= started) or st[4] == name[:15]
                or _marked(pid, token) or (held and _holds(pid, held))):
            found.append(pid)
    return found


def _holds(pid: int, held: set) -> bool:
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/fd/{fd}") in held:
                    return True
    except OSError:
        pass
    return False


def _marked(pid: int, token: str) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f"{MARK}={token}".encode() in f.read()
    except OSError:
        return False


def kill(pids) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


__all__ = ["MARK", "become_learner", "children_now", "end_all", "guarding", "kill",
           "leftovers", "linux", "start_time", "table"]
