"""scratchformer average: average the parameters of several checkpoints.

scratchformer average runs/reverse/checkpoints --last 5       the newest 5 of a run
scratchformer average a.npz b.npz c.npz -o averaged.npz        the files given

As the paper (base model: the last 5 checkpoints, big: the last 20): the element-wise
mean of each parameter. "Last" is by step as a number (checkpoint_10 comes after
checkpoint_9). A tied matrix is averaged once; checkpoints whose parameter names or
shapes differ are an error. The result is a checkpoint with the newest input's model
config and metadata (tokenizer included) and no optimizer state.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from scratchformer.checkpoint import (
    CheckpointError,
    average_checkpoints,
    last_checkpoints,
    load_checkpoint,
    save_checkpoint,
)


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
    p.set_defaults(func=run)


def resolve_inputs(inputs: list, last: int | None) -> list:
    """The checkpoint files to average, oldest first."""
    if len(inputs) == 1 and inputs[0].is_dir():
        return last_checkpoints(inputs[0], last or 5)
    if any(p.is_dir() for p in inputs):
        raise CheckpointError("give either one directory or checkpoint files, not both")
    if last is not None:
        raise CheckpointError("--last needs a directory of checkpoints")
    return list(inputs)


def run(args) -> int:
    paths = resolve_inputs(args.inputs, args.last)
    averaged = average_checkpoints(paths)
    newest = load_checkpoint(paths[-1])
    newest.model.load_state_dict(averaged)
    out = args.output or paths[-1].parent / "averaged.npz"
    if Path(out).resolve() in {p.resolve() for p in paths}:
        raise CheckpointError(
            f"-o {out} is one of the checkpoints being averaged: name another file"
        )
    meta = {**newest.meta, "averaged_from": [str(p) for p in paths]}
    save_checkpoint(out, newest.model, step=newest.step, meta=meta)
    print(f"averaged {len(paths)} checkpoints ({', '.join(p.name for p in paths)}) -> {out}")
    return 0
