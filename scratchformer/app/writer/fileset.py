"""Several files written as one: all of them or none (``FileSet``), and the manifest by
which a reader tells a whole set from part of one (``check_manifest``).

A command whose output is several files (the splits of a data set, an exported model)
prepares all of them, checks that every target can be replaced (a directory where a file
goes is refused before anything is touched), and only then installs them, in one of two
ways:

- **a folder written whole** (``folder=``; an export, which tools that know nothing of
  ours read): the complete new folder is built beside the target, ``.<name>.<hex>.tmp``,
  renamed ``.<name>.<hex>.new`` once every file is in it, and renamed into place (an
  earlier folder first moved aside to ``.<name>.<hex>.old``, then removed). A target
  folder holding files that are not the set's is refused, never moved aside. Between the
  two renames the target is absent for an instant; a run killed there leaves the old
  folder or the new one beside it, and the next run of the command puts it back (the
  new one if it was complete, else the old one) and says which;
- **files renamed one by one, a manifest written last** (``manifest=``; a data set, read
  only by our own commands): before the first rename the manifest is replaced by one
  that says the set is incomplete; after the last, by the list of the files with their
  sizes and SHA-256. A reader (``check_manifest``) refuses a set whose manifest is
  incomplete or does not match its files. A folder with no manifest at all (made by
  hand, or by a version before manifests) is read as it is, unless temporary files of an
  unfinished write lie beside its files: that is what an interrupted write of a version
  before manifests leaves.

Either way, the temporary files (and folders) an interrupted run left are removed by the
next run of the same command, with the folder locked (``flock``) so that no live write
is among them; Ctrl-C and SIGTERM wait while the files are renamed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import sys
from pathlib import Path
from typing import NamedTuple

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
)
from scratchformer.app.writer.ledger import WriteError, inside
from scratchformer.app.writer.plan import Plan

#: the manifest's name in a data set's folder
MANIFEST_NAME = "manifest.json"
#: what a manifest says it is
MANIFEST_FORMAT = "scratchformer file set"
#: the largest manifest read (a list of a few files' names, sizes and hashes)
MANIFEST_MOST = 1 << 20
#: the folders of a folder being written whole, beside it: being built, complete, the old one
STAGING_RE = re.compile(r"^\.(?P<name>.+)\.(?P<hex>[0-9a-f]{12})\.(?P<state>tmp|new|old)$")


def _note(line: str) -> None:
    print(f"note: {line}", file=sys.stderr, flush=True)


def _same_content(a, b, chunk: int = 1 << 20) -> bool:
    try:
        if not Path(b).is_file() or os.path.getsize(a) != os.path.getsize(b):
            return False
        with open(a, "rb") as fa, open(b, "rb") as fb:
            while True:
                x, y = fa.read(chunk), fb.read(chunk)
                if x != y:
                    return False
                if not x:
                    return True
    except OSError:
        return False


def digest(path, chunk: int = 1 << 20) -> dict:
    """``{"bytes": size, "sha256": hex}`` of the file ``path``."""
    h, n = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
            n += len(block)
    return {"bytes": n, "sha256": h.hexdigest()}


def _a(noun: str) -> str:
    return f"{'an' if noun[:1] in 'aeiou' else 'a'} {noun}"


def _plural(names: list, one: str, many: str) -> str:
    return one if len(names) == 1 else many


# -- the manifest --------------------------------------------------------------------------
class SetCheck(NamedTuple):
    """What ``check_manifest`` found: ``problem`` ('' for a whole set), the ``command``
    the manifest names as the one that rebuilds the set ('' when none), whether the
    folder has a manifest at all (``listed``) and whether it says a write of the set was
    interrupted (``incomplete``)."""

    problem: str
    command: str = ""
    listed: bool = False
    incomplete: bool = False


def _read_manifest(path: Path):
    """The manifest's dict, None when there is none, or a str saying why it is unusable."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MANIFEST_MOST + 1)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        return f"its {path.name} cannot be read ({(e.strerror or str(e)).lower()})"
    try:
        value = json.loads(raw.decode("utf-8")) if len(raw) <= MANIFEST_MOST else None
    except (UnicodeDecodeError, ValueError):
        value = None
    ok = isinstance(value, dict) and value.get("format") == MANIFEST_FORMAT
    if not ok or not isinstance(value.get("files"), dict):
        return f"its {path.name} is not a manifest of ours (damaged?)"
    return value


def check_manifest(folder, names, manifest: str = MANIFEST_NAME) -> SetCheck:
    """Whether the files ``names`` of ``folder`` are one whole set, by its manifest (the
    module doc): every file it lists present with its size and SHA-256, ``names`` among
    them, the set complete. Without a manifest: whole unless temporary files of an
    unfinished write of one of ``names`` lie in the folder."""
    folder = Path(folder)
    m = _read_manifest(folder / manifest)
    if m is None:
        left = sorted(
            p.name for p in (folder.iterdir() if folder.is_dir() else [])
            if (t := TEMPORARY_RE.match(p.name)) and t["name"] in names
        )
        if left:
            return SetCheck(
                f"{left[0]} is the temporary file of a write that was interrupted (an earlier "
                "version's), so its files may be part old, part new"
            )
        return SetCheck("")
    if isinstance(m, str):
        return SetCheck(m, listed=True)
    command = m.get("command") if isinstance(m.get("command"), str) else ""
    if m.get("complete") is not True:
        return SetCheck("a run writing it was interrupted: it is incomplete", command, True, True)
    files = m["files"]
    for name in names:
        if name not in files:
            return SetCheck(f"its {manifest} does not list {name}", command, True)
    for name, want in files.items():
        p = folder / name
        if Path(name).name != name or not isinstance(want, dict):
            return SetCheck(f"its {manifest} is not a manifest of ours (damaged?)", command, True)
        if not p.is_file():
            return SetCheck(f"{name} is missing", command, True)
        got = digest(p) if p.stat().st_size == want.get("bytes") else {"bytes": p.stat().st_size}
        if got != {"bytes": want.get("bytes"), "sha256": want.get("sha256")}:
            size = f"{got['bytes']:,} bytes, not {want.get('bytes', 0):,}"
            how = size if "sha256" not in got else "other content than it had"
            return SetCheck(f"{name} holds {how} (edited, or replaced since)", command, True)
    return SetCheck("", command, True)


def _manifest_text(command: str, files: dict | None) -> str:
    value = {"format": MANIFEST_FORMAT, "complete": files is not None, "command": command}
    value["files"] = files or {}
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


def _write(path: Path, text: str) -> None:
    fd, tmp = create_temporary(path)
    try:
        fill(fd, lambda f: f.write(text), binary=False)
        install(tmp, path)
    finally:
        discard(tmp)


# -- the set -----------------------------------------------------------------------------
class FileSet:
    """Several files written all or nothing (the splits of a data set, an exported model):

        with FileSet({"train": path, ...}, owner=folder, inputs=[...]) as files:
            files["train"].write(line)
        files.unchanged        # every file was there with this very content

    Files are text (UTF-8, ``\\n`` line ends) but for the keys in ``binary`` (bytes).

    Each goes to a temporary file (with ``folder``: into the new folder built beside
    it); when the block ends without an error: if every file already holds exactly the
    new content, nothing is replaced (``unchanged``); else existing files whose content
    differs are replaced only with ``overwrite`` (refused in one line naming them, nothing
    replaced; ``other`` says what they may be); on an error every temporary file goes. An
    input of the command (by identity), a link out of ``owner`` and a directory where a
    file goes are refused before anything is written; with ``folder``, also a folder
    holding other files than the set's (``what``: what the set is, "export").

    ``manifest``: the name of the manifest written last in the files' folder, naming
    ``command`` as the one that rebuilds the set (the module doc). ``echo``: where the
    notes about an interrupted run's leftovers go (default: standard error)."""

    def __init__(
        self,
        paths: dict,
        owner=None,
        overwrite: bool = False,
        inputs=(),
        binary=(),
        *,
        manifest: str | None = None,
        command: str = "",
        folder=None,
        what: str = "set",
        other: str = "your edits, or data made with other settings",
        echo=None,
    ):
        self.paths = {k: Path(p) for k, p in paths.items()}
        self.binary = set(binary)
        self.owner, self.overwrite = owner, overwrite
        self.manifest, self.command, self.what, self.other = manifest, command, what, other
        self.folder = None if folder is None else Path(folder)
        self.echo = echo or _note
        parents = {p.parent for p in self.paths.values()}
        self.dir = self.folder or (parents.pop() if len(parents) == 1 else None)
        if (manifest or folder is not None) and (
            self.dir is None or any(p.parent != self.dir for p in self.paths.values())
        ):
            raise ValueError("a manifest or a folder written whole needs its files in one folder")
        plan = Plan("", inputs, overwrite=True)
        for p in self.paths.values():
            plan._not_an_input(p, str(p))
            if owner is not None and (p.is_symlink() or p.exists()) and not inside(p, owner):
                raise WriteError(
                    f"{p} leads out of {owner} (a link to {os.path.realpath(p)}): it would be "
                    "written there; remove the link"
                )
            if p.is_dir():
                raise WriteError(
                    f"{p} is a directory, where this command writes a file: nothing was "
                    "written; move it away"
                )
        if self.folder is not None:
            self._check_folder()
        self.unchanged = False
        self.replaced: list = []
        self._tmp: dict = {}
        self._files: dict = {}
        self._stack = contextlib.ExitStack()
        self._staging: Path | None = None

    def _check_folder(self) -> None:
        out = self.folder
        if out.is_symlink():
            raise WriteError(
                f"{out} is a link (to {os.path.realpath(out)}): name the folder itself, "
                "which is replaced whole"
            )
        if out.exists() and not out.is_dir():
            raise WriteError(f"{out} is a file: this command writes a folder")
        if not out.is_dir():
            return
        names = {p.name for p in self.paths.values()}

        def ours(name: str) -> bool:
            t = TEMPORARY_RE.match(name)
            return name in names or bool(t and t["name"] in names)

        foreign = sorted(e.name for e in out.iterdir() if not ours(e.name))
        if foreign:
            more = f" and {len(foreign) - 3} more" if foreign[3:] else ""
            shown = ", ".join(foreign[:3]) + more
            raise WriteError(
                f"{out} holds {shown}, {_plural(foreign, 'which is', 'which are')} not part of "
                f"{_a(self.what)}: the folder is replaced whole, so {_a(self.what)} goes into "
                f"a folder of its own (a new one, or one holding only an earlier {self.what})"
            )

    # -- before: the lock, an interrupted run's leftovers, the temporary files ------------
    def __enter__(self) -> dict:
        try:
            if self.dir is not None:
                lock_dir = self.dir.parent if self.folder is not None else self.dir
                lock_dir.mkdir(parents=True, exist_ok=True)
                self._stack.enter_context(folder_lock(lock_dir))
                self._recover()
            with signals_held():  # a Ctrl-C comes once every name made is known
                self._create()
        except BaseException:
            self._abandon()
            raise
        return self._files

    def _create(self) -> None:
        """The temporary files (with ``folder``: the new folder and its files), open."""
        if self.folder is not None:
            self._staging = self._new_staging()
        for k, p in self.paths.items():
            if self._staging is not None:
                tmp = self._staging / p.name
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            else:
                fd, tmp = create_temporary(p)
            self._tmp[k] = tmp
            if k in self.binary:
                self._files[k] = os.fdopen(fd, "wb")
            else:
                self._files[k] = os.fdopen(fd, "w", encoding="utf-8", newline="\n")

    def _new_staging(self) -> Path:
        out = self.folder
        for _ in range(100):
            staging = out.parent / f".{out.name}.{secrets.token_hex(6)}.tmp"
            try:
                staging.mkdir()
                return staging
            except FileExistsError:
                continue
        raise WriteError(f"cannot create a folder beside {out}")

    def _recover(self) -> None:
        """Remove the temporary files an interrupted run of this command left, and put a
        folder written whole back in place (the new one if complete, else the old one)."""
        names = {p.name for p in self.paths.values()} | {self.manifest}
        if self.folder is None:
            left = remove_temporaries(self.dir, names=names.__contains__)
            if left:
                self.echo(
                    f"removed {len(left)} temporary {_plural(left, 'file', 'files')} an "
                    f"interrupted run left in {self.dir}"
                )
            return
        out = self.folder
        left = remove_temporaries(out, names=names.__contains__) if out.is_dir() else []
        if left:
            self.echo(f"removed {len(left)} temporary files an interrupted run left in {out}")
        found: dict = {"tmp": [], "new": [], "old": []}
        for p in sorted(out.parent.iterdir(), key=lambda q: q.stat().st_mtime_ns):
            m = STAGING_RE.match(p.name)
            if m and m["name"] == out.name and p.is_dir() and not p.is_symlink():
                found[m["state"]].append(p)
        for p in found["tmp"]:
            self._remove_tree(p)
            self.echo(f"removed {p.name}, the unfinished {self.what} of an interrupted run")
        if not out.exists() and found["new"]:
            os.rename(found["new"].pop(), out)
            fsync_dir(out.parent)
            self.echo(
                f"an interrupted run had moved {out} aside to put its new {self.what} there: "
                f"finished it ({out} holds the new {self.what})"
            )
        if not out.exists() and found["old"]:
            os.rename(found["old"].pop(), out)
            fsync_dir(out.parent)
            self.echo(
                f"an interrupted run had moved {out} aside: restored it ({out} holds the "
                f"earlier {self.what} again)"
            )
        for p in found["new"] + found["old"]:
            self._remove_tree(p)
            self.echo(f"removed {p.name}, left beside {out} by an interrupted run")

    def _remove_tree(self, d: Path) -> None:
        """Remove a staging folder of ours: the set's files (and their temporary files),
        then the folder; anything else in it stays, and with it the folder."""
        names = {p.name for p in self.paths.values()}
        for p in d.iterdir():
            t = TEMPORARY_RE.match(p.name)
            if (p.name in names or (t and t["name"] in names)) and not p.is_dir():
                discard(p)
        with contextlib.suppress(OSError):
            os.rmdir(d)

    def _close(self) -> None:
        for f in self._files.values():
            with contextlib.suppress(OSError):
                f.close()

    def _abandon(self) -> None:
        """An error or a refusal: every temporary file goes, the targets stay as they were."""
        self._close()
        for tmp in self._tmp.values():
            discard(tmp)
        if self._staging is not None:
            self._remove_tree(self._staging)
        self._stack.close()

    # -- after: compare, refuse or install ------------------------------------------------
    def __exit__(self, kind, error, tb) -> bool:
        if kind is not None:
            self._abandon()
            return False
        try:
            for f in self._files.values():
                f.flush()
                os.fsync(f.fileno())
            self._close()
            self._install()
        except BaseException:
            self._abandon()
            raise
        self._stack.close()
        return False

    def _install(self) -> None:
        paths = self.paths
        same = {k for k, p in paths.items() if _same_content(self._tmp[k], p)}
        differ = [p for k, p in paths.items() if k not in same and p.exists()]
        state = None
        if self.manifest is not None:
            state = check_manifest(self.dir, [p.name for p in paths.values()], self.manifest)
        interrupted = state is not None and state.incomplete
        if differ and not self.overwrite and not interrupted:
            names = ", ".join(str(p) for p in differ)
            one = len(differ) == 1
            raise WriteError(
                f"{names} {'exists' if one else 'exist'} with other content ({self.other}): "
                f"pass --overwrite to replace {'it' if one else 'them'}"
            )
        if interrupted and differ:
            self.echo(f"{self.dir} was left incomplete by an interrupted run: its files are new")
        self.unchanged = len(same) == len(paths)
        listed = {paths[k].name: digest(self._tmp[k]) for k in paths}
        with signals_held():
            if self.folder is not None:
                self._swap()
                return
            whole = state is not None and not state.problem and state.listed
            whole = whole and state.command == self.command
            if self.manifest is not None and not (self.unchanged and whole):
                _write(self.dir / self.manifest, _manifest_text(self.command, None))
            for k, p in paths.items():
                if k in same:
                    discard(self._tmp[k])
                else:
                    install(self._tmp[k], p)
                    self.replaced.append(p)
            if self.manifest is not None and not (self.unchanged and whole):
                _write(self.dir / self.manifest, _manifest_text(self.command, listed))

    def _swap(self) -> None:
        """Rename the complete new folder into place (the module doc)."""
        out, staging = self.folder, self._staging
        if self.unchanged:
            self._remove_tree(staging)
            self._staging = None
            return
        fsync_dir(staging)
        tag = STAGING_RE.match(staging.name)["hex"]
        new = out.parent / f".{out.name}.{tag}.new"
        os.rename(staging, new)
        self._staging = None
        fsync_dir(out.parent)
        old = None
        if out.exists():
            old = out.parent / f".{out.name}.{tag}.old"
            os.rename(out, old)
        os.rename(new, out)
        fsync_dir(out.parent)
        self.replaced = list(self.paths.values())
        if old is not None:
            self._remove_tree(old)


__all__ = ["MANIFEST_NAME", "FileSet", "SetCheck", "check_manifest", "digest"]
