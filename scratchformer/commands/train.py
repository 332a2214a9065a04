"""scratchformer train: train an encoder-decoder Transformer with the paper's recipe.

scratchformer train                               the embedded default (configs/reverse.toml):
                                                  reverse strings of 1-12 letters, ~2 min on a
                                                  CPU, then held-out examples and accuracy
scratchformer train --config configs/copy.toml    any TOML config: [task] [model] [optim] [train]
scratchformer train --steps 5000 --set model.d_model=128     flags and --set override it
scratchformer train --resume                      continue runs/<name> exactly where it stopped
scratchformer train --task lm                     character-level language model on the WEB
                                                  (after `scratchformer data web-text`)
scratchformer train --task classify               verse -> genre classifier (after
                                                  `scratchformer data genre`)

Outputs go to runs/<name>: config.json, metrics.jsonl (for scratchformer plot curves) and
checkpoints/checkpoint_<step>.npz.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from scratchformer.checkpoint import CheckpointError, latest_checkpoint, load_checkpoint
from scratchformer.train import ConfigError, TrainConfig, train

#: ``--task`` values trained by scratchformer/train_tasks.py instead of the seq2seq loop
TASK_MODELS = ("lm", "classify")

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib

#: flag -> (section or None for top level, key)
FLAG_KEYS = {
    "name": (None, "name"),
    "run_dir": (None, "run_dir"),
    "seed": (None, "seed"),
    "task": ("task", "name"),
    "data_dir": ("task", "data_dir"),
    "steps": ("train", "max_steps"),
    "max_tokens": ("train", "max_tokens"),
    "accum_steps": ("train", "accum_steps"),
    "eval_every": ("train", "eval_every"),
    "checkpoint_every": ("train", "checkpoint_every"),
    "decode": ("train", "decode"),
    "threads": ("train", "threads"),
    "warmup": ("optim", "warmup"),
    "lr_factor": ("optim", "factor"),
}


#: ``--task translate`` without ``--config``: the model and lengths of configs/bible-cpu.toml
TRANSLATE_DEFAULTS = {
    "task": {"name": "translate", "data_dir": "data/bible", "vocab_size": 8000, "max_len": 128},
    "model": {
        "N": 3,
        "d_model": 256,
        "d_ff": 1024,
        "h": 4,
        "P_drop": 0.1,
        "eps_ls": 0.1,
        "max_len": 256,
    },
    "optim": {"warmup": 600},
    "train": {"max_steps": 1500, "max_tokens": 4096, "checkpoint_every": 100, "decode": "beam"},
}


def add_parser(sub) -> None:
    p = sub.add_parser(
        "train",
        help="train a Transformer (no arguments: the built-in reverse task, CPU, minutes)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", "-c", type=Path, help="TOML file (default: the embedded config)")
    p.add_argument("--name", help="run name; outputs go to runs/<name>")
    p.add_argument("--run-dir", help="output directory (default runs/<name>)")
    p.add_argument("--seed", type=int, help="seed of initialisation, data order and dropout")
    p.add_argument(
        "--task",
        choices=["copy", "reverse", "sort", "translate", *TASK_MODELS],
        help="built-in task, 'translate' (TSV pairs, joint BPE; see configs/bible-cpu.toml), "
        "or 'lm' / 'classify' (decoder-only LM, encoder classifier)",
    )
    p.add_argument(
        "--data-dir",
        help="lm/classify: prepared data (default: data/); translate: the directory of "
        "{train,dev,test}.tsv (task.data_dir)",
    )
    p.add_argument("--time-limit", type=float, help="lm/classify: stop after this many seconds")
    p.add_argument("--steps", type=int, help="optimizer steps (train.max_steps)")
    p.add_argument("--max-tokens", type=int, help="token budget per micro-batch")
    p.add_argument("--accum-steps", type=int, help="micro-batches per optimizer step")
    p.add_argument("--eval-every", type=int, help="steps between validations")
    p.add_argument("--checkpoint-every", type=int, help="steps between checkpoints")
    p.add_argument("--warmup", type=int, help="warmup steps of the schedule")
    p.add_argument("--lr-factor", type=float, help="factor of the paper's schedule")
    p.add_argument("--decode", choices=["auto", "beam", "greedy"], help="final test decoding")
    p.add_argument("--threads", type=int, help="BLAS threads (0 = the BLAS default)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override any setting, e.g. --set model.d_model=128 (value parsed as TOML)",
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
        help="start afresh in a run directory that has checkpoints",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def read_toml(path: Path) -> dict:
    """A TOML file as a dict, with a clear error for a missing or malformed file."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"no config file at {path}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path} is not valid TOML: {e}") from None


def parse_value(text: str):
    """``--set`` values are TOML (``128``, ``0.1``, ``true``, ``"x"``); bare words are strings."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_override(d: dict, dotted: str, value) -> None:
    """Set ``d[section][key] = value`` for ``section.key`` (or ``d[key]`` for ``key``)."""
    parts = dotted.split(".")
    if len(parts) > 2 or not all(parts):
        raise ConfigError(f"cannot set {dotted!r}: expected KEY or SECTION.KEY")
    if len(parts) == 1:
        d[parts[0]] = value
    else:
        d.setdefault(parts[0], {})[parts[1]] = value


def resolve_config(args) -> tuple[TrainConfig, str | None]:
    """The run's configuration (file or stored or embedded, then flags) and what to resume."""
    overrides = []
    for flag, (section, key) in FLAG_KEYS.items():
        value = getattr(args, flag, None)
        if value is not None:
            overrides.append((f"{section}.{key}" if section else key, value))
    for item in args.set:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected SECTION.KEY=VALUE")
        key, value = item.split("=", 1)
        overrides.append((key.strip(), parse_value(value.strip())))

    resume = args.resume
    if args.config is not None:
        base = read_toml(args.config)
    elif resume is not None:
        base = _stored_config(resume, overrides)
    else:
        base = {}
        if getattr(args, "task", None) == "translate":  # no file: configs/bible-cpu.toml's sizes
            base = {"name": "bible-cpu", **{k: dict(v) for k, v in TRANSLATE_DEFAULTS.items()}}
    # --set model.KEY edits the model the run would otherwise get (a [model] section
    # replaces the default model as a whole, so start from the default when there is none)
    base.setdefault("model", dict(TrainConfig().model))
    for key, value in overrides:
        apply_override(base, key, value)
    return TrainConfig.from_dict(base), resume


def _stored_config(resume: str, overrides) -> dict:
    """The training config stored in the checkpoint a ``--resume`` points at."""
    if resume == "latest":
        probe = TrainConfig.from_dict({k: v for k, v in overrides if k in ("name", "run_dir")})
        path = latest_checkpoint(probe.out_dir / "checkpoints")
        if path is None:
            raise CheckpointError(
                f"nothing to resume: no checkpoints in {probe.out_dir / 'checkpoints'}"
            )
    else:
        path = Path(resume)
    stored = load_checkpoint(path).meta.get("train_config")
    if stored is None:
        raise CheckpointError(f"{path} holds no training configuration: pass --config")
    return stored


def run_task_model(args) -> int:
    """``--task lm`` / ``--task classify`` (scratchformer/train_tasks.py): flags and
    ``--set KEY=VALUE`` / ``--set model.KEY=VALUE`` set ``TaskTrainConfig`` fields."""
    from scratchformer.train_tasks import (  # noqa: PLC0415
        TaskTrainConfig,
        resume_config,
        train_task,
    )

    if args.config is not None:
        raise ConfigError(f"--task {args.task} takes flags and --set, not --config")
    flags = {
        "name": args.name,
        "run_dir": args.run_dir,
        "seed": args.seed,
        "steps": args.steps,
        "max_tokens": args.max_tokens,
        "eval_every": args.eval_every,
        "warmup": args.warmup,
        "lr_factor": args.lr_factor,
        "threads": args.threads,
        "data_dir": args.data_dir,
        "time_limit": args.time_limit,
    }
    kw = {k: v for k, v in flags.items() if v is not None}
    model = {}
    known = set(TaskTrainConfig.__dataclass_fields__)
    for item in args.set:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE or model.KEY=VALUE")
        key, value = (x.strip() for x in item.split("=", 1))
        if key.startswith("model."):
            model[key[len("model.") :]] = parse_value(value)
        elif key in known and key not in ("task", "model"):
            is_text = TaskTrainConfig.__dataclass_fields__[key].type == "str"
            kw[key] = value if is_text else parse_value(value)  # --set name=2024 is a name
        else:
            raise ConfigError(f"--set {key}: expected model.KEY or one of {sorted(known)}")
    path = None
    if args.resume is not None:
        cfg, path = resume_config({"task": args.task, **kw}, model, args.resume)
    else:
        cfg = TaskTrainConfig(task=args.task, model=model, **kw)
    train_task(cfg, progress=not args.no_progress, overwrite=args.overwrite, resume=path)
    return 0


def run(args) -> int:
    if args.task in TASK_MODELS:
        return run_task_model(args)
    cfg, resume = resolve_config(args)
    t0 = time.perf_counter()
    result = train(cfg, resume=resume, overwrite=args.overwrite, progress=not args.no_progress)
    total = time.perf_counter() - t0
    print(
        f"\ndone: {result.step} steps in {total:.0f} s; checkpoints, metrics.jsonl and "
        f"config.json in {result.run_dir}"
    )
    return 0
