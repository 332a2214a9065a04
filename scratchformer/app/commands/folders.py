"""What a folder already belongs to, by what the program writes there, so that a command
whose output is a folder (``export -o``, ``data --out``, ``train``'s run directory,
``exercise --dir``) never writes into a folder of another kind:

    a run            its lock, its config.json or metrics.jsonl, or checkpoints
    a run's checkpoints folder    checkpoint_<step>.npz files, or ``checkpoints`` of a run
    a data set       a manifest of ours, or two splits ({train,dev,test}.{tsv,txt}, or the
                     former layout's web.<split>.txt, genre.<split>.tsv)
    the exercises    an exercise's file (<name>.py that says ``EXERCISE = "<name>"``) or
                     its hints (<name>.hints.md)
"""

from __future__ import annotations

from pathlib import Path

from scratchformer.app import writer
from scratchformer.app.checkpoint import list_checkpoints
from scratchformer.app.data.text import SPLITS, split_of_data_set
from scratchformer.app.train.rundir import is_run_dir
from scratchformer.engine.errors import ScratchformerError
from scratchformer.exercises import EXERCISES
from scratchformer.exercises.files import exercise_file, hints_file


def _data_set_files(d: Path) -> list[str]:
    """The names of the splits (and manifest) of a data set in ``d``, if it is one."""
    names = []
    if (d / writer.MANIFEST_NAME).is_file() and writer.check_manifest(d, []).listed:
        names.append(writer.MANIFEST_NAME)
    for ext in ("tsv", "txt"):
        names += [f"{s}.{ext}" for s in SPLITS if split_of_data_set(d / f"{s}.{ext}")]
    for former in ("web.{}.txt", "genre.{}.tsv"):
        found = [former.format(s) for s in SPLITS if (d / former.format(s)).is_file()]
        names += found if len(found) > 1 else []
    return names


def owner_of_folder(d) -> tuple[str, str]:
    """``(kind, what)``: what the folder ``d`` belongs to ("run", "the folder of a run"),
    ("checkpoints", ...), ("data", ...), ("exercises", ...), or ``("", "")`` for a folder
    of none of these (or none at all)."""
    d = Path(d)
    if not d.is_dir():
        return "", ""
    if is_run_dir(d):
        return "run", "the folder of a run"
    if (d.name == "checkpoints" and is_run_dir(d.parent)) or list_checkpoints(d):
        return "checkpoints", f"the checkpoints folder of the run in {d.parent}"
    if _data_set_files(d):
        return "data", "the folder of a data set"
    if any(_is_exercise(d, ex) or hints_file(d, ex).is_file() for ex in EXERCISES.values()):
        return "exercises", "the exercises folder"
    return "", ""


def _is_exercise(d: Path, ex) -> bool:
    path = exercise_file(d, ex)
    if not path.is_file():
        return False
    try:
        with open(path, encoding="utf-8") as f:
            return f'EXERCISE = "{ex.name}"' in f.read(1 << 16)
    except (OSError, UnicodeDecodeError):
        return False


def refuse_owned_folder(d, flag: str, writes: str, allowed: str = "", same=None) -> None:
    """Refuse, in one line, to write ``writes`` (what the command puts there: "an export")
    into the folder ``d`` (named by ``flag``) when it belongs to something else; ``allowed``
    is the kind the command's own output is (a data command's "data"), accepted when
    ``same(d)`` says it is of the same sort (default: always)."""
    kind, what = owner_of_folder(d)
    if not kind or (kind == allowed and (same is None or same(d))):
        return
    raise ScratchformerError(
        f"{flag} {d} is {what}: {writes} would be written among its files; write {writes} "
        "into a folder of its own"
    )


__all__ = ["owner_of_folder", "refuse_owned_folder"]
