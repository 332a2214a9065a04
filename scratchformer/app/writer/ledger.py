"""What a path is (its identity, whether it is a regular file, whether it lies inside a
folder) and the ledger of the files the program wrote, with the output role each was
written for (see the package's doc).

A file counts as the one the program wrote while its device, inode, size, modification
time and change time are the same (``touch -r`` sets the modification time back, but the
change time it cannot: the system sets it to now), and, for a file under
``HASHED_BYTES``, its SHA-256 too. The ledger itself never fails a command: where it
cannot be read or written (a full disk, no permission) no file counts as the program's,
and the output already written stays."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
from pathlib import Path

from scratchformer.engine.errors import ScratchformerError

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


#: files smaller than this are also known by their SHA-256 in the ledger (reading them is
#: cheap); larger ones by their identity, size and times alone
HASHED_BYTES = 1 << 20


def _stamp(path, hashed: bool = True) -> tuple | None:
    """``(device, inode, size, mtime_ns, ctime_ns, sha256 or "")`` of a regular file,
    links resolved (the hash for a file under ``HASHED_BYTES``, unless not ``hashed``)."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            return None
        digest = ""
        if hashed and st.st_size < HASHED_BYTES:
            with open(path, "rb") as f:
                digest = hashlib.sha256(f.read(HASHED_BYTES)).hexdigest()
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, digest)


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
    """The ledger as a dict (``"dev:ino" -> [role, path, size, mtime_ns, ctime_ns,
    sha256]``), locked while open; written back when ``update``. An unreadable ledger
    (or one that is not a regular file) is empty; one that cannot be written back is left
    as it is, or, a write that failed half-way, unreadable: empty the next time."""
    path = ledger_path()
    entries: dict = {}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        yield entries
        return
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # /dev/full, a pipe: never read
            update = False
        else:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX)
            entries.update(_read(fd))
    except OSError:
        entries.clear()
        update = False
    try:
        yield entries
        if update:
            data = json.dumps(entries).encode("utf-8")
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, data, 0)
            except OSError:
                pass  # a full disk: the output is written; it counts as no one's
    finally:
        os.close(fd)  # releases the lock


def _read(fd: int) -> dict:
    """The ledger's entries from its open file (at most ``LEDGER_MOST`` bytes: a larger
    file is not one the program wrote, and is read as empty)."""
    raw = os.pread(fd, LEDGER_MOST + 1, 0)
    if len(raw) > LEDGER_MOST or not raw.strip():
        return {}
    try:
        loaded = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


#: the largest ledger read (some 100,000 entries)
LEDGER_MOST = 32 << 20


def _key(stamp) -> str:
    return f"{stamp[0]}:{stamp[1]}"


def _same(entry, stamp) -> bool:
    """Whether the ledger's ``entry`` describes the file whose ``_stamp`` is ``stamp``."""
    return isinstance(entry, list) and len(entry) == 6 and entry[2:] == list(stamp[2:])


def written_as(path) -> str | None:
    """The role the program wrote the regular file ``path`` for, if it did and the file
    has not changed since (by size, times and, under ``HASHED_BYTES``, content); else
    None."""
    stamp = _stamp(path)
    if stamp is None:
        return None
    with _ledger(False) as entries:
        entry = entries.get(_key(stamp))
    return entry[0] if _same(entry, stamp) else None


def remember(path, role: str) -> None:
    """Note in the ledger that the program wrote ``path`` for ``role`` (it may replace it
    for the same role later). Never fails: a ledger that cannot be written means only
    that the file will not count as the program's."""
    _remember(Path(path), role)


def _remember(path: Path, role: str) -> None:
    try:
        stamp = _stamp(path)
        if stamp is None:
            return
        with _ledger(True) as entries:
            for key in [k for k, e in entries.items() if not _current(k, e)]:
                del entries[key]  # files gone or changed since
            entries[_key(stamp)] = [role, str(Path(path).resolve()), *stamp[2:]]
    except (OSError, ValueError):
        pass


def _current(key: str, entry) -> bool:
    if not isinstance(entry, list) or len(entry) != 6 or not isinstance(entry[1], str):
        return False
    stamp = _stamp(entry[1], hashed=False)  # pruning: identity, size and times suffice
    return stamp is not None and _key(stamp) == key and entry[2:5] == list(stamp[2:5])
