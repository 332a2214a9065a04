"""scratchformer export: a trained translation model as a Hugging Face transformers folder.

scratchformer export runs/bible-cpu/checkpoints/final.npz -o bible-es-en

Writes a Marian model folder (config.json, generation_config.json, model.safetensors,
tokenizer.json, tokenizer_config.json, tokenizer.model) that transformers loads with
MarianMTModel.from_pretrained and AutoTokenizer.from_pretrained (and, in transformers 4,
pipeline("translation")).
Needs the export extra (pip install -e '.[export]': safetensors only); the exact mapping
of every tensor and token: docs/export.md. Post-LN models with sinusoidal positions and
dense attention export; the others are refused with the reason.

All six files are written or none; files already there with other content (another
export, your edits) are replaced only with --overwrite; the checkpoint is never an output,
nor a folder of a run or a data set (a run's config.json would be replaced).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from scratchformer.errors import ScratchformerError
from scratchformer.export import FILES, export_marian
from scratchformer.train.rundir import owned_file_of


def add_parser(sub) -> None:
    p = sub.add_parser(
        "export",
        help="write a translation checkpoint as a Hugging Face transformers model folder",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("checkpoint", type=Path, help="a translation checkpoint (.npz), e.g. final.npz")
    p.add_argument("--output", "-o", type=Path, required=True, help="the folder to write")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace files in the folder that hold other content (never the checkpoint)",
    )
    p.set_defaults(func=run)


def check_folder(out: Path) -> None:
    """A run's or a data set's folder is never an export's, ``--overwrite`` or not: its
    config.json (the run's) would be replaced."""
    for name in FILES:
        what = owned_file_of(out / name)
        if what:
            raise ScratchformerError(
                f"-o {out}: {out / name} would be {what}: export into a folder of its own"
            )


def run(args) -> int:
    check_folder(args.output)
    written = export_marian(args.checkpoint, args.output, overwrite=args.overwrite)
    print(f"wrote {args.output}/ ({', '.join(p.name for p in written)})")
    print(
        f"load it: MarianMTModel.from_pretrained({str(args.output)!r}), "
        f"AutoTokenizer.from_pretrained({str(args.output)!r})"
    )
    return 0
