"""Around each run of a learner's code: the folder it works in, what it changed, and a
marker that says a check is running.

    box = Sandbox(folder)          # the marker written, the folder read, a scratch copy
    ... the learner's process runs in box.scratch ...
    lines = box.close()            # what changed: the folder put back, the package named

- **A scratch copy.** The learner's process works in a copy of the files of the
  exercises folder (its current folder), so a file it writes by a relative name lands
  there and is removed with it.
- **The folder as it was.** Every file of the folder is read before (a file of a run
  under ``runs/`` by its size and times) and compared after; what the code changed,
  added or removed is put back, and said. Nothing stops a write by absolute path: it is
  seen and undone here.
- **The package.** The files of the installed package (and their bytecode) are compared
  by size and times before and after: a change is said, never undone (nothing stops a
  program of the learner's from editing them; reinstall).
- **A marker.** ``.exercise-check-<pid>.json`` in the folder while the code runs,
  removed when the check ends normally; one left by a check that was killed is found by
  the next (``interrupted``), which ends what that check's learner left running.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import sys
import time
from pathlib import Path

from scratchformer.app import writer
from scratchformer.exercises import procs

MARKER = ".exercise-check-{pid}.json"
#: files larger than this are compared by size and times, not read (never put back)
READ_LIMIT = 4 << 20
#: the most entries of a folder that are looked at
ENTRIES = 5000
PACKAGE = Path(__file__).resolve().parents[1]  # the installed scratchformer/


def _stamp(st) -> tuple:
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def snapshot(folder: Path, stat_only=("runs",), skip=()) -> dict:
    """``{relative path: entry}`` of everything under ``folder`` (links not followed):
    ``("file", digest, bytes or None)``, ``("link", target)``, ``("dir",)``."""
    found: dict = {}
    above = set()  # the folders that hold a path kept
    for k in skip:
        while os.path.dirname(k):
            k = os.path.dirname(k)
            above.add(k)
    for root, dirs, names in os.walk(folder):
        rel_root = os.path.relpath(root, folder)
        for name in dirs + names:
            if len(found) >= ENTRIES:
                return found
            rel = os.path.normpath(os.path.join(rel_root, name))
            if rel in skip or rel in above or name.startswith(".exercise-check-"):
                continue
            path = os.path.join(root, name)
            try:
                st = os.lstat(path)
                if os.path.islink(path):
                    found[rel] = ("link", os.readlink(path))
                elif os.path.isdir(path):
                    found[rel] = ("dir",)
                elif rel.split(os.sep)[0] in stat_only or st.st_size > READ_LIMIT:
                    found[rel] = ("file", _stamp(st), None)
                else:
                    with open(path, "rb") as f:
                        data = f.read()
                    found[rel] = ("file", hashlib.sha256(data).hexdigest(), data)
            except OSError:
                found[rel] = ("unreadable",)
        dirs[:] = [d for d in dirs if os.path.normpath(os.path.join(rel_root, d)) not in skip]
    return found


def restore(folder: Path, before: dict, after: dict) -> list[str]:
    """Put back what changed from ``before`` to ``after``; a phrase per change."""
    said = []
    for rel in sorted(set(after) - set(before), key=lambda r: -r.count(os.sep)):
        writer.remove_path(folder / rel)
        said.append(f"{rel} (added: removed)")
    for rel, entry in sorted(before.items()):
        if after.get(rel) == entry or (rel in after and entry[0] == "dir" == after[rel][0]):
            continue
        what = "changed" if rel in after else "removed"
        if entry[0] == "dir":
            os.makedirs(folder / rel, exist_ok=True)
            said.append(f"{rel}/ ({what}: made again)")
        elif entry[0] == "file" and entry[2] is not None:
            writer.put_back(folder / rel, entry[2], owner=folder)
            said.append(f"{rel} ({what}: put back)")
        else:
            said.append(f"{rel} ({what}: could not be put back)")
    return said


def _package() -> dict:
    found = {}
    for root, _, names in os.walk(PACKAGE):
        for name in names:
            if name.endswith((".py", ".pyc")):
                path = os.path.join(root, name)
                try:
                    found[path] = _stamp(os.stat(path))
                except OSError:
                    pass
    return found


def _imported_now(before: set) -> set:
    """The source stems (``.../ops/linear``) of the modules this process imported since."""
    found = set()
    for name in set(sys.modules) - before:
        path = getattr(sys.modules[name], "__file__", None) or ""
        if path.endswith(".py"):
            found.add(path[:-3])
    return found


def _compiled_for(path: str, stems: set) -> bool:
    """A bytecode file this process wrote for a module it imported meanwhile."""
    head, name = os.path.split(path)
    if os.path.basename(head) != "__pycache__" or not name.endswith(".pyc"):
        return False
    return os.path.join(os.path.dirname(head), name.split(".")[0]) in stems


class Sandbox:
    """See the module docstring. ``keep``: paths of the folder the code may write
    (``runs/yours``: the demonstration run's)."""

    def __init__(self, folder: Path, keep=(), say=print):
        self.folder = Path(folder)
        self.keep = tuple(os.path.normpath(k) for k in keep)
        self.token = secrets.token_hex(4)
        self.name = f"sfl-{self.token}"
        interrupted(self.folder, say)
        self.marker = self.folder / MARKER.format(pid=os.getpid())
        self.session, self.session_start, self.pipes = None, None, []
        self._mark()
        self.before = snapshot(self.folder, skip=self.keep)
        self.package = _package()
        self.modules = set(sys.modules)
        top = {rel: e[2] for rel, e in self.before.items()
               if e[0] == "file" and e[2] is not None and os.sep not in rel}
        self.scratch = writer.scratch_folder(top)

    def _mark(self) -> None:
        record = {"pid": os.getpid(), "start": procs.start_time(os.getpid()),
                  "session": self.session, "session_start": self.session_start,
                  "name": self.name, "token": self.token,
                  "pipes": self.pipes,
                  "time": time.strftime("%Y-%m-%d %H:%M:%S")}
        try:
            writer.unmark(self.marker)
            writer.mark(self.marker, json.dumps(record))
        except OSError:
            pass  # a folder the checker may not write: no marker, nothing else changes

    def started(self, session: int, pipes=()) -> None:
        """The learner's process is ``session`` and holds ``pipes`` (descriptors): the
        marker says so."""
        self.session, self.session_start = session, procs.start_time(session)
        self.pipes = [os.fstat(fd).st_ino for fd in pipes]
        self._mark()

    def close(self) -> list[str]:
        """Compare, put back, clean up; the lines that say what the code changed."""
        lines = []
        try:
            after = snapshot(self.folder, skip=self.keep)
            said = restore(self.folder, self.before, after)
            if said:
                lines.append(f"your code changed {self.folder}/ while it ran: "
                             + "; ".join(said[:6]) + (f"; and {len(said) - 6} more" if
                                                      len(said) > 6 else ""))
            stems = _imported_now(self.modules)
            now = _package()
            changed = sorted(p for p in set(now) | set(self.package)
                             if now.get(p) != self.package.get(p) and not _compiled_for(p, stems))
            if changed:
                names = ", ".join(os.path.relpath(p, PACKAGE.parent) for p in changed[:3])
                lines.append(
                    f"your code changed the installed package ({names}"
                    f"{f' and {len(changed) - 3} more' if len(changed) > 3 else ''}): not put "
                    "back (nothing stops a program from editing it): reinstall scratchformer"
                )
        finally:
            writer.remove_tree(self.scratch)
            writer.unmark(self.marker)
        return lines


_SEEN: set = set()


def interrupted(folder: Path, say=print) -> None:
    """Say once per folder whether a check before this one was interrupted (its marker
    left, its process gone), end what its learner left running, remove the marker."""
    key = str(folder.resolve())
    if key in _SEEN:
        return
    _SEEN.add(key)
    try:
        markers = sorted(folder.glob(".exercise-check-*.json"))
    except OSError:
        return
    for path in markers:
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            pid = int(record["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        alive = procs.start_time(pid)
        if pid != os.getpid() and alive is not None and alive == record.get("start"):
            continue  # a check running now, in another process
        pipes = record.get("pipes") if isinstance(record.get("pipes"), list) else []
        left = procs.leftovers(record.get("session"), record.get("session_start"),
                               str(record.get("name", "")), str(record.get("token", "")), pipes)
        procs.kill(left)
        ended = f"; {len(left)} process(es) its code left running were ended" if left else ""
        say(f"the previous exercise check in {folder} (process {pid}, started "
            f"{record.get('time', '?')}) was interrupted before it ended{ended}")
        writer.unmark(path)


__all__ = ["MARKER", "Sandbox", "interrupted", "restore", "snapshot"]
