"""The writes around a learner's code (scratchformer/exercises/sandbox.py): a scratch
copy of the exercises folder to work in, put back what the code changed in the folder
itself, and a marker that says a check is running.

A scratch copy is the program's own throwaway folder: written plainly (no fsync, no
ledger) and removed whole, whatever the learner's code left in it (a folder without
permissions, a link). What is put back in the learner's folder goes through the atomic
write (``write_bytes``), never through a link that leads out of the folder.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from pathlib import Path

from scratchformer.app.writer.atomic import create_temporary, discard, fill, install
from scratchformer.app.writer.ledger import WriteError, inside


def scratch_folder(files: dict, prefix: str = "scratchformer-exercise-") -> Path:
    """A new private folder under the system's temporary folder holding ``files``
    (``{name: bytes}``, names without a folder)."""
    where = Path(tempfile.mkdtemp(prefix=prefix))
    for name, data in files.items():
        fd = os.open(where / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    return where


def remove_tree(path) -> None:
    """Remove ``path`` and everything under it, permissions given back where taken."""

    def again(func, name, _):
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(name), 0o700)
            if not os.path.islink(name) and os.path.isdir(name):
                os.chmod(name, 0o700)
            func(name)

    shutil.rmtree(path, onerror=again)


def remove_path(path) -> None:
    """Remove a file, a link or a folder (with what it holds); nothing if not there."""
    path = Path(path)
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    elif path.is_dir():
        remove_tree(path)


def put_back(path, data: bytes, owner) -> None:
    """``path`` holding ``data`` again (what was there in its place removed first); never
    written through a link out of ``owner``."""
    path = Path(path)
    if path.is_symlink() or path.is_dir():
        remove_path(path)
    if not inside(path.parent, owner) and path.parent.resolve() != Path(owner).resolve():
        raise WriteError(f"{path} leads out of {owner} (a link)")
    fd, tmp = create_temporary(path)
    try:
        fill(fd, lambda f: f.write(data))
        install(tmp, path)
    finally:
        discard(tmp)


def text_stream(fd: int):
    """A line-buffered text stream writing to the open descriptor ``fd`` (a standard
    stream of the learner's process, a pipe to the checker); ``fd`` stays open."""
    return open(fd, "w", buffering=1, encoding="utf-8", errors="backslashreplace",  # noqa: SIM115
                closefd=False)


def mark(path, text: str) -> None:
    """A small marker file ``path`` holding ``text`` (a new file of its own: never over
    another, never through a link)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0),
                 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


def unmark(path) -> None:
    """Remove the marker ``path`` (a plain file; nothing if it is gone)."""
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISREG(os.lstat(path).st_mode):
            os.unlink(path)


__all__ = ["mark", "put_back", "remove_path", "remove_tree", "scratch_folder", "text_stream",
           "unmark"]
