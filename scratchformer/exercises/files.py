"""The learner's folder (``exercises/`` by default): everything of theirs is there, and
nothing else is written anywhere.

    <folder>/<name>.py          an exercise, written once by ``start`` and never again
    <folder>/<name>.hints.md    the hints shown so far, one more per ``hint``
    <folder>/runs/yours, runs/engine    the two runs of ``exercise train``

Progress is not stored: it is what checking the files says now. A learner's file is
read as text, compiled and run in a namespace of its own (no module is imported, no
bytecode written beside it); a syntax error or an exception while it loads is one line.
"""

from __future__ import annotations

from pathlib import Path

from scratchformer.app import writer
from scratchformer.engine.errors import ScratchformerError
from scratchformer.exercises import EXERCISES, Exercise, exercise
from scratchformer.exercises.spec import LearnerError, learner_code

DEFAULT_DIR = "exercises"


class ExerciseFileError(ScratchformerError):
    """A file or folder of the learner's that cannot be used as asked."""


def folder(path: str | Path) -> Path:
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise ExerciseFileError(f"{p} is a file, not a folder for exercises (--dir)")
    return p


def exercise_file(where: Path, ex: Exercise) -> Path:
    return where / f"{ex.name}.py"


def start(where: Path, ex: Exercise) -> Path:
    """Write the exercise's file into ``where``; a file already there is never touched."""
    path = exercise_file(where, ex)
    if path.exists():
        raise ExerciseFileError(
            f"{path} exists: it is not overwritten (check it with 'scratchformer exercise "
            f"check {ex.name}'; to start again, move it away first)"
        )
    try:
        return writer.create_text(path, ex.file_text(), owner=where)
    except FileExistsError:  # made meanwhile
        raise ExerciseFileError(f"{path} exists: it is not overwritten") from None


def started(where: Path) -> list[tuple[Exercise, Path]]:
    """The exercises whose file is in ``where``, in teaching order."""
    return [(ex, exercise_file(where, ex)) for ex in EXERCISES.values()
            if exercise_file(where, ex).is_file()]


def resolve(where: Path, target: str) -> tuple[Exercise, Path]:
    """``check NAME`` or ``check FILE``: the exercise and the file to grade."""
    path = Path(target)
    if target.endswith(".py") or path.is_file():
        if not path.is_file():
            raise ExerciseFileError(f"{path}: no such file")
        return exercise(_declared(path)), path
    ex = exercise(target)
    path = exercise_file(where, ex)
    if not path.is_file():
        raise ExerciseFileError(
            f"{path} does not exist: 'scratchformer exercise start {ex.name}"
            f"{'' if str(where) == DEFAULT_DIR else f' --dir {where}'}' writes it"
        )
    return ex, path


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise LearnerError(f"{path} is not UTF-8 text (byte {e.start})") from None


def _declared(path: Path) -> str:
    """The exercise a file says it is (``EXERCISE = "name"``), else its file name."""
    for line in _text(path).splitlines():
        if line.startswith("EXERCISE") and "=" in line:
            return line.split("=", 1)[1].strip().strip("'\"")
    return path.stem


def load(path: Path, ex: Exercise) -> dict:
    """The learner's functions of ``ex`` from the file ``path``: ``{name: callable}``
    (a name the file does not define is left out). LearnerError in one line if the file
    does not compile or raises while it runs."""
    return load_text(_text(path), path, ex)


def read(path: Path) -> str:
    """The text of a learner's file (LearnerError in one line if it is not UTF-8)."""
    return _text(path)


def load_text(text: str, path: Path, ex: Exercise, file: str | None = None,
              resolved: str | None = None, namespace: dict | None = None) -> dict:
    """``load`` of ``text``, the file ``path`` as it was read; ``file``: its
    ``__file__`` (the copy in the folder the code runs in), ``path`` by default;
    ``resolved``: ``path`` made absolute where it was read; ``namespace``: the dict the
    file runs in (kept by the caller)."""
    name = resolved or str(Path(path).resolve())
    try:
        code = compile(text, name, "exec")
    except SyntaxError as e:
        where = f", line {e.lineno}" if e.lineno else ""
        raise LearnerError(f"{path}{where}: {e.msg}") from None
    namespace = {} if namespace is None else namespace
    namespace.update({"__name__": f"exercise_{ex.name}", "__file__": file or name})
    with learner_code(name, f"loading {path}"):
        exec(code, namespace)
    return {f: namespace[f] for f in ex.functions if f in namespace}


# -- hints -------------------------------------------------------------------------------
def hints_file(where: Path, ex: Exercise) -> Path:
    return where / f"{ex.name}.hints.md"


def shown_hints(where: Path, ex: Exercise) -> int:
    path = hints_file(where, ex)
    if not path.is_file():
        return 0
    return sum(1 for line in _text(path).splitlines() if line.startswith("## Hint "))


def next_hint(where: Path, ex: Exercise) -> tuple[int, str, Path] | None:
    """The next hint not shown yet, appended to ``<name>.hints.md``: ``(number, text,
    file)``; None when every hint has been shown."""
    n = shown_hints(where, ex)
    if n >= len(ex.hints):
        return None
    path = hints_file(where, ex)
    where.mkdir(parents=True, exist_ok=True)
    head = (
        ""
        if path.exists()
        else f"# Hints for the exercise {ex.name}\n\n'scratchformer exercise hint {ex.name}' "
        "adds the next one here.\n"
    )
    text = f"{head}\n## Hint {n + 1} of {len(ex.hints)}\n\n{ex.hints[n]}\n"
    writer.append_text(path, text, owner=where)  # never through a link out of the folder
    return n + 1, ex.hints[n], path


__all__ = [
    "DEFAULT_DIR",
    "ExerciseFileError",
    "exercise_file",
    "folder",
    "load",
    "load_text",
    "next_hint",
    "read",
    "resolve",
    "shown_hints",
    "start",
    "started",
]
