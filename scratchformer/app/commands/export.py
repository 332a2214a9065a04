"""scratchformer export: a trained translation model as a Hugging Face transformers folder.

scratchformer export runs/bible-cpu/checkpoints/final.npz -o bible-es-en

Writes a Marian model folder (config.json, generation_config.json, model.safetensors,
tokenizer.json, tokenizer_config.json, tokenizer.model) that transformers loads with
MarianMTModel.from_pretrained and AutoTokenizer.from_pretrained (and, in transformers 4,
pipeline("translation")).
Needs the export extra (pip install -e '.[export]': safetensors only); the exact mapping
of every tensor and token: docs/export.md. Post-LN models with sinusoidal positions and
dense attention export; the others are refused with the reason.

The folder is written whole: the new one is built beside it and renamed into place, so
it holds all six files of one export, never a mix (a run killed between the two renames
leaves it briefly absent: the next export puts it back, and says so). Files already there
with other content (another export, your edits) are replaced only with --overwrite; a
folder holding other files than an export's is refused, and never the folder of a run,
of its checkpoints, of a data set or of the exercises; the checkpoint is never an output.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from scratchformer.app.commands.folders import refuse_owned_folder
from scratchformer.app.export import export_marian


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
        help="replace an earlier export whose files hold other content (never the checkpoint)",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    refuse_owned_folder(args.output, "-o", "an export")
    written = export_marian(args.checkpoint, args.output, overwrite=args.overwrite)
    print(f"wrote {args.output}/ ({', '.join(p.name for p in written)})")
    print(
        f"load it: MarianMTModel.from_pretrained({str(args.output)!r}), "
        f"AutoTokenizer.from_pretrained({str(args.output)!r})"
    )
    return 0
