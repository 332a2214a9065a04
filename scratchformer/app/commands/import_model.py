"""scratchformer import: a Hugging Face model folder as one of our checkpoints.

scratchformer import path/to/gpt2 -o gpt2.npz
scratchformer import path/to/opus-mt-en-de -o opus.npz

Reads the folder's config.json, model.safetensors (its tensors through safetensors'
NumPy API: never a pickle) and its tokenizer files, and writes one checkpoint with the
tokenizer inside. GPT-2 (GPT2LMHeadModel; vocab.json and merges.txt, or tokenizer.json)
comes in as our language model: generate, plot attention, average, gradcheck
--checkpoint and train --init-from take it. Marian (MarianMTModel, OPUS-MT's layout:
source.spm, target.spm and vocab.json; or a folder our export wrote) comes in as our
encoder-decoder: translate, evaluate, average, plot attention, gradcheck --checkpoint,
train --init-from and export take it. Another architecture, or an option the models here
lack (rotary or ALiBi positions, the exact GELU, ...), is refused naming what is
missing. A folder with only pytorch_model.bin is refused with the command that converts
it. Needs the gpt2 extra (pip install -e '.[gpt2]': tokenizers and safetensors), and for
Marian sentencepiece (the bpe extra); nothing is downloaded. The mapping of every
tensor: docs/import.md.

The output is checked before anything is read: an .npz, never a file of the folder read,
never in the folder of a run, of its checkpoints, of a data set or of the exercises, not
named checkpoint_<step>.npz (a run's); an existing file is replaced only when it is an
earlier import, or with --overwrite.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from scratchformer.app import writer
from scratchformer.app.checkpoint import CHECKPOINT_RE
from scratchformer.app.commands.folders import refuse_owned_folder
from scratchformer.app.hf_import import HFImportError, import_folder
from scratchformer.app.train.rundir import owned_file_of

ROLE = "import -o"


def add_parser(sub) -> None:
    p = sub.add_parser(
        "import",
        help="import a Hugging Face model folder (GPT-2, Marian) as a checkpoint",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "folder", type=Path, help="the model's folder (config.json, model.safetensors, ...)"
    )
    p.add_argument(
        "--output", "-o", type=Path, required=True, help="the checkpoint to write (.npz)"
    )
    p.add_argument(
        "--overwrite", action="store_true", help="replace an existing file that is not an import"
    )
    p.set_defaults(func=run)


def check_output(folder: Path, out: Path, overwrite: bool) -> writer.Target:
    """The output, refused in one line before anything is read (the module doc)."""
    if CHECKPOINT_RE.match(out.name):
        raise HFImportError(
            f"-o {out}: names checkpoint_<step>.npz belong to the trainer (--resume would "
            "take the import for a run's checkpoint): name it e.g. gpt2.npz"
        )
    refuse_owned_folder(out.parent, "-o", "an imported model")
    inputs = [("model folder's", p) for p in sorted(folder.glob("*")) if p.is_file()]
    plan = writer.Plan("import", inputs if folder.is_dir() else [], overwrite)
    return plan.output(out, ROLE, flag="-o", suffix=".npz", protected=owned_file_of)


def run(args) -> int:
    target = check_output(args.folder, args.output, args.overwrite)
    path = import_folder(args.folder, target.path, role=target.role)
    print(f"imported {args.folder} -> {path}")
    return 0
