"""Fault injection for the tests, kept out of the package: each fault wraps one function
of it, in this process (through pytest's ``monkeypatch``) or in a subprocess, whose
start-up installs them (``faults_env``: ``tests/faults/hooks/sitecustomize.py`` on
``PYTHONPATH`` reads the faults from the environment).

- ``save="<point>[:<file name>]"``: a checkpoint save stops at ``point``:
  ``before-write`` (the temporary file created, empty), ``after-write`` (written and
  fsync'ed, not yet renamed) or ``after-replace`` (the file in place), of any file or of
  the one named; it prints ``fault point <point>: <path>`` on stderr and sleeps, so that
  a test kills the process exactly there (or signals it, in this process);
- ``rank="<rank>:<n>"``: that rank raises at its n-th gradient sum, as a rank would that
  meets an error of its own.
"""

import os
import time
from pathlib import Path

#: the folder whose sitecustomize.py installs the faults of a subprocess
HOOKS = Path(__file__).resolve().parent / "faults" / "hooks"
#: fault -> the environment variable that carries it to a subprocess
VARS = {"save": "SCRATCHFORMER_FAULT_SAVE", "rank": "SCRATCHFORMER_FAULT_RANK"}


def faults_env(env: dict, **faults) -> dict:
    """``env`` for a subprocess that starts with ``faults`` installed (``save=...``,
    ``rank=...``)."""
    path = os.pathsep.join(p for p in (str(HOOKS), env.get("PYTHONPATH", "")) if p)
    return {**env, "PYTHONPATH": path, **{VARS[k]: v for k, v in faults.items()}}


def _stop(point: str, path) -> None:
    os.write(2, f"fault point {point}: {path}\n".encode())
    time.sleep(3600)


def hook_saves(wanted: str, setattr=setattr) -> None:
    """Stop checkpoint saves at ``wanted`` (see the module doc)."""
    from scratchformer.app import checkpoint

    point, _, name = wanted.partition(":")
    saving = {}  # the path of the save in progress (saves are one at a time)
    create, write, install = (
        checkpoint._create_temporary,
        checkpoint._write_arrays,
        checkpoint._install,
    )

    def here(step: str) -> bool:
        return point == step and name in ("", saving["path"].name)

    def _create_temporary(path):
        saving["path"] = path
        return create(path)

    def _write_arrays(fd, arrays):
        if here("before-write"):  # inside the save's try: an exception removes the file
            _stop(point, saving["path"])
        write(fd, arrays)
        if here("after-write"):
            _stop(point, saving["path"])

    def _install(tmp, path):
        install(tmp, path)
        if here("after-replace"):
            _stop(point, path)

    setattr(checkpoint, "_create_temporary", _create_temporary)
    setattr(checkpoint, "_write_arrays", _write_arrays)
    setattr(checkpoint, "_install", _install)


def hook_rank(wanted: str, setattr=setattr) -> None:
    """Make rank ``r`` of ``wanted = "r:n"`` raise at its n-th gradient sum."""
    from scratchformer.app import distributed

    rank, _, n = wanted.partition(":")
    real = distributed.MPIWorld.sum_
    count = {"sums": 0}

    def sum_(self, a):
        count["sums"] += 1
        if str(self.rank) == rank and str(count["sums"]) == n:
            raise RuntimeError(f"fault injected at gradient sum {n} ({VARS['rank']}={wanted})")
        return real(self, a)

    setattr(distributed.MPIWorld, "sum_", sum_)


def install_from_env() -> None:
    """The faults the environment names (a subprocess's start-up)."""
    if os.environ.get(VARS["save"]):
        hook_saves(os.environ[VARS["save"]])
    if os.environ.get(VARS["rank"]):
        hook_rank(os.environ[VARS["rank"]])
