"""The run directory: one run writes it at a time, a fresh run never mixes with an earlier
one, a resumed run drops what it abandons, and the metrics log keeps the records up to
where a run resumes.

    runs/<name>/config.json, metrics.jsonl, checkpoints/checkpoint_<step>.npz,
    checkpoints/averaged.npz, .lock
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

try:
    import fcntl  # POSIX advisory locks; the operating system releases them with the process
except ImportError:  # pragma: no cover - not POSIX: the directory is not locked
    fcntl = None

from scratchformer.checkpoint import list_checkpoints
from scratchformer.errors import ConfigError

LOCK_NAME = ".lock"


class RunLock:
    """An exclusive lock on a run directory, held by the process that writes it.

    ``runs/<name>/.lock`` is locked with ``flock`` (the operating system drops the lock
    when the holder exits, ``kill -9`` included) and names its holder (process id, host,
    start time) while held. A second run on the directory is refused with that name. A
    holder killed before it could clear its name leaves the name without the lock: the
    next run takes the lock over and says whose it was (``taken_over``).
    """

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / LOCK_NAME
        self.taken_over = ""
        self._fd = None

    def acquire(self, echo=None) -> RunLock:
        """Take the lock or refuse in one line; ``echo`` (a print function) is told when a
        lock left by a killed run is taken over."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # held by another process (any other OSError propagates)
            holder = _read_holder(fd) or "holder unknown"
            os.close(fd)
            raise ConfigError(
                f"{self.path.parent} is in use by another training run ({holder}): wait for "
                "it to finish, or give this run another --name"
            ) from None
        except OSError:  # locks not supported here, say: reported as it is, in one line
            os.close(fd)
            raise
        self.taken_over = _read_holder(fd)
        if self.taken_over and echo is not None:
            echo(
                f"note: {self.path.parent} was still marked as used by a run that ended "
                f"without releasing it ({self.taken_over}); this run takes it over"
            )
        os.ftruncate(fd, 0)
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}, started {started}".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        """Clear the holder's name and drop the lock (the file stays: removing it could
        let two runs lock two different files of the same name)."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)
        finally:
            os.close(fd)  # closing drops the flock

    def __del__(self):
        try:
            self.release()
        except Exception:  # at interpreter exit: the operating system drops the lock anyway
            pass


def _read_holder(fd) -> str:
    """The holder's name in the lock file ('' when none is written)."""
    return os.pread(fd, 200, 0).decode("utf-8", errors="replace").strip()


def clear_for_fresh_run(run_dir: Path, overwrite: bool) -> None:
    """Refuse a directory holding an earlier run's checkpoints, averaged model or
    metrics, unless ``overwrite`` (then delete exactly those files)."""
    ckpt_dir = run_dir / "checkpoints"
    found = list_checkpoints(ckpt_dir) if ckpt_dir.is_dir() else []
    earlier = [p for _, p in found]
    earlier += [p for p in (ckpt_dir / "averaged.npz", run_dir / "metrics.jsonl") if p.exists()]
    if earlier and not overwrite:
        what = f"checkpoints up to step {found[-1][0]}" if found else earlier[0].name
        raise ConfigError(
            f"{run_dir} holds an earlier run ({what}): pass --resume to continue it, "
            "--overwrite to start again there, or --name/--run-dir for a new run"
        )
    for p in earlier:
        p.unlink()


def drop_later_checkpoints(ckpt_dir: Path, step: int, overwrite: bool) -> None:
    """Resuming from an older checkpoint abandons the steps after ``step``: their
    checkpoints would otherwise be averaged into (or resumed by) this run. Refuse,
    unless ``overwrite`` says to delete them (and the average made of them)."""
    if not ckpt_dir.is_dir():
        return
    later = [(s, p) for s, p in list_checkpoints(ckpt_dir) if s > step]
    if later and not overwrite:
        names = ", ".join(p.name for _, p in later[:5]) + (" ..." if len(later) > 5 else "")
        raise ConfigError(
            f"{ckpt_dir} holds checkpoints after step {step} ({names}) from the run this "
            "resume abandons: move them away, or pass --overwrite to delete them"
        )
    for _, p in later:
        p.unlink()
    if later:
        (ckpt_dir / "averaged.npz").unlink(missing_ok=True)


def append_record(path: Path, record: dict) -> None:
    """One JSON line at the end of the metrics log."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def truncate_metrics(path: Path, step: int) -> None:
    """Keep the records of a metrics log up to ``step`` (a resumed run logs the rest
    again); test and error records go, and so does a line cut short by a crash."""
    if not path.exists():
        return
    keep = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict) and rec.get("kind") not in ("test", "error"):
            if isinstance(rec.get("step"), int) and rec["step"] <= step:
                keep.append(line)
    path.write_text("".join(line + "\n" for line in keep), encoding="utf-8")


__all__ = [
    "RunLock",
    "append_record",
    "clear_for_fresh_run",
    "drop_later_checkpoints",
    "truncate_metrics",
]
