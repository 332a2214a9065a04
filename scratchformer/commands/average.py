"""scratchformer average: average the parameters of several checkpoints.

scratchformer average runs/reverse/checkpoints --last 5       the newest 5 of a run
scratchformer average a.npz b.npz c.npz -o averaged.npz        the files given

As the paper (base model: the last 5 checkpoints, big: the last 20): the element-wise
mean of each parameter. "Last" is by step as a number (checkpoint_10 comes after
checkpoint_9). A tied matrix is averaged once; checkpoints whose parameter names or
shapes differ are an error. The result is a checkpoint with the newest input's model
config and metadata (tokenizer included) and no optimizer state.

The output (default <dir>/averaged.npz) is checked before any work: never one of the
inputs, never a name checkpoint_<step>.npz (the trainer's: --resume would pick it up),
never a directory; missing parent directories are created.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from scratchformer.checkpoint import (
    CHECKPOINT_RE,
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


def check_output(out: Path, paths: list) -> None:
    """Refuse an output that would overwrite an input, that the trainer owns, or that
    is a directory; its missing parent directories are created by the save (as for
    every checkpoint), but not through a file."""
    if out.resolve() in {p.resolve() for p in paths}:
        raise CheckpointError(
            f"-o {out} is one of the checkpoints being averaged: name another file"
        )
    if CHECKPOINT_RE.match(out.name):
        raise CheckpointError(
            f"-o {out}: names checkpoint_<step>.npz belong to the trainer (--resume would "
            "take an average for the run's latest checkpoint): name it e.g. averaged.npz"
        )
    if out.is_dir():
        raise CheckpointError(f"-o {out} is a directory: name the file to write")
    parent = out.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise CheckpointError(f"-o {out}: {parent} is not a directory")


def run(args) -> int:
    paths = resolve_inputs(args.inputs, args.last)
    out = Path(args.output or paths[-1].parent / "averaged.npz")
    check_output(out, paths)
    averaged = average_checkpoints(paths)
    newest = load_checkpoint(paths[-1])
    newest.model.load_state_dict(averaged)
    meta = {**newest.meta, "averaged_from": [str(p) for p in paths]}
    save_checkpoint(out, newest.model, step=newest.step, meta=meta)
    print(f"averaged {len(paths)} checkpoints ({', '.join(p.name for p in paths)}) -> {out}")
    return 0
