"""scratchformer train: train a model with the paper's recipe. One grammar for every task.

scratchformer train                          the default run (configs/reverse.toml): reverse
                                             strings of 1-12 letters, a few minutes on a CPU,
                                             then held-out examples and accuracy
scratchformer train --config copy            a shipped config (all listed under --config
                                             below) or a TOML file of yours
scratchformer train --task lm                a task with its own config (= --config lm)
scratchformer train --steps 5000 --set model.d_model=128     flags and --set override it
scratchformer train --resume                 continue runs/<name> exactly where it stopped

A config has the sections [task] [model] [optim] [train] and names only what it changes:
it is read on top of its task's shipped config, which is read on top of
configs/defaults.toml (every default, written once). Flags and --set come last; a flag
or key that does not apply to the task is refused. Outputs go to runs/<name>:
config.json, metrics.jsonl and checkpoints/ (the shipped configs are in the installed
package: scratchformer/app/configs/).
"""

from __future__ import annotations

import argparse
import signal
from pathlib import Path

from scratchformer.app import distributed, progress
from scratchformer.app.checkpoint import CheckpointError, latest_checkpoint, read_params
from scratchformer.app.commands import COUNT, NONNEGATIVE, number
from scratchformer.app.commands.folders import refuse_owned_folder
from scratchformer.app.compat import flat_override
from scratchformer.app.errors import Interrupted, signal_name
from scratchformer.app.train import TASKS, TrainConfig, Trainer, shipped_names
from scratchformer.app.train.config import (
    build,
    migrate,
    override_value,
    read_config,
    set_dotted,
)
from scratchformer.app.train.interrupts import before_training, resume_advice
from scratchformer.app.train.limits import check_ranks
from scratchformer.engine.errors import ConfigError

#: flag (its argparse name) -> the setting it sets
FLAGS = {
    "name": "name",
    "run_dir": "run_dir",
    "seed": "seed",
    "task": "task.name",
    "data_dir": "task.data_dir",
    "decode": "task.decode",
    "steps": "train.steps",
    "max_tokens": "train.max_tokens",
    "accum_steps": "train.accum_steps",
    "time_limit": "train.time_limit",
    "log_every": "train.log_every",
    "eval_every": "train.eval_every",
    "checkpoint_every": "train.checkpoint_every",
    "threads": "train.threads",
    "best_metric": "train.best_metric",
    "patience": "train.patience",
    "warmup": "optim.warmup",
    "lr_factor": "optim.lr_factor",
}


def add_parser(sub) -> None:
    p = sub.add_parser(
        "train",
        help="train a model (no arguments: the built-in reverse task, CPU, minutes)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    shipped = ", ".join(n for n in shipped_names() if n != "defaults")
    p.add_argument("--config", "-c", help=f"a TOML file, or a shipped config's name: {shipped}")
    p.add_argument("--name", help="run name; outputs go to runs/<name>")
    p.add_argument("--run-dir", help="output directory (default runs/<name>)")
    p.add_argument(
        "--seed", type=NONNEGATIVE, help="seed of initialisation, data order and dropout"
    )
    p.add_argument("--task", choices=sorted(TASKS), help="the task (task.name)")
    p.add_argument("--data-dir", help="translate, lm, classify: the prepared data (task.data_dir)")
    p.add_argument("--decode", choices=["beam", "greedy"], help="test-time decoding (task.decode)")
    p.add_argument("--steps", type=COUNT, help="optimizer steps (train.steps)")
    p.add_argument("--max-tokens", type=COUNT, help="token budget per micro-batch")
    p.add_argument("--accum-steps", type=COUNT, help="micro-batches per optimizer step")
    p.add_argument(
        "--time-limit", type=number(lo=0), help="stop after this many seconds of training"
    )
    p.add_argument("--log-every", type=NONNEGATIVE, help="steps between log records and lines")
    p.add_argument("--eval-every", type=NONNEGATIVE, help="steps between validations")
    p.add_argument("--checkpoint-every", type=NONNEGATIVE, help="steps between checkpoints")
    p.add_argument("--threads", type=NONNEGATIVE, help="BLAS threads (0 = the BLAS default)")
    p.add_argument(
        "--best-metric",
        choices=["nll", "bleu", "chrf", "accuracy"],
        help="the dev metric of checkpoints/best.npz, early stopping and the final model "
        "(train.best_metric: nll; bleu or chrf for translate; accuracy for classify)",
    )
    p.add_argument(
        "--patience",
        type=NONNEGATIVE,
        help="stop after this many validations without a better best metric (0 = never)",
    )
    p.add_argument(
        "--tensorboard",
        action="store_true",
        help="write TensorBoard event files beside metrics.jsonl (train.tensorboard; needs "
        "tensorboardX: pip install -e '.[tensorboard]'); view: tensorboard --logdir runs",
    )
    p.add_argument(
        "--ranks",
        type=COUNT,
        default=1,
        help="processes that train together, data parallel (starts mpiexec -n RANKS; "
        "the same as running this command under mpiexec -n RANKS)",
    )
    p.add_argument("--warmup", type=NONNEGATIVE, help="warmup steps of the schedule (optim.warmup)")
    p.add_argument("--lr-factor", type=number(above=0), help="factor of the paper's schedule")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override any setting, e.g. --set model.d_model=128 (the value is read as TOML)",
    )
    p.add_argument(
        "--resume",
        nargs="?",
        const="latest",
        default=None,
        metavar="CHECKPOINT",
        help="continue exactly from CHECKPOINT (default: the newest in the run directory); "
        "without --config the run's stored configuration is used",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="start afresh in a run directory that holds an earlier run (deleting only its "
        "checkpoint_<step>.npz, averaged.npz, final.npz, best.npz, metrics.jsonl, "
        "config.json and TensorBoard event files)",
    )
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar: a log line every log_every steps (the way it is when stderr "
        "is not a terminal)",
    )
    p.add_argument(
        "--no-test", action="store_true", help="skip judging the test set at the end (train.test)"
    )
    p.set_defaults(func=run)


def override_layers(args) -> list[tuple[dict, str]]:
    """One configuration layer per flag and per ``--set``, labelled for error messages."""
    layers = []
    for dest, dotted in FLAGS.items():
        value = getattr(args, dest, None)
        if value is not None:
            d: dict = {}
            set_dotted(d, dotted, value)
            layers.append((d, f"--{dest.replace('_', '-')}"))
    if getattr(args, "no_test", False):
        layers.append(({"train": {"test": False}}, "--no-test"))
    if getattr(args, "tensorboard", False):
        layers.append(({"train": {"tensorboard": True}}, "--tensorboard"))
    for item in args.set:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected SECTION.KEY=VALUE")
        key, text = (x.strip() for x in item.split("=", 1))
        notes: list = []
        key = flat_override(key, notes)  # the former lm/classify grammar
        for note in notes:
            print(note)
        d = {}
        set_dotted(d, key, override_value(key, text))
        layers.append((d, f"--set {item}"))
    return layers


def _stored_layer(path: Path, notes: list) -> tuple[dict, str]:
    """The training configuration a checkpoint was written with, as a layer."""
    _, header = read_params(path)
    stored = (header.get("meta") or {}).get("train_config")
    if not isinstance(stored, dict):
        raise CheckpointError(f"{path} holds no training configuration: pass --config")
    return migrate(stored, str(path), notes, stored=True), str(path)


def _locates_the_run(layer: dict) -> bool:
    """A layer that says where a run is: its name, its directory, or its task (whose
    config names the run)."""
    if set(layer) <= {"name", "run_dir"}:
        return True
    return set(layer) == {"task"} and set(layer["task"]) == {"name"}


def resolve_config(args) -> tuple[TrainConfig, str | None]:
    """The run's configuration (a file, or a resumed run's stored one; then flags) and
    what to resume ("latest", a checkpoint path, or None)."""
    overrides = override_layers(args)
    resume = args.resume
    if args.config is not None:
        return build([read_config(args.config), *overrides]), resume
    if resume is None:
        return build(overrides), None
    # where the run is: its name and directory (and task, whose config names the run)
    where = [(d, label) for d, label in overrides if _locates_the_run(d)]
    run_dir = build(where).out_dir
    if resume == "latest":
        path = latest_checkpoint(run_dir / "checkpoints")
        if path is None:
            raise CheckpointError(f"nothing to resume: no checkpoints in {run_dir / 'checkpoints'}")
    else:
        path = Path(resume)
    notes: list = []
    stored = _stored_layer(path, notes)
    if resume == "latest" and build([stored]).out_dir != run_dir:  # the run was moved
        overrides = [({"run_dir": str(run_dir)}, "the run directory"), *overrides]
    return build([stored, *overrides], notes), str(path)


def run(args) -> int:
    started = distributed.launched_size()
    if args.ranks > 1 and started == 1:
        check_ranks(args.ranks)  # before mpiexec starts a process
        return distributed.launch(args.ranks, args.argv)
    if args.ranks > 1 and started != args.ranks:
        raise ConfigError(f"--ranks {args.ranks}, but the MPI launcher started {started} processes")
    if started > 1:
        # the ranks join before anything is read: an error every rank meets from here on
        # (a bad --set) is told once, by rank 0, and one rank's error ends them all
        distributed.world()
    cfg, resume = resolve_config(args)
    refuse_owned_folder(cfg.out_dir, "the run's directory", "a run", allowed="run")
    unwritable = progress.unwritable([cfg.name])  # the header names the run
    if unwritable:
        raise ConfigError(unwritable)
    try:  # reading the data, the tokenizer, a checkpoint to resume
        trainer = Trainer(
            cfg, resume=resume, overwrite=args.overwrite, progress=not args.no_progress
        )
    except KeyboardInterrupt as e:
        signum = getattr(e, "signum", signal.SIGINT)
        w = distributed.current()
        advice = resume_advice(cfg, w.size if w else 1) if w is None or w.main else ""
        when = "before training went on" if resume else before_training(0)
        message = f"stopped by {signal_name(signum)} {when}; {advice}"
        raise Interrupted(signum, message if advice else "", at_once=True) from None
    trainer.run()
    return 0
