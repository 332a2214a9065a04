"""A command's plan: what it reads and what it writes, each output checked before any
work is done (never an input, never a foreign file, never out of the folder it owns;
see the package's doc)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from scratchformer.app.writer.ledger import WriteError, identity, inside, regular, written_as


class Target(NamedTuple):
    """An output a ``Plan`` accepted: where, as what, in which folder."""

    path: Path
    role: str | None = None
    owner: Path | None = None


def _target(where, role=None, owner=None) -> Target:
    if isinstance(where, Target):
        return where
    return Target(Path(where), role, owner)


class Plan:
    """What one command reads (``inputs``: ``[(what, path)]``, or a path or open file
    descriptor; 0 for standard input) and writes (``output``, one call per output, before
    any work is done). ``overwrite``: the user's ``--overwrite``, which lets an existing
    foreign file be replaced, never an input."""

    def __init__(self, command: str, inputs=(), overwrite: bool = False):
        self.command = command
        self.inputs = [(what, p) for what, p in inputs if p is not None]
        self.overwrite = overwrite

    def output(
        self,
        path,
        role: str,
        *,
        flag: str | None = None,
        owner: Path | None = None,
        suffix: str | None = None,
        protected=None,
    ) -> Target:
        """Check that the command may write ``path`` (its ``role``: "plot schedule",
        "translate --output"; ``flag`` the option that named it; ``owner`` the folder it
        belongs to; ``suffix`` the name's ending it must have, ".npz" or ".png", or "text":
        not ".npz"; ``protected(path)``: what the file is when it belongs to something,
        a run's checkpoint say, "" otherwise) and return it as a Target for the writers.
        Raises WriteError in one line."""
        path = Path(path)
        name = f"{flag} {path}" if flag else str(path)
        self._not_an_input(path, name)
        if path.is_dir():
            raise WriteError(f"{name} is a directory: name the file to write")
        if suffix == "text" and path.suffix.lower() == ".npz":
            raise WriteError(f"{name}: an .npz name is a checkpoint's; this output is text")
        if suffix not in (None, "text") and path.suffix.lower() != suffix:
            kind = {".npz": "a checkpoint"}.get(suffix, f"a {suffix[1:].upper()} file")
            raise WriteError(f"{name} should end in {suffix}: this output is {kind}")
        parent = path.parent
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if not parent.is_dir():
            raise WriteError(f"{name}: {parent} is not a directory")
        if owner is not None and (path.is_symlink() or path.exists()) and not inside(path, owner):
            raise WriteError(
                f"{name} leads out of {owner} (a link to {os.path.realpath(path)}): it would be "
                "written there; remove the link"
            )
        target = Target(path, role, owner)
        if not path.exists() or not regular(path) or self.overwrite:
            return target
        belongs = protected(Path(os.path.realpath(path))) if protected is not None else ""
        if belongs:
            raise WriteError(
                f"{name} is {belongs}: name another file, or pass --overwrite to replace it"
            )
        earlier = written_as(path)
        if earlier == role:
            return target  # the program's own earlier output of this kind
        what = f"written by scratchformer as {earlier}" if earlier else "not written by this output"
        also = f" (a link to {os.path.realpath(path)})" if path.is_symlink() else ""
        raise WriteError(
            f"{name} exists ({what}){also}: name another file, or pass --overwrite to replace it"
        )

    def text_output(self, path, role: str, *, flag: str, protected=None) -> Target | None:
        """``output`` for a text output that may be the standard output: None (write to
        standard output, ``standard_output`` checked) for ``-``, and for a name of the
        standard output itself (``/dev/stdout``, ``/dev/fd/1``, or the very file the shell
        redirected it to: ``--output /dev/stdout > f``), which is written as it is, never
        replaced; else the Target."""
        if str(path) == "-" or (identity(path) is not None and identity(path) == identity(1)):
            self.standard_output()
            return None
        return self.output(path, role, flag=flag, suffix="text", protected=protected)

    def standard_output(self) -> None:
        """Refuse a standard output that is one of the inputs (``cmd < f > f``: the shell
        emptied it before the command started; ``>> f``: the output would grow the file
        it reads). A terminal or a pipe is never an input."""
        if not regular(1):
            return
        mine = identity(1)
        for what, p in self.inputs:
            if identity(p) == mine:
                why = (
                    "the shell emptied it before this command started"
                    if os.fstat(1).st_size == 0
                    else "the output would be written into the file it reads"
                )
                which = "standard input" if p == 0 else f"the {what} file {p}"
                raise WriteError(
                    f"standard output is {which}: {why}; write the output to another file"
                )

    def _not_an_input(self, path: Path, name: str) -> None:
        mine = identity(path) if regular(path) else None
        if mine is None:
            return
        for what, p in self.inputs:
            if identity(p) == mine:
                same = "" if p == 0 or Path(str(p)) == path else f" ({p})"
                which = "standard input" if p == 0 else f"the {what} file{same}"
                raise WriteError(
                    f"{name} is {which}: it would be destroyed while it is read; write to "
                    "another file"
                )
