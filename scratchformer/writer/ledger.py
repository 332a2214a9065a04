"""What a path is (its identity, whether it is a regular file, whether it lies inside a
folder) and the ledger of the files the program wrote, by identity, size and
modification time, with the output role each was written for (see the package's doc)."""

from __future__ import annotations

import contextlib
import json
import os
import stat
from pathlib import Path

from scratchformer.errors import ScratchformerError

try:
    import fcntl  # POSIX advisory locks (the ledger's)
except ImportError:  # pragma: no cover - not POSIX: the ledger is used unlocked
    fcntl = None


class WriteError(ScratchformerError):
    """A command was asked to write where it would destroy something."""


def identity(path) -> tuple[int, int] | None:
    """``(device, inode)`` of the file ``path`` names, links resolved (or of the open file
    descriptor ``path``, an int); None when there is none."""
    try:
        st = os.fstat(path) if isinstance(path, int) else os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def regular(path) -> bool:
    """Whether ``path`` (or the open file descriptor ``path``) is a regular file."""
    try:
        st = os.fstat(path) if isinstance(path, int) else os.stat(path)
    except (OSError, ValueError):
        return False
    return stat.S_ISREG(st.st_mode)


def _stamp(path) -> tuple[int, int, int, int] | None:
    """``(device, inode, size, mtime_ns)`` of a regular file, links resolved."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) if stat.S_ISREG(st.st_mode) else None


def inside(path: Path, folder: Path) -> bool:
    """Whether ``path`` (its links resolved) lies in ``folder`` (its links resolved)."""
    try:
        Path(os.path.realpath(path)).relative_to(os.path.realpath(folder))
    except ValueError:
        return False
    return True


# -- the ledger of what was written, by role -------------------------------------------------
def ledger_path() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return Path(state) / "scratchformer" / "written.json"


@contextlib.contextmanager
def _ledger(update: bool):
    """The ledger as a dict (``"dev:ino" -> [role, path, size, mtime_ns]``), locked while
    open; written back when ``update``. An unreadable or unwritable ledger is empty."""
    path = ledger_path()
    entries: dict = {}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        yield entries
        return
    with os.fdopen(fd, "r+", encoding="utf-8") as f:
        try:
            if fcntl is not None:
                fcntl.flock(f, fcntl.LOCK_EX)
            text = f.read()
            loaded = json.loads(text) if text.strip() else {}
            entries.update(loaded if isinstance(loaded, dict) else {})
        except (OSError, ValueError):
            entries.clear()
        yield entries
        if update:
            with contextlib.suppress(OSError):
                f.seek(0)
                f.truncate()
                f.write(json.dumps(entries))
                f.flush()


def _key(stamp) -> str:
    return f"{stamp[0]}:{stamp[1]}"


def written_as(path) -> str | None:
    """The role the program wrote the regular file ``path`` for, if it did and the file
    has not changed since; else None."""
    stamp = _stamp(path)
    if stamp is None:
        return None
    with _ledger(False) as entries:
        entry = entries.get(_key(stamp))
    if not isinstance(entry, list) or len(entry) != 4 or entry[2:] != list(stamp[2:]):
        return None
    return entry[0]


def remember(path, role: str) -> None:
    """Note in the ledger that the program wrote ``path`` for ``role`` (it may replace it
    for the same role later)."""
    _remember(Path(path), role)


def _remember(path: Path, role: str) -> None:
    stamp = _stamp(path)
    if stamp is None:
        return
    with _ledger(True) as entries:
        for key in [k for k, e in entries.items() if not _current(k, e)]:
            del entries[key]  # files gone or changed since
        entries[_key(stamp)] = [role, str(Path(path).resolve()), stamp[2], stamp[3]]


def _current(key: str, entry) -> bool:
    if not isinstance(entry, list) or len(entry) != 4:
        return False
    stamp = _stamp(entry[1])
    return stamp is not None and _key(stamp) == key and list(stamp[2:]) == entry[2:]
