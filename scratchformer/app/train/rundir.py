"""The run directory: one run writes it at a time, a fresh run never mixes with an earlier
one, a resumed run drops what it abandons, the metrics log keeps the records up to where
a run resumes, and what a killed run left half-written is cleared away.

    runs/<name>/config.json, metrics.jsonl, checkpoints/checkpoint_<step>.npz,
    checkpoints/averaged.npz, checkpoints/final.npz, checkpoints/best.npz (and
    best_nll.npz), events.out.tfevents.* (TensorBoard's), .lock

These files are the run's own: ``--overwrite`` deletes them and nothing else, so a file
the user put in the directory (notes, a copied checkpoint under another name) stays.
Every file is written under a temporary name beside it (``.<name>.<12 hex>.tmp``) and
renamed into place, so a kill leaves the old file or the new one; the temporary files a
kill leaves behind are removed when the next run takes the directory's lock.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from pathlib import Path

try:
    import fcntl  # POSIX advisory locks; the operating system releases them with the process
except ImportError:  # pragma: no cover - not POSIX: the directory is not locked
    fcntl = None

from scratchformer.app import writer
from scratchformer.app.checkpoint import CHECKPOINT_RE, list_checkpoints
from scratchformer.app.data.text import split_of_data_set
from scratchformer.engine.errors import ConfigError

LOCK_NAME = ".lock"
CONFIG_NAME = "config.json"
METRICS_NAME = "metrics.jsonl"
AVERAGED_NAME = "averaged.npz"
FINAL_NAME = "final.npz"  # the final model: the average, the last or the best checkpoint
BEST_NAME = "best.npz"  # the best model by train.best_metric (train.best)
#: the best models of a run: best.npz by its train.best_metric, best_nll.npz by dev nll
#: when the metric is another
BEST_RE = re.compile(r"^best(_[a-z]+)?\.npz$")
#: TensorBoard's event files (``train.tensorboard``), one per process that wrote them
EVENTS_RE = re.compile(r"^events\.out\.tfevents\.")
#: the sections of a run's config.json (``TrainConfig.to_dict``)
RUN_CONFIG_KEYS = {"name", "seed", "task", "model", "optim", "train"}

#: the temporary files of the run's atomic writes: ``.<file name>.<12 hex digits>.tmp``
TEMPORARY_RE = {
    ".": re.compile(r"^\.(config\.json|metrics\.jsonl)\.[0-9a-f]{12}\.tmp$"),
    "checkpoints": re.compile(
        r"^\.(checkpoint_\d+\.npz|averaged\.npz|final\.npz|best(_[a-z]+)?\.npz)"
        r"\.[0-9a-f]{12}\.tmp$"
    ),
}


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
        self.holder = ""  # who holds it, as written in the file
        self._fd = None

    def acquire(self, echo=None) -> RunLock:
        """Take the lock or refuse in one line; ``echo`` (a print function) is told when a
        lock left by a killed run is taken over."""
        run_dir = self.path.parent
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            fd = writer.open_lock(self.path)
        except OSError as e:
            raise ConfigError(_unusable(run_dir, e)) from None
        if not os.access(run_dir, os.W_OK | os.X_OK):
            os.close(fd)
            raise ConfigError(_unusable(run_dir, PermissionError("permission denied")))
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
        self.holder = f"pid {os.getpid()} on {socket.gethostname()}, started {started}"
        os.pwrite(fd, self.holder.encode(), 0)
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

    @staticmethod
    def clear_holder(path: Path, holder: str) -> None:
        """Clear ``holder``'s name from the lock file ``path`` if it is still there: done
        by another process of the same run (a rank other than 0) that ends the job, whose
        holder is killed before it can release the lock itself. The operating system
        drops the holder's ``flock`` when it dies; the name goes here."""
        writer.clear_if(path, holder)

    def __del__(self):
        try:
            self.release()
        except Exception:  # at interpreter exit: the operating system drops the lock anyway
            pass


def _read_holder(fd) -> str:
    """The holder's name in the lock file ('' when none is written)."""
    return os.pread(fd, 200, 0).decode("utf-8", errors="replace").strip()


def _unusable(run_dir: Path, e: OSError) -> str:
    """Why a run cannot write in ``run_dir``, in one line."""
    advice = "give the run another --run-dir or --name"
    for d in (run_dir, *run_dir.parents):
        if d.exists() and not d.is_dir():
            if d == run_dir:
                return f"the run directory {run_dir} is a file, not a directory: {advice}"
            return f"cannot make the run directory {run_dir}: {d} is a file: {advice}"
    if isinstance(e, PermissionError):
        return f"cannot write in the run directory {run_dir} (permission denied): {advice}"
    why = (e.strerror or str(e)).lower()
    return f"cannot use {run_dir} as the run directory ({why}): {advice}"


def is_run_config(path: Path) -> bool:
    """Whether ``path`` is a run's config.json: a JSON table with a run's sections."""
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return False
    return isinstance(d, dict) and RUN_CONFIG_KEYS <= set(d)


def is_metrics_log(path: Path) -> bool:
    """Whether ``path`` is a run's metrics.jsonl: empty, or its first line a record
    (a JSON table with a "kind")."""
    try:
        with open(path, encoding="utf-8") as f:
            first = f.readline(1 << 16)
        if not first.strip():
            return True
        rec = json.loads(first)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return False
    return isinstance(rec, dict) and "kind" in rec


def foreign_files(run_dir: Path) -> list[Path]:
    """Files of ``run_dir`` under the names a run writes that no run wrote: a
    config.json or metrics.jsonl of something else, a ``checkpoints`` that is a file.
    A run there would write over them: it is refused (``--overwrite`` too)."""
    run_dir = Path(run_dir)
    found = []
    for name, ours in ((CONFIG_NAME, is_run_config), (METRICS_NAME, is_metrics_log)):
        p = run_dir / name
        if p.exists() and not (p.is_file() and ours(p)):
            found.append(p)
    ckpt_dir = run_dir / "checkpoints"
    if ckpt_dir.exists() and not ckpt_dir.is_dir():
        found.append(ckpt_dir)
    return found


def refuse_foreign_files(run_dir: Path) -> None:
    """ConfigError naming a file of ``run_dir`` that a run would overwrite and did not
    write (``foreign_files``)."""
    found = foreign_files(run_dir)
    if found:
        raise ConfigError(
            f"{run_dir} holds {found[0].name}, which is not a scratchformer run's "
            f"{'folder' if found[0].name == 'checkpoints' else 'file'}: a run there would "
            "write over it, so give the run another --name or --run-dir"
        )


def refuse_links_out(run_dir: Path) -> None:
    """ConfigError naming a name the run writes or deletes (its configuration, metrics
    log, checkpoints folder and checkpoints) that is a symbolic link leading out of
    ``run_dir``: a run would write into, or delete from, a place it does not own (another
    run's checkpoints). Checked before anything in the directory changes, with or without
    ``--overwrite``."""
    run_dir = Path(run_dir)
    ckpt_dir = run_dir / "checkpoints"
    names = [run_dir / CONFIG_NAME, run_dir / METRICS_NAME, ckpt_dir]
    if ckpt_dir.is_dir() and writer.inside(ckpt_dir, run_dir):
        names += [p for _, p in list_checkpoints(ckpt_dir)]
        names += [ckpt_dir / AVERAGED_NAME, ckpt_dir / FINAL_NAME, *best_files(ckpt_dir)]
    names += event_files(run_dir)
    for p in names:
        if p.is_symlink() and not writer.inside(p, run_dir):
            raise ConfigError(
                f"{p} leads out of {run_dir}, the run's directory (a link to "
                f"{os.path.realpath(p)}): the run would write there; remove the link, or "
                "give the run another --name or --run-dir"
            )


def best_files(ckpt_dir: Path) -> list[Path]:
    """The best models in ``ckpt_dir`` (``BEST_RE``: best.npz, best_nll.npz), by name."""
    if not Path(ckpt_dir).is_dir():
        return []
    return sorted(p for p in Path(ckpt_dir).iterdir() if BEST_RE.match(p.name))


def event_files(run_dir: Path) -> list[Path]:
    """TensorBoard's event files of ``run_dir`` (``EVENTS_RE``), in the order TensorBoard
    reads them (by name: the time each was begun comes first in it)."""
    if not Path(run_dir).is_dir():
        return []
    return sorted(p for p in Path(run_dir).iterdir() if EVENTS_RE.match(p.name))


def earlier_run(run_dir: Path) -> list[Path]:
    """The files an earlier run wrote in ``run_dir``: its checkpoints (by step), averaged,
    final and best models, metrics log, configuration and TensorBoard event files, the
    ones present."""
    ckpt_dir = run_dir / "checkpoints"
    found = [p for _, p in list_checkpoints(ckpt_dir)] if ckpt_dir.is_dir() else []
    named = (
        ckpt_dir / AVERAGED_NAME,
        ckpt_dir / FINAL_NAME,
        *best_files(ckpt_dir),
        run_dir / METRICS_NAME,
        run_dir / CONFIG_NAME,
    )
    return found + [p for p in named if p.is_file()] + event_files(run_dir)


def is_run_dir(d: Path) -> bool:
    """Whether a run wrote in ``d``: its lock, its config.json or metrics.jsonl, or
    checkpoints."""
    d = Path(d)
    return (
        (d / LOCK_NAME).is_file()
        or ((d / CONFIG_NAME).is_file() and is_run_config(d / CONFIG_NAME))
        or ((d / METRICS_NAME).is_file() and is_metrics_log(d / METRICS_NAME))
        or bool((d / "checkpoints").is_dir() and list_checkpoints(d / "checkpoints"))
    )


def run_file(path: Path) -> str:
    """What ``path`` is to a run, when a run owns it: "the configuration", "the metrics
    log", "the lock", "a checkpoint", "the averaged model", "the final model"; ''
    otherwise."""
    path = Path(path)
    d = path.parent
    if path.name in (CONFIG_NAME, METRICS_NAME, LOCK_NAME) and is_run_dir(d):
        return {
            CONFIG_NAME: "the configuration",
            METRICS_NAME: "the metrics log",
            LOCK_NAME: "the lock",
        }[path.name]
    if EVENTS_RE.match(path.name) and is_run_dir(d):
        return "a TensorBoard event file"
    # a run's checkpoints folder, by its place or by what it holds (the same folder
    # reached another way, a bind mount, has another name)
    ckpts = d.is_dir() and bool(list_checkpoints(d))
    if (d.name == "checkpoints" and is_run_dir(d.parent)) or ckpts:
        if CHECKPOINT_RE.match(path.name):
            return "a checkpoint"
        if path.name == AVERAGED_NAME:
            return "the averaged model"
        if path.name == FINAL_NAME:
            return "the final model"
        if BEST_RE.match(path.name):
            return "a best model"
    return ""


def run_file_of(path: Path) -> str:
    """``run_file`` with the run named: "the metrics log of the run in runs/x"; ''."""
    what = run_file(path)
    if not what:
        return ""
    d = Path(path).parent
    return f"{what} of the run in {d.parent if d.name == 'checkpoints' else d}"


def owned_file_of(path: Path) -> str:
    """``run_file_of``, or what ``path`` is to a data set (``split_of_data_set``): a file
    an output of a command replaces only with ``--overwrite``, named for what it is."""
    return run_file_of(path) or split_of_data_set(path)


def clear_for_fresh_run(run_dir: Path, overwrite: bool) -> None:
    """Refuse a directory holding an earlier run's files (``earlier_run``; its
    config.json alone too: a run that stopped before its first checkpoint), unless
    ``overwrite``: then delete exactly those files, never another file of the directory
    (files at a run's names that no run wrote refuse the directory before:
    ``refuse_foreign_files``)."""
    earlier = earlier_run(run_dir)
    if earlier and not overwrite:
        steps = [int(m.group(1)) for p in earlier if (m := CHECKPOINT_RE.match(p.name))]
        what = f"({earlier[0].name}) and no checkpoint to resume: pass"
        if steps:
            what = f"(checkpoints up to step {steps[-1]}): pass --resume to continue it,"
        raise ConfigError(
            f"{run_dir} holds an earlier run {what} --overwrite to start again there, or "
            "--name/--run-dir for a new run"
        )
    for p in earlier:
        p.unlink()


def remove_temporaries(run_dir: Path, echo=None) -> int:
    """Delete the temporary files of writes a killed run left unfinished (names matching
    ``TEMPORARY_RE`` exactly, nothing else) and say how many. Called with the
    directory's lock held: no other process is writing there, so none is live."""
    removed = 0
    for sub, pattern in TEMPORARY_RE.items():
        d = run_dir / sub
        for p in sorted(d.iterdir()) if d.is_dir() else []:
            if pattern.match(p.name) and p.is_file() and not p.is_symlink():
                p.unlink()
                removed += 1
    if removed and echo is not None:
        s = "s" if removed > 1 else ""
        echo(f"note: removed {removed} temporary file{s} left by an interrupted run in {run_dir}")
    return removed


def prune_checkpoints(ckpt_dir: Path, train) -> list[Path]:
    """Delete all but the newest ``train.keep_checkpoints`` checkpoints (0 keeps all),
    never one of the last ``train.average_last`` that the final average reads. Returns
    the deleted paths. Called after every save and on resume (a run killed between a save
    and its pruning left one more)."""
    keep = train.keep_checkpoints
    if not keep or not ckpt_dir.is_dir():
        return []
    old = [p for _, p in list_checkpoints(ckpt_dir)[: -max(keep, train.average_last)]]
    for p in old:
        p.unlink()
    return old


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
    if later:  # the average and the final model were made of them
        (ckpt_dir / AVERAGED_NAME).unlink(missing_ok=True)
        (ckpt_dir / FINAL_NAME).unlink(missing_ok=True)


def append_record(path: Path, record: dict) -> None:
    """One JSON line at the end of the metrics log (never through a link out of the run)."""
    writer.append_text(path, json.dumps(record) + "\n", owner=path.parent)


def truncate_metrics(path: Path, step: int) -> None:
    """Keep the records of a metrics log up to ``step`` (a resumed run logs the rest
    again); test and error records go, and so does a line cut short by a crash. The log
    is replaced atomically, so a kill here loses no record."""
    if not path.exists():
        return
    text = path.read_text(encoding="utf-8", errors="replace")
    keep = []
    for line in text.split("\n"):  # records are one line each; json escapes \r
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict) and rec.get("kind") not in ("test", "error"):
            if isinstance(rec.get("step"), int) and rec["step"] <= step:
                keep.append(line)
    kept = "".join(line + "\n" for line in keep)
    if kept != text:
        write_atomically(path, kept)


def write_config(run_dir: Path, config: dict) -> Path:
    """``run_dir/config.json``: the resolved configuration, written atomically."""
    path = run_dir / CONFIG_NAME
    write_atomically(path, json.dumps(config, indent=2) + "\n")
    return path


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` by ``text`` through a temporary file beside it: a kill leaves
    the old content or the new, never a part (never through a link out of the run)."""
    writer.write_text(path, text, owner=path.parent)


__all__ = [
    "BEST_NAME",
    "BEST_RE",
    "EVENTS_RE",
    "RunLock",
    "append_record",
    "best_files",
    "event_files",
    "clear_for_fresh_run",
    "drop_later_checkpoints",
    "earlier_run",
    "foreign_files",
    "is_metrics_log",
    "is_run_config",
    "is_run_dir",
    "owned_file_of",
    "refuse_foreign_files",
    "refuse_links_out",
    "run_file",
    "prune_checkpoints",
    "remove_temporaries",
    "truncate_metrics",
    "write_atomically",
    "write_config",
]
