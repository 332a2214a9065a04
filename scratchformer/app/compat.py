"""Compatibility with earlier versions, in one place: every older name and older file
that is still read, each turned into its current form where it enters, with a note
where the user should change something. The policy (what stays accepted, until which
version) and the list of what is accepted: docs/compatibility.md.

    configs, --set, checkpoints' stored configs    renamed keys (``RENAMED``), the former
                                                   flat lm/classify settings
                                                   (``FLAT_KEYS``), ``decode = "auto"``
    checkpoint headers                             model config fields added since
                                                   (``ADDED_MODEL_FIELDS``), no model
                                                   class (told by the task), no
                                                   ``meta.task`` (told by the stored
                                                   config), ``train_state.tokens``, no
                                                   ``ranks`` (one process)
    data sets                                      ``data/web.<split>.txt``,
                                                   ``data/genre.<split>.tsv``

Nothing here imports the rest of the package: callers pass what a rule needs.
"""

from __future__ import annotations

from pathlib import Path

#: the version from which the older forms below are no longer read (the package's own
#: version: ``scratchformer.__version__``); docs/compatibility.md says what that means
ACCEPTED_UNTIL = "1.0"

# -- training configurations -------------------------------------------------------------
#: old key -> new key; an old key in a config, a checkpoint or --set works, with a note
RENAMED = {
    "train.max_steps": "train.steps",
    "optim.factor": "optim.lr_factor",
    "train.decode": "task.decode",
    "train.beam_size": "task.beam_size",
    "train.alpha": "task.alpha",
}

#: the settings of the former lm/classify trainer, which had no sections -> their keys now
FLAT_KEYS = {
    "steps": "train.steps",
    "max_tokens": "train.max_tokens",
    "schedule": "optim.schedule",
    "warmup": "optim.warmup",
    "lr_factor": "optim.lr_factor",
    "lr": "optim.lr",
    "clip_norm": "optim.clip_norm",
    "log_every": "train.log_every",
    "eval_every": "train.eval_every",
    "eval_limit": "train.eval_limit",
    "time_limit": "train.time_limit",
    "threads": "train.threads",
    "data_dir": "task.data_dir",
    "min_freq": "task.min_freq",
    "max_vocab": "task.max_vocab",
}

#: the top-level keys of a config, which the former flat layout shared
_TOP_LEVEL = ("name", "seed", "run_dir")


def _set(d: dict, dotted: str, value) -> None:
    section, key = dotted.split(".")
    d.setdefault(section, {})[key] = value


def migrate_config(d: dict, label: str, notes: list, task_fields=None) -> dict:
    """``d`` (a config's tables, as read) in the current layout: renamed keys under their
    new names, the former flat lm/classify settings in their sections, ``decode =
    "auto"`` as ``"beam"``; a note in ``notes`` for each (``label`` says where ``d``
    came from). ``task_fields(name)``: for a stored config (config.json, a checkpoint),
    the set of fields the task ``name`` has now, or None for a task it does not know;
    the stored keys the task no longer has are then dropped, not refused."""
    d = {k: (dict(v) if isinstance(v, dict) else v) for k, v in d.items()}
    if isinstance(d.get("task"), str):  # the former lm/classify settings: one flat table
        old, d = d, {"task": {"name": d["task"]}}
        for k, v in old.items():
            if k == "task":
                continue
            if k in _TOP_LEVEL or k == "model":
                d[k] = v
            elif k in FLAT_KEYS:
                _set(d, FLAT_KEYS[k], v)
        d["name"] = d.get("name") or d["task"]["name"]
        notes.append(
            f"note: {label} holds lm/classify settings of the former layout, "
            "now read as [task], [optim] and [train]"
        )
    for old, new in RENAMED.items():
        section, key = old.split(".")
        if isinstance(d.get(section), dict) and key in d[section]:
            value = d[section].pop(key)
            new_section, new_key = new.split(".")
            d.setdefault(new_section, {}).setdefault(new_key, value)
            notes.append(f"note: {old} is now called {new} (in {label})")
    task = d.get("task")
    if isinstance(task, dict) and task.get("decode") == "auto":  # it always meant beam
        task["decode"] = "beam"
        notes.append(f"note: task.decode = 'auto' is now 'beam' (in {label})")
    if task_fields is not None and isinstance(task, dict):
        keep = task_fields(task.get("name"))
        if keep is not None:
            d["task"] = {k: v for k, v in task.items() if k in keep}
    return d


def flat_override(key: str, notes: list) -> str:
    """The key of ``--set key=...``: a key of the former flat lm/classify grammar
    (``--set steps=100``) as its current one (``train.steps``), with a note."""
    if key in FLAT_KEYS and key not in _TOP_LEVEL:
        notes.append(f"note: --set {key} is now --set {FLAT_KEYS[key]}")
        return FLAT_KEYS[key]
    return key


# -- checkpoints ---------------------------------------------------------------------------
def model_spec_of(header: dict) -> dict:
    """A checkpoint header's model spec (``{"class": ..., ...}``); for checkpoints
    written before the class was recorded, told by ``meta["task"]``."""
    meta = header.get("meta") or {}
    spec = header.get("model")
    if spec is None:
        task = meta.get("task")
        spec = {"class": "Transformer"}
        if task == "lm":
            spec = {"class": "LanguageModel"}
        elif task == "classify":
            spec = {"class": "EncoderClassifier", "num_classes": len(meta.get("labels") or [])}
    return spec


def task_of(meta: dict):
    """The task a checkpoint's ``meta`` was trained on: ``meta["task"]``, or for
    checkpoints written before that field, the task of the stored training config."""
    task = meta.get("task")
    if task is None:
        stored = meta.get("train_config")
        task = stored.get("task") if isinstance(stored, dict) else None
        task = task.get("name") if isinstance(task, dict) else task
    return task


#: model config fields added since the first checkpoints -> the value every checkpoint
#: written before them has (so that it reads as the model it was, whatever the default)
ADDED_MODEL_FIELDS = {
    "attention_bias": False, "scale_embedding": True, "zero_start": False,
    "output_bias": False, "source_end_id": None,
}


def model_config(config: dict) -> dict:
    """A checkpoint's stored model config in the current form: the fields added since it
    was written, at the values its model had (``ADDED_MODEL_FIELDS``)."""
    return {**ADDED_MODEL_FIELDS, **config}


#: train_state counters of earlier versions -> their names now
TRAIN_STATE_RENAMED = {"tokens": "tokens_seen"}


def train_state(ts: dict) -> dict:
    """A checkpoint's training state in the current form: renamed counters under their
    new names; ``ranks`` 1 where it was written before data parallelism."""
    ts = dict(ts)
    for old, new in TRAIN_STATE_RENAMED.items():
        if old in ts:
            ts.setdefault(new, ts.pop(old))
    ts.setdefault("ranks", 1)
    return ts


# -- data sets -----------------------------------------------------------------------------
def split_file(d: Path, split: str, ext: str, former: str) -> Path:
    """``d/<split>.<ext>``, or the former layout's ``d/<former>.<split>.<ext>`` when only
    that one is there (``data/web.train.txt``, ``data/genre.train.tsv``)."""
    path, old = d / f"{split}.{ext}", d / f"{former}.{split}.{ext}"
    return old if old.is_file() and not path.is_file() else path


__all__ = [
    "ACCEPTED_UNTIL",
    "ADDED_MODEL_FIELDS",
    "FLAT_KEYS",
    "RENAMED",
    "TRAIN_STATE_RENAMED",
    "flat_override",
    "migrate_config",
    "model_config",
    "model_spec_of",
    "split_file",
    "task_of",
    "train_state",
]
