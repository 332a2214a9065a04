"""What a resumed run may change.

A resumed run continues exactly where it stopped only if everything that decides the
data order, the model and the optimisation is as it was: the task and its data settings,
the seed, the batches, the schedule, Adam. It may change where it writes, when it stops,
how often it logs, validates and saves, its threads and its test-time decoding
(``RESUMABLE``); ``resume_changes`` lists every other setting that differs, so that the
refusal names them all. ``resume_run`` puts a run back where a checkpoint left it.
"""

from __future__ import annotations

import json
from pathlib import Path

from scratchformer.app import compat
from scratchformer.app.checkpoint import (
    CheckpointError,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    read_header,
)
from scratchformer.app.train.best import Best, abandoned_best
from scratchformer.app.train.config import TrainConfig
from scratchformer.app.train.records import Window
from scratchformer.app.train.rundir import (
    CONFIG_NAME,
    drop_later_checkpoints,
    is_run_config,
    prune_checkpoints,
    truncate_metrics,
)
from scratchformer.engine.errors import ConfigError

#: what a resumed run may change: where it is, when it stops (its patience too), how
#: often it logs, validates and saves, whether it writes TensorBoard's files, its
#: threads and its test-time decoding. Anything else would
#: change the data order, the model or the optimisation, so the run would not continue.
RESUMABLE = {
    "name",
    "run_dir",
    "task.data_dir",
    "task.decode",
    "task.beam_size",
    "task.alpha",
    "task.temperature",
    "task.top_k",
    "task.sample_len",
    "train.steps",
    "train.time_limit",
    "train.log_every",
    "train.eval_every",
    "train.eval_limit",
    "train.checkpoint_every",
    "train.keep_checkpoints",
    "train.average_last",
    "train.test",
    "train.examples",
    "train.threads",
    "train.patience",
    "train.tensorboard",
}


def resume_changes(cfg, stored) -> list[str]:
    """The keys (outside ``[model]``, which the model configuration decides) whose
    values differ between ``cfg`` and ``stored`` and that a resumed run may not change."""
    a, b = _flat(cfg.to_dict()), _flat(stored.to_dict())
    return sorted(
        k
        for k in set(a) | set(b)
        if not k.startswith("model.") and k not in RESUMABLE and a.get(k) != b.get(k)
    )


def _flat(d: dict) -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update({f"{k}.{kk}": vv for kk, vv in v.items()})
        else:
            out[k] = v
    return out


def check_resumable(ck, path, cfg, task, model_config) -> None:
    """Refuse, in one line naming what differs, a checkpoint ``ck`` (read from ``path``)
    that the run of ``cfg`` would not continue: another task, settings outside
    ``RESUMABLE``, another model or vocabulary, other training data (its fingerprint, for
    checkpoints that carry one), or no optimizer or training state to continue from."""
    stored = TrainConfig.from_stored(ck.meta.get("train_config"), str(path))
    if stored.task.name != task.name:
        raise ConfigError(
            f"cannot resume from {path}: it trained task {stored.task.name}, this run "
            f"trains {task.name}"
        )
    changed = resume_changes(cfg, stored)
    if changed:
        raise ConfigError(
            f"cannot resume from {path} with other {', '.join(changed)}: the run would "
            "not continue (a resumed run may change only where it writes, when it stops, "
            "how often it logs, validates and saves, its threads and its test decoding)"
        )
    mine, theirs = model_config.to_dict(), ck.config.to_dict()
    if mine != theirs:
        diff = ", ".join(
            f"{k}: {theirs.get(k)!r} there, {mine.get(k)!r} here"
            for k in sorted(set(mine) | set(theirs))
            if mine.get(k) != theirs.get(k)
        )
        raise ConfigError(f"cannot resume from {path}: its model differs ({diff})")
    if ck.meta.get("tokenizer") != task.tokenizer.to_dict():
        raise ConfigError(
            f"cannot resume from {path}: its vocabulary differs from the one built from the "
            "data now (was the data prepared again?)"
        )
    ts = ck.train_state
    if ck.optimizer_state is None or not isinstance(ts, dict):
        raise CheckpointError(f"cannot resume from {path}: it holds no optimizer or training state")
    for key in ("step", "epoch", "batch_index"):
        v = ts.get(key)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise CheckpointError(
                f"cannot resume from {path}: train_state.{key} must be a whole number >= 0, "
                f"got {v!r}"
            )
    if "data" in ts and ts["data"] != task.fingerprint():
        raise ConfigError(
            f"cannot resume from {path}: the training data differ from the data it was "
            "trained on (a changed file would change the data order): restore them, or "
            "start a new run"
        )


__all__ = [
    "RESUMABLE",
    "check_position",
    "resume_run",
    "check_ranks",
    "check_resumable",
    "check_same_run",
    "resume_changes",
    "run_of",
    "share_state",
]


def run_of(run_dir: Path, but: Path | None = None):
    """``(configuration, fingerprint, where)`` of the run whose files ``run_dir`` holds:
    its config.json, else its newest checkpoint other than ``but`` (its stored
    configuration and data fingerprint); None when it holds no run's files."""
    config = Path(run_dir) / CONFIG_NAME
    if config.is_file() and is_run_config(config):
        return json.loads(config.read_text(encoding="utf-8")), None, config
    ckpt_dir = Path(run_dir) / "checkpoints"
    found = list_checkpoints(ckpt_dir) if ckpt_dir.is_dir() else []
    for _, p in reversed(found):
        if but is not None and p.resolve() == but.resolve():
            continue
        header = read_header(p)
        stored = (header.get("meta") or {}).get("train_config")
        ts = header.get("train_state") or {}
        return stored, ts.get("data"), p
    return None


def check_same_run(run_dir: Path, ck, path: Path) -> None:
    """Refuse to resume ``ck`` (read from ``path``) into a run directory that holds the
    files of another run: the two would mix in one directory (and ``--overwrite`` would
    delete the other's). A run is told by what a resumed run may not change (the
    settings outside ``RESUMABLE``, the model, the data)."""
    found = run_of(run_dir, but=Path(path))
    if found is None:
        return
    theirs, fingerprint, where = found
    mine = ck.meta.get("train_config")
    differ = []
    try:
        a = TrainConfig.from_stored(mine, str(path))
        b = TrainConfig.from_stored(theirs, str(where))
        differ = resume_changes(a, b) + (["model"] if a.model != b.model else [])
    except (ConfigError, TypeError, ValueError):
        differ = ["the configuration"]
    data = (ck.train_state or {}).get("data")
    if fingerprint and data and fingerprint != data:
        differ.append("the training data")
    if differ:
        raise ConfigError(
            f"{run_dir} holds the files of another run ({where.name} differs from {path} in "
            f"{', '.join(differ[:4])}): resuming there would mix two runs, and no flag "
            "deletes another run's files; resume into the checkpoint's own run directory "
            "or a new --run-dir"
        )


def check_position(step: int, epoch: int, batch_index: int, sampler, train, path) -> None:
    """Refuse a position a run cannot have reached (a hand-edited or foreign training
    state would resume somewhere else in the data order than it says), and a resume to
    fewer steps than it has done: a resumed run only goes on."""
    batches = len(sampler.epoch(epoch)) if epoch <= step * train.accum_steps else -1
    if not 0 <= batch_index <= batches:
        where = f"batch {batch_index} of epoch {epoch}"
        raise CheckpointError(
            f"cannot resume from {path}: its data position ({where}) is not one a run of "
            f"{step} steps reaches (an epoch holds {len(sampler)} batches)"
        )
    if train.steps < step:
        raise ConfigError(
            f"cannot resume from {path} to train.steps = {train.steps}: the run is at step "
            f"{step}, and a resumed run only goes on (--steps {step} judges its test set "
            "again, more steps train further)"
        )


def check_ranks(train_state: dict, path, world) -> None:
    """Refuse to continue a run with another number of processes than it had: each
    rank's dropout masks are its own, so the steps would not be the ones it would have
    taken. (Checkpoints from before data parallelism were written by one process:
    ``compat.train_state``.)"""
    ranks = compat.train_state(train_state)["ranks"]
    if ranks != world.size:
        how = "one process" if ranks == 1 else f"mpiexec -n {ranks}"
        raise ConfigError(
            f"{path} was written by a run of {ranks} process{'es' if ranks != 1 else ''} and "
            f"this one has {world.size}: resume it with the same number ({how}), as each "
            "process draws its own dropout masks"
        )


def resume_run(trainer, resume, overwrite: bool) -> None:
    """Put ``trainer`` back where the checkpoint ``resume`` left it (a path, or True /
    "latest" for the newest in its run directory): the model, Adam and the loss scale,
    the position in the data, the window of the next record; every check first. The
    checkpoints after it and the metrics of later steps go (with ``overwrite``)."""
    if resume in (True, "latest"):
        path = latest_checkpoint(trainer.ckpt_dir)
        if path is None:
            raise CheckpointError(f"nothing to resume: no checkpoints in {trainer.ckpt_dir}")
    else:
        path = Path(resume)
    ck = load_checkpoint(path)
    check_resumable(ck, path, trainer.cfg, trainer.task, trainer.model_config)
    check_same_run(trainer.run_dir, ck, path)
    trainer.model.load_state_dict(ck.model.state_dict())
    trainer.stepper.optimizer.load_state_dict(ck.optimizer_state)
    ts = compat.train_state(ck.train_state)
    trainer.stepper.load_state(ts)
    trainer.step, trainer.epoch, trainer.batch_index = ts["step"], ts["epoch"], ts["batch_index"]
    check_position(trainer.step, trainer.epoch, trainer.batch_index, trainer.sampler,
                   trainer.cfg.train, path)
    trainer.tokens_seen = ts.get("tokens_seen", 0)
    trainer.seconds_before = ts.get("seconds", 0.0)
    trainer.window = Window(ts.get("window"))
    trainer.best = Best(trainer.cfg.train.best_metric, ts.get("best"))
    trainer.last_checkpoint = path
    trainer.saved = [(trainer.step, path)]
    check_ranks(ts, path, trainer.world)
    drop_later_checkpoints(trainer.ckpt_dir, trainer.step, overwrite)
    for p in abandoned_best(trainer.ckpt_dir, trainer.step, trainer.cfg.train):
        trainer.echo(f"note: removed {p}: written after step {trainer.step}, by steps this "
                     "run takes again but does not validate again")
    prune_checkpoints(trainer.ckpt_dir, trainer.cfg.train)
    truncate_metrics(trainer.metrics_path, trainer.step)


def share_state(trainer) -> None:
    """Every rank of ``trainer``'s world starts from rank 0's parameters, moments and
    position, and its best scores (a resumed run's are read by rank 0 alone; a fresh
    run's are equal already)."""
    w = trainer.world
    if w.size == 1:
        return
    keys = ("step", "epoch", "batch_index", "tokens_seen", "seconds_before", "last_checkpoint")
    keys += ("saved",)
    mine = {k: getattr(trainer, k) for k in keys}
    state = w.broadcast({**mine, "window": trainer.window.state(), "best": trainer.best.state()})
    for k in keys:
        setattr(trainer, k, state[k])
    trainer.window = Window(state["window"])
    trainer.best = Best(trainer.best.metric, state["best"])
    trainer.stepper.share(w)
