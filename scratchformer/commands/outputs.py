"""Where a command writes: never over one of its inputs, a run's files, or a file of
another kind, unless the user names it with ``--overwrite`` (an input, never).

Files are compared by identity (device and inode, after resolving links), not by name:
the same file reached another way (a link, a bind mount, ``/dev/stdin``) is still the
same file. Only a regular file can be destroyed by writing it: an output that is a
terminal, a pipe or ``/dev/null`` is never compared (a terminal is standard input and
output at once). The files a run owns (its config.json, metrics.jsonl, lock, checkpoints and
averaged model: ``train.rundir.run_file``) are replaced only with ``--overwrite``. The
kind of file is checked by its name and, for a file already there, by its first bytes:
a checkpoint is an ``.npz`` (a zip), a text output is never one.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from scratchformer.errors import ScratchformerError
from scratchformer.train.rundir import run_file

#: the first bytes of a zip file (every .npz checkpoint)
ZIP_MAGIC = b"PK\x03\x04"


class OutputError(ScratchformerError):
    """A command was asked to write where it would destroy something."""


#: standard input and output, as an entry of ``inputs`` or an output
STDIN, STDOUT = 0, 1


def identity(path) -> tuple[int, int] | None:
    """``(device, inode)`` of the file ``path`` names, links resolved (or of the open
    file descriptor ``path``, an int); None when there is none."""
    try:
        st = os.fstat(path) if isinstance(path, int) else os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def _regular(path) -> bool:
    """Whether ``path`` (or the open file descriptor ``path``) is a regular file."""
    try:
        st = os.fstat(path) if isinstance(path, int) else os.stat(path)
    except (OSError, ValueError):
        return False
    return stat.S_ISREG(st.st_mode)


def _binary(path: Path) -> bool:
    """Whether an existing file is not text: a zip (a checkpoint) or one holding NUL."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return head.startswith(ZIP_MAGIC) or b"\0" in head


def check_output(output, inputs, *, flag: str, kind: str, overwrite: bool = False) -> Path:
    """Refuse, in one line, to write ``output`` (the value of ``flag``) when it is one of
    ``inputs`` (``[(what, path)]``: ``("--checkpoint", path)``; compared by identity), a
    directory, a file a run owns (unless ``overwrite``), a file whose name or content is
    of another kind than ``kind`` ("checkpoint": an .npz; "text"), or lies under a path
    that is a file; ``output`` ``STDOUT``: standard output, when it is an input (with
    ``>`` the shell emptied that file before the command started; with ``>>`` the output
    would grow the file it reads). Returns ``output`` as a Path."""
    if output == STDOUT:
        mine = identity(STDOUT) if _regular(STDOUT) else None
        for what, path in inputs:
            if mine is not None and identity(path) == mine:
                why = (
                    "the shell emptied it before this command started"
                    if os.fstat(STDOUT).st_size == 0
                    else "the output would be written into the file it reads"
                )
                which = "standard input" if path == STDIN else f"the {what} file {path}"
                raise OutputError(
                    f"standard output is {which}: {why}; write the output to another file"
                )
        return None
    out = Path(output)
    check_not_an_input(out, inputs, flag)
    mine = identity(out)
    if out.is_dir():
        raise OutputError(f"{flag} {out} is a directory: name the file to write")
    if kind == "checkpoint" and out.suffix != ".npz":
        raise OutputError(f"{flag} {out}: a checkpoint is an .npz file (e.g. averaged.npz)")
    if kind == "text" and out.suffix == ".npz":
        raise OutputError(f"{flag} {out}: an .npz name is a checkpoint's; this output is text")
    parent = out.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise OutputError(f"{flag} {out}: {parent} is not a directory")
    if mine is None or overwrite:
        return out
    owned = run_file(out)
    if owned:
        raise OutputError(
            f"{flag} {out} is {owned} of the run in {_run_of(out)}: name another file, or "
            "pass --overwrite to replace it"
        )
    if kind == "text" and _binary(out):
        raise OutputError(
            f"{flag} {out} is not a text file (a checkpoint?): name another file, or pass "
            "--overwrite to replace it"
        )
    if kind == "checkpoint" and not _zip(out):
        raise OutputError(
            f"{flag} {out} exists and is not a checkpoint: name another file, or pass "
            "--overwrite to replace it"
        )
    return out


def check_not_an_input(output: Path, inputs, flag: str) -> None:
    """Refuse an ``output`` that is the same file as one of ``inputs`` (``[(what,
    path)]``), by identity (a regular file: a terminal or ``/dev/null`` can be both)."""
    mine = identity(output) if _regular(output) else None
    for what, path in inputs:
        if mine is not None and identity(path) == mine:
            same = "" if path == STDIN or Path(path) == output else f" ({path})"
            raise OutputError(
                f"{flag} {output} is the {what} file{same}: it would be destroyed while it "
                "is read; write to another file"
            )


def _zip(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == ZIP_MAGIC
    except OSError:
        return False


def _run_of(path: Path) -> Path:
    d = path.parent
    return d.parent if d.name == "checkpoints" else d


__all__ = ["STDIN", "STDOUT", "OutputError", "check_not_an_input", "check_output", "identity"]
