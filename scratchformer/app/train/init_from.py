"""A run that starts from a checkpoint's model: ``[model] init_from = "gpt2.npz"``
(``scratchformer train --init-from CKPT``).

The checkpoint gives the run its model (config and weights) and its tokenizer; the task
gives the data, read with that tokenizer, and the run everything else (its own Adam, from
step 0, its schedule, seed and data order). So an imported GPT-2 fine-tunes on a text of
the user's (task lm), a trained translation model on new pairs (translate), a classifier
on new verses (classify). ``[model]`` then holds ``init_from`` alone: a key that would
change the model is refused (the config layers check it, ``config.build``).

What must agree is checked in one line each: the checkpoint's model is the one the task
trains (a LanguageModel for lm, ...); a classifier's classes are the data's labels; the
string tasks' fixed alphabet is the checkpoint's vocabulary. A resumed run reads the
checkpoint again (its path is in the run's configuration) and then the resumed one's
weights over it.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from scratchformer.app.checkpoint import Checkpoint, load_with_tokenizer
from scratchformer.app.data.text import LineLimit
from scratchformer.app.train.tasks import TASKS
from scratchformer.app.train.tasks.base import line_limit
from scratchformer.engine.errors import ConfigError
from scratchformer.engine.models.sizes import model_spec


class InitFrom(NamedTuple):
    """The checkpoint a run starts from: its path, the checkpoint (model built and
    loaded) and its tokenizer."""

    path: Path
    checkpoint: Checkpoint
    tokenizer: object

    @property
    def config(self):
        return self.checkpoint.config

    @property
    def spec(self) -> dict:
        return model_spec(self.checkpoint.model)


def read_init(path) -> InitFrom:
    """The checkpoint ``model.init_from`` names, with its tokenizer (its extra, such as
    the tokenizers library for GPT-2's, is needed: refused in one line without)."""
    ckpt, tok = load_with_tokenizer(path)
    return InitFrom(Path(path), ckpt, tok)


def start_task(cfg, world):
    """``(task, init)``: the run's task built as the Trainer builds it (rank 0 first, the
    others after it, from its caches), and the checkpoint it starts from (None for a new
    model). The task reads its data with the checkpoint's tokenizer, lines bounded by the
    checkpoint's model."""
    path = cfg.model.get("init_from")
    init = read_init(path) if path else None
    lines = LineLimit(init.config.max_len) if init else line_limit(cfg.model)
    cls = TASKS[cfg.task.name]
    task = cls(cfg.task, lines, init=init) if world.main else None
    world.broadcast(None)  # the other ranks build the task after rank 0, from its caches
    if task is None:
        task = cls(cfg.task, lines, init=init)
    if init is not None:
        check_model_kind(init, task)
    return task, init


def check_model_kind(init: InitFrom, task) -> None:
    """The checkpoint's model must be the one the task trains (its class; a classifier's
    number of classes)."""
    want, have = task.model_spec(), init.spec
    if want["class"] != have["class"]:
        raise ConfigError(
            f"model.init_from {init.path} holds {_a(have['class'])}, and task {task.name} trains "
            f"{_a(want['class'])}: start it from {_a(want['class'])}'s checkpoint"
        )
    if want != have:
        raise ConfigError(
            f"model.init_from {init.path} classifies into {have.get('num_classes')} classes, "
            f"the data has {want.get('num_classes')} labels"
        )


def _a(name: str) -> str:
    return f"{'an' if name[0] in 'AEIOU' else 'a'} {name}"


def load_weights(model, init: InitFrom | None) -> None:
    """The checkpoint's weights into the run's new model (nothing for a new model)."""
    if init is not None:
        model.load_state_dict(init.checkpoint.model.state_dict())


__all__ = ["InitFrom", "check_model_kind", "load_weights", "read_init", "start_task"]
