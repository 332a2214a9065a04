"""The checker's session where the learner's code cannot have a process of its own (no
fork, or a GPU backend, whose CUDA context does not survive a fork): the learner's files
loaded and run in the checker's process, with ``Session``'s interface (isolate.py) and
nothing isolated."""

from __future__ import annotations

import contextlib
from pathlib import Path

from scratchformer.exercises import EXERCISES, files
from scratchformer.exercises.spec import LearnerError


class InProcess:
    """``Session``'s interface where fork is not available (or on a GPU backend): the
    learner's files loaded and run in this process, nothing isolated."""

    def __init__(self, texts: dict, folder=None, limit=None, check=True, keep=(), jobs=None,
                 stream=None, each=False):
        self.texts, self.jobs = texts, jobs or {}
        self.dead, self.notes, self.printed, self.stopped = None, [], [], None
        self.loaded: dict = {}

    def __enter__(self) -> InProcess:
        try:
            for name, (path, text) in self.texts.items():
                self.loaded[name] = files.load_text(text, Path(path), EXERCISES[name])
        except LearnerError as e:
            self.dead = e
        return self

    def __exit__(self, *exc) -> None:
        pass

    def code(self, exercise: str) -> dict:
        return self.loaded.get(exercise, {})

    @contextlib.contextmanager
    def plugged(self, names):
        with contextlib.ExitStack() as stack:
            for name in names:
                stack.enter_context(EXERCISES[name].plug(self.code(name)))
            yield

    def run(self, job: str):
        return self.jobs[job](self.loaded)

    def printed_block(self, indent: str = "  ") -> list[str]:
        return []


__all__ = ["InProcess"]
