"""The steps every write is made of: a temporary file beside the target, its content
written and fsync'ed, the rename onto the target (its folder fsync'ed); the temporary
files a killed process leaves, found by name and removed by the next run; a folder
locked while several files in it change; Ctrl-C held while they are renamed."""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import threading
from pathlib import Path

from scratchformer.app.writer.ledger import WriteError

try:
    import fcntl  # POSIX advisory locks
except ImportError:  # pragma: no cover - not POSIX: folders are not locked
    fcntl = None

#: the name of an unfinished write's temporary file (the target's name inside)
TEMPORARY_RE = re.compile(r"^\.(?P<name>.+)\.[0-9a-f]{12}\.tmp$")


def temporary_name(path: Path) -> Path:
    """Where a write of ``path`` goes before it is renamed onto it."""
    return path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"


def fsync_dir(directory: Path) -> None:
    """Make the renames and new names in ``directory`` durable (where the system can)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    with contextlib.suppress(OSError):
        os.fsync(fd)
    os.close(fd)


# The three steps of an atomic write, each its own function (the fault tests stop a
# write after each): an empty temporary file beside the target, its content written and
# fsync'ed, the rename onto the target (the folder fsync'ed).
def create_temporary(path) -> tuple[int, Path]:
    """``(fd, name)`` of a new, empty temporary file beside ``path`` (its folder made).
    Mode 0666, so that the umask applies as to any file the user writes (mkstemp would
    give 0600); O_EXCL with a random name makes it this write's alone."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(100):
        tmp = temporary_name(path)
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue
    raise WriteError(f"cannot create a temporary file beside {path}")


def fill(fd: int, write, binary: bool = True) -> None:
    """``write(f)`` on the open temporary file ``fd``, then flushed, fsync'ed and closed."""
    kwargs = {} if binary else {"encoding": "utf-8", "newline": "\n"}
    with os.fdopen(fd, "wb" if binary else "w", **kwargs) as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())


def install(tmp, path) -> None:
    """Rename the written temporary file onto ``path`` and make the rename durable."""
    os.replace(tmp, path)
    fsync_dir(Path(path).parent)


def discard(tmp) -> None:
    """Remove a temporary file whose write failed."""
    with contextlib.suppress(OSError):
        os.unlink(tmp)


def remove_temporaries(folder: Path, names=None) -> list[Path]:
    """Delete the temporary files of writes a killed process left in ``folder`` (names
    matching ``TEMPORARY_RE``; with ``names``, only those of targets so named); returns
    them. Call it holding the folder's lock: no live write is then among them."""
    removed = []
    for p in sorted(folder.iterdir()) if folder.is_dir() else []:
        m = TEMPORARY_RE.match(p.name)
        if m and (names is None or names(m["name"])) and p.is_file() and not p.is_symlink():
            p.unlink()
            removed.append(p)
    return removed


@contextlib.contextmanager
def folder_lock(folder: Path):
    """An exclusive advisory lock (``flock``) on the folder ``folder`` itself, held for the
    block: two commands writing several files of one folder take turns, and temporary
    files found while it is held are no live write's. No lock where the system has none."""
    fd = None
    try:
        fd = os.open(folder, os.O_RDONLY)
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:
        if fd is not None:
            os.close(fd)
        fd = None
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)  # closing releases the lock


@contextlib.contextmanager
def signals_held():
    """Ctrl-C (SIGINT) and SIGTERM wait until the block ends: the renames that install a
    set of files are done whole, then the signal is acted on as it would have been.
    (Only the main thread can hold them; elsewhere the block runs as it is.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list = []
    held = {}
    for s in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(ValueError, OSError, TypeError):
            held[s] = signal.signal(s, lambda n, _frame: got.append(n))
    try:
        yield
    finally:
        for s, handler in held.items():
            if handler is not None:
                signal.signal(s, handler)
        for n in got[:1]:
            signal.raise_signal(n)


__all__ = [
    "TEMPORARY_RE",
    "create_temporary",
    "discard",
    "fill",
    "folder_lock",
    "fsync_dir",
    "install",
    "remove_temporaries",
    "signals_held",
    "temporary_name",
]
