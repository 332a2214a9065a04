"""scratchformer average: average the parameters of several checkpoints.

scratchformer average runs/reverse/checkpoints --last 5       the newest 5 of a run
scratchformer average a.npz b.npz c.npz -o averaged.npz        the files given

As the paper (base model: the last 5 checkpoints, big: the last 20): the element-wise
mean of each parameter. "Last" is by step as a number (checkpoint_10 comes after
checkpoint_9). A tied matrix is averaged once; checkpoints whose parameter names or
shapes differ are an error. The result is a checkpoint with the newest input's model
config and metadata (tokenizer included) and no optimizer state.

Checkpoints of different runs (another seed, other training data, another model, task
or tokenizer) are not averaged: the error names what differs.

The output (default <dir>/averaged.npz) is checked before any work: never one of the
inputs (the same file however it is named: links, bind mounts), never a name
checkpoint_<step>.npz (the trainer's: --resume would pick it up), an .npz and not a
directory; a file a run owns (its averaged.npz, config.json, metrics.jsonl) is replaced
only with --overwrite; missing parent directories are created.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from scratchformer.app import writer
from scratchformer.app.checkpoint import (
    CHECKPOINT_RE,
    CheckpointError,
    average_checkpoints,
    last_checkpoints,
    load_checkpoint,
    save_checkpoint,
)
from scratchformer.app.train.rundir import owned_file_of


def add_parser(sub) -> None:
    p = sub.add_parser(
        "average",
        help="average the parameters of checkpoints (files, or the last N of a directory)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("inputs", nargs="+", type=Path, help="checkpoint files, or one directory")
    p.add_argument("--last", type=int, default=None, help="with a directory: average its last N")
    p.add_argument(
        "--output", "-o", type=Path, default=None, help="output file (default: <dir>/averaged.npz)"
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an output that is a run's file, e.g. its averaged.npz (never an input)",
    )
    p.set_defaults(func=run)


def resolve_inputs(inputs: list, last: int | None) -> list:
    """The checkpoint files to average, oldest first; each an existing file, none twice."""
    if last is not None and (not isinstance(last, int) or isinstance(last, bool) or last < 1):
        raise CheckpointError(f"--last must be a whole number >= 1, got {last!r}")
    if len(inputs) == 1 and inputs[0].is_dir():
        return last_checkpoints(inputs[0], 5 if last is None else last)
    for p in inputs:
        if p.is_dir():
            raise CheckpointError(
                f"{p} is a directory: give either one directory or checkpoint files, not both"
            )
    if last is not None:
        raise CheckpointError("--last needs a directory of checkpoints")
    seen = set()
    for p in inputs:
        if not p.is_file():
            raise CheckpointError(f"no checkpoint file at {p}")
        if p.resolve() in seen:
            raise CheckpointError(f"{p} is given twice: each checkpoint counts once in a mean")
        seen.add(p.resolve())
    return list(inputs)


def check_average_output(out: Path, paths: list, overwrite: bool) -> writer.Target:
    """Refuse an output that is one of the inputs (the same file, however named), a
    file a run owns (its config.json, a checkpoint, its averaged.npz) or any other file
    but an earlier average (unless ``overwrite``), not an .npz, a directory, or a name
    the trainer owns (``checkpoint_<step>.npz``: ``--resume`` would take the average for
    the run's latest checkpoint). Missing parent directories are created by the save
    (as for every checkpoint), but not through a file."""
    plan = writer.Plan("average", [("input checkpoint", p) for p in paths], overwrite)
    if CHECKPOINT_RE.match(out.name):
        plan._not_an_input(out, f"-o {out}")
        raise CheckpointError(
            f"-o {out}: names checkpoint_<step>.npz belong to the trainer (--resume would "
            "take an average for the run's latest checkpoint): name it e.g. averaged.npz"
        )
    return plan.output(out, "average -o", flag="-o", suffix=".npz", protected=owned_file_of)


def run(args) -> int:
    paths = resolve_inputs(args.inputs, args.last)
    out = Path(args.output or paths[-1].parent / "averaged.npz")
    target = check_average_output(out, paths, args.overwrite)
    averaged = average_checkpoints(paths)
    newest = load_checkpoint(paths[-1])
    newest.model.load_state_dict(averaged)
    meta = {**newest.meta, "averaged_from": [str(p) for p in paths]}
    save_checkpoint(out, newest.model, step=newest.step, meta=meta, role=target.role)
    print(f"averaged {len(paths)} checkpoints ({', '.join(p.name for p in paths)}) -> {out}")
    return 0
