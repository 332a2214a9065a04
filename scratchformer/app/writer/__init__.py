"""Every file the program writes goes through here, so that no input can destroy another.

A command declares what it reads and what it writes (``Plan``); each output is checked
before any work is done, and written atomically:

- **never an input.** An output that is the same file as one of the command's inputs
  (device and inode, after resolving links: a symlink or a hard link to an input is the
  input) is refused, ``--overwrite`` or not;
- **never a foreign file.** An existing file may be replaced only when the program wrote
  it earlier for the same output (a re-run of ``plot``, ``average -o``, ``translate
  --output``): the ledger remembers, by identity, size, modification and change times
  (and a content hash under 1 MB), the files written for each output role; any other
  existing file needs ``--overwrite``, and the refusal names both paths;
- **never out of the folder it owns.** A file of a run, data or exercises folder is never
  written through a symlink that leads out of that folder; a log appended to in place
  that has another name (a hard link) gets a copy of its own first, and a lock file,
  rewritten in place, must be a plain file of its own;
- **never read from a stream.** An output that is not a regular file (a pipe, a terminal,
  ``/dev/null``, ``/dev/stdout``) is written as it is, never opened for reading;
- **all or nothing.** A regular file is written to a temporary file beside it
  (``.<name>.<12 hex>.tmp``), flushed and fsync'ed, and renamed into place; on any
  failure the temporary file is removed and the old file is left as it was. Several
  files that are one output (a data set's splits, an exported folder) are written as one
  (``FileSet``: a folder renamed into place whole, or a manifest written last that every
  reader checks, ``check_manifest``).

The ledger is one JSON file in ``$XDG_STATE_HOME/scratchformer`` (``~/.local/state``);
where it cannot be read or written, no file counts as the program's, and an existing
output needs ``--overwrite`` (a command whose output is written never fails for it).
Files in a folder the program owns (a run directory, a data set's folder, the exercises
folder) are judged by that folder's rules instead (a run's lock and config, a data
command's comparison of content, a data set's manifest).

Its parts: ``ledger`` (what a path is, and which files the program wrote), ``plan``
(a command's outputs, checked before any work), ``atomic`` (the steps of one write, the
leftovers of an interrupted one), ``fileset`` (several files as one), and this module,
the writing itself, and ``scratch`` (the scratch copy a learner's code works in, what it
changed in the exercises folder put back, the marker of a check that is running).
tests/test_writer.py keeps it so: no module outside this package opens a file for
writing, writes a path, saves arrays or a figure, copies or renames a file.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
from pathlib import Path

from scratchformer.app.writer.atomic import (
    TEMPORARY_RE,
    create_temporary,
    discard,
    fill,
    folder_lock,
    fsync_dir,
    install,
    remove_temporaries,
    signals_held,
    temporary_name,
)
from scratchformer.app.writer.fileset import (
    MANIFEST_NAME,
    FileSet,
    SetCheck,
    check_manifest,
    digest,
)
from scratchformer.app.writer.ledger import (
    WriteError,
    _remember,
    identity,
    inside,
    ledger_path,
    regular,
    remember,
    written_as,
)
from scratchformer.app.writer.plan import Plan, Target, _target
from scratchformer.app.writer.scratch import (
    mark,
    put_back,
    remove_path,
    remove_tree,
    scratch_folder,
    text_stream,
    unmark,
)


def savez(f, arrays: dict, np) -> None:
    """``arrays`` as an uncompressed ``.npz`` into the open file ``f``."""
    np.savez(f, **arrays)


@contextlib.contextmanager
def replacing(where, *, binary: bool = False, role: str | None = None, owner=None):
    """Write ``where`` (a path, or a ``Plan``'s Target) through a file object: a regular
    file (or a new one) through a temporary file beside it, renamed onto it when the block
    ends without an error (the temporary file removed otherwise); a stream (a pipe, a
    terminal, ``/dev/null``) directly. ``role``: remember the file in the ledger as
    written for it. ``owner``: refuse a path that leads out of that folder."""
    t = _target(where, role, owner)
    path, role, owner = t.path, role or t.role, owner or t.owner
    if owner is not None and (path.is_symlink() or path.exists()) and not inside(path, owner):
        raise WriteError(f"{path} leads out of {owner} (a link): remove the link")
    kwargs = {} if binary else {"encoding": "utf-8", "newline": "\n"}
    if path.exists() and not regular(path):  # a stream: never read, never renamed
        with open(path, "wb" if binary else "w", **kwargs) as f:
            yield f
        return
    fd, tmp = create_temporary(path)
    try:
        with os.fdopen(fd, "wb" if binary else "w", **kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        install(tmp, path)
    except BaseException:
        discard(tmp)
        raise
    if role is not None:
        _remember(path, role)


def write_text(where, text: str, **kw) -> Path:
    """``where`` replaced by ``text`` (see ``replacing``)."""
    with replacing(where, **kw) as f:
        f.write(text)
    return _target(where).path


def write_bytes(where, data: bytes, **kw) -> Path:
    with replacing(where, binary=True, **kw) as f:
        f.write(data)
    return _target(where).path


def write_json(where, value, indent: int | None = 2, **kw) -> Path:
    return write_text(where, json.dumps(value, indent=indent) + "\n", **kw)


def write_npz(where, arrays: dict, np, **kw) -> Path:
    """``arrays`` as an uncompressed ``.npz`` (``np``: NumPy, from the backend)."""
    with replacing(where, binary=True, **kw) as f:
        savez(f, arrays, np)
    return _target(where).path


def write_figure(where, figure, **kw) -> Path:
    """A matplotlib ``figure`` as a PNG (``kw``: ``savefig``'s, and ``replacing``'s)."""
    own = {k: kw.pop(k) for k in ("role", "owner") if k in kw}
    with replacing(where, binary=True, **own) as f:
        figure.savefig(f, format="png", **kw)
    return _target(where).path


def create_text(path, text: str, owner=None) -> Path:
    """A new file ``path`` holding ``text``; never over a file already there (made
    meanwhile, too: the temporary file is linked onto the name only if it is free)."""
    path = Path(path)
    if owner is not None and (path.is_symlink() or path.exists()) and not inside(path, owner):
        raise WriteError(f"{path} leads out of {owner} (a link): remove the link")
    fd, tmp = create_temporary(path)
    try:
        fill(fd, lambda f: f.write(text), binary=False)
        os.link(tmp, path)  # fails if the name is taken
        fsync_dir(path.parent)
    finally:
        discard(tmp)
    return path


def append_text(path, text: str, owner=None) -> None:
    """``text`` added at the end of ``path`` (a log of the program's own, in a folder it
    owns: the metrics of a run). A file that has other names (hard links: a backup made
    with ``cp -l``, say) is first copied to a file of its own under its name, so that what
    is added never reaches the other names."""
    path = Path(path)
    if owner is not None and (path.is_symlink() or path.exists()) and not inside(path, owner):
        raise WriteError(f"{path} leads out of {owner} (a link): remove the link")
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_file() and os.stat(path).st_nlink > 1:
        _own_copy(path)
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)


def _own_copy(path: Path) -> None:
    """Replace ``path`` by a copy of its content, so that it no longer shares its data
    with another name (a hard link), through a temporary file renamed into place."""
    fd, tmp = create_temporary(path)
    try:
        with open(path, "rb") as source:
            fill(fd, lambda f: shutil.copyfileobj(source, f))
        install(tmp, path)
    finally:
        discard(tmp)


def open_lock(path) -> int:
    """A read-write descriptor of the lock file ``path`` (made if missing), for
    ``flock``; its content is its holder's name (``RunLock``), which is rewritten in
    place. So the name must be a plain file of its own: a symbolic link is never
    followed, and a directory, a device or a file with other names (a hard link) is
    refused in one line, rather than written into."""
    path = Path(path)
    why = ""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o666)
    except OSError:
        if path.is_symlink():
            why = f"a link (to {os.path.realpath(path)})"
        elif path.is_dir():
            why = "a directory"
        else:
            raise
    else:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
            os.close(fd)
            why = "not a plain file" if not stat.S_ISREG(st.st_mode) else "a hard link"
        else:
            return fd
    raise WriteError(
        f"{path} is {why}, where a run keeps its lock file (its holder's name, rewritten "
        "in place): remove it"
    )


def clear_if(path, content: str) -> None:
    """Empty the small file ``path`` if it holds ``content`` (a lock's holder)."""
    try:  # never through a link: the lock was a plain file when its run took it
        fd = os.open(path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "r+b") as f:
            if f.read(200).decode("utf-8", errors="replace").strip() == content:
                f.truncate(0)
    except OSError:  # not there, or not ours to change
        pass


def devnull_descriptor() -> int:
    """A descriptor writing to ``/dev/null`` (where a command's output goes once its
    reader has left)."""
    return os.open(os.devnull, os.O_WRONLY)


def fill_closed_standard_streams() -> None:
    """/dev/null at each of descriptors 0, 1 and 2 that is closed (``<&-``, ``>&-``), so
    that no file the program opens takes that number: a checkpoint would be read as
    standard input, a log written where standard output was."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:  # open takes the lowest free number: usually ``fd`` itself
                os.dup2(null, fd)
                os.close(null)


def event_writer(folder, *, session: int, purge_step: int | None = None, owner=None):
    """tensorboardX's ``SummaryWriter`` on a new TensorBoard event file in ``folder``:
    ``events.out.tfevents.<seconds>.<host>.<session>`` (tensorboardX opens the name it
    makes for writing from its start: the ``session`` number, zero-padded, keeps two
    files begun in the same second apart, in the order they were begun). ``purge_step``:
    a resumed run's first step, recorded so that TensorBoard hides what earlier files
    hold from there on (the steps it takes again). ``owner``: refuse a ``folder`` that
    leads out of it (a link)."""
    from tensorboardX import SummaryWriter  # noqa: PLC0415  (optional: the tensorboard extra)

    folder = Path(folder)
    if owner is not None and not inside(folder, owner):
        raise WriteError(f"{folder} leads out of {owner} (a link): remove the link")
    return SummaryWriter(
        str(folder), purge_step=purge_step, filename_suffix=f".{session:04d}", flush_secs=30
    )


def move(source, target) -> None:
    """Rename ``source`` onto ``target`` (both in one folder the program writes)."""
    os.replace(source, target)


__all__ = [
    "MANIFEST_NAME",
    "TEMPORARY_RE",
    "FileSet",
    "SetCheck",
    "check_manifest",
    "digest",
    "folder_lock",
    "fsync_dir",
    "signals_held",
    "Plan",
    "Target",
    "WriteError",
    "append_text",
    "clear_if",
    "create_temporary",
    "create_text",
    "devnull_descriptor",
    "discard",
    "event_writer",
    "fill",
    "fill_closed_standard_streams",
    "identity",
    "inside",
    "install",
    "ledger_path",
    "mark",
    "move",
    "open_lock",
    "put_back",
    "remove_path",
    "remove_tree",
    "scratch_folder",
    "text_stream",
    "unmark",
    "regular",
    "remember",
    "remove_temporaries",
    "replacing",
    "savez",
    "temporary_name",
    "write_bytes",
    "write_figure",
    "write_json",
    "write_npz",
    "write_text",
    "written_as",
]
