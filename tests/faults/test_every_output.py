"""Every output of every command, against every shape of data loss that applies to it.

The commands are read from the command line's own parser (``build_parser``): each one
is in ``SHAPES`` (it writes, and is driven here), in ``WRITES_NOTHING`` (with the
reason), or in ``SAME_SPLITS_AS_DATA_PAIRS``; a command added to the CLI without an
entry fails ``test_every_command_is_accounted_for``.

For each writing command, ``SHAPES`` gives, for each of the four shapes, either the
cases driven or why the shape does not apply to that command:

- ``symlink-to-input``: the output is a symbolic link to a file the command reads;
- ``hardlink-to-input``: the output is a hard link to one;
- ``foreign-file``: an existing file the program did not write (without --overwrite);
- ``link-out-of-folder``: a file of a folder the program owns (a run directory, a data
  set's folder, the exercises folder) is a symbolic link leading out of that folder.

Each case runs the real command in-process (``scratchformer.app.cli.main``): it must end
with exit status 2 and exactly one line on stderr, and leave every file, link and folder
under the test's folder as it was (SHA-256 of each file; the run's ``.lock`` aside).
A case on an input is run again with ``--overwrite`` where the command has the flag:
``--overwrite`` replaces a foreign file, never an input.

Then: a re-run writing the same output is allowed without ``--overwrite``, another
command's output is not, and ``--overwrite`` replaces a foreign file.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import struct
import sys
import zlib
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest

from scratchformer.app.cli import build_parser, main
from scratchformer.exercises import EXERCISES

# -- the commands, from the parser ---------------------------------------------------------


def commands(parser: argparse.ArgumentParser, prefix: str = "") -> dict:
    """``{"plot schedule": its parser, ...}``: every command the CLI has, sub-commands
    walked; a command whose first positional argument is a choice (``data DATASET``)
    counts as one command per choice (``data pairs``, ``data genre``, ...)."""
    found = {}
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if subs:
        for name, sub in subs[0].choices.items():
            found.update(commands(sub, f"{prefix} {name}".strip()))
        return found
    positionals = [a for a in parser._actions if not a.option_strings]
    if positionals and positionals[0].choices:
        return {f"{prefix} {choice}": parser for choice in positionals[0].choices}
    return {prefix: parser}


#: the commands that write no file, and why
WRITES_NOTHING = {
    "gradcheck": "prints a finite-difference report of a model it builds in memory",
    "kernels": "prints the ops' tables and their parity check",
    "generate": "prints its samples on standard output",
    "exercise list": "prints where the learner stands, re-checked from the files (read only)",
    "exercise check": "grades the learner's files, read as text and compiled in memory",
    "exercise solution": "prints the engine's code and the derivation",
}

#: the data sets read from Debian's SWORD Bibles (usually not installed): their splits
#: are written by the same ``data.bible.split_files`` -> ``writer.FileSet`` as the splits
#: of ``data pairs`` (which adds its input file to ``inputs``), so the cases of ``data
#: pairs`` (a split that is a link out of the data set's folder, splits with other
#: content) are theirs too
SAME_SPLITS_AS_DATA_PAIRS = {
    "data genre": "data.bible.prepare_genre -> split_files -> writer.FileSet",
    "data web-text": "data.bible.prepare_text -> split_files -> writer.FileSet",
    "data bible": "data.bible_pairs.write_pairs -> split_files -> writer.FileSet",
}

SHAPE_NAMES = ("symlink-to-input", "hardlink-to-input", "foreign-file", "link-out-of-folder")


# -- the test's folder ----------------------------------------------------------------------
def snapshot(root: Path) -> dict:
    """Every file (its SHA-256), link (its target) and folder under ``root``; links are
    listed, never followed. A run's ``.lock`` is left out (taking it writes the holder)."""
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(folder, name)
            if name == ".lock":
                continue
            key = p.relative_to(root).as_posix()
            if p.is_symlink():
                found[key] = f"link -> {os.readlink(p)}"
            elif p.is_dir():
                found[key] = "folder"
            else:
                found[key] = hashlib.sha256(p.read_bytes()).hexdigest()
    return found


def changes(before: dict, after: dict) -> dict:
    return {
        k: (before.get(k), after.get(k))
        for k in before.keys() | after.keys()
        if before.get(k) != after.get(k)
    }


def tiny_png() -> bytes:
    """A real 1x1 PNG, made by the user (not by the program)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\x00\x00")
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


class Place:
    """A test's folder and what a case needs in it, made when first asked for: a copy of
    a trained run, a source file, a data set, a pairs file, an exercises folder, a
    folder ``elsewhere`` (outside every folder the program owns)."""

    def __init__(self, root: Path, reverse_model: Callable, translation: Callable = None):
        self.root = root
        self._reverse_model = reverse_model
        self._translation = translation

    @cached_property
    def run(self) -> Path:
        """A copy of a trained run: config.json, metrics.jsonl, checkpoints/."""
        here = self.root / "run"
        shutil.copytree(Path(self._reverse_model()[0]).parent.parent, here)
        return here

    @property
    def ckpt(self) -> Path:
        return self.run / "checkpoints" / "final.npz"

    @property
    def checkpoints(self) -> list[Path]:
        return sorted((self.run / "checkpoints").glob("checkpoint_*.npz"))

    @cached_property
    def translation(self) -> Path:
        """A copy of a small BPE translation model's final.npz (``export``'s input)."""
        pytest.importorskip("sentencepiece")
        pytest.importorskip("safetensors")
        here = self.root / "translate.npz"
        shutil.copy(self._translation(), here)
        return here

    @cached_property
    def gpt2(self) -> Path:
        """A small GPT-2 folder (``import``'s input), written with NumPy and safetensors."""
        pytest.importorskip("tokenizers")
        pytest.importorskip("safetensors")
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hf"))
        from gpt2_folders import numpy_gpt2  # noqa: PLC0415  (tests/hf's folder builders)

        return numpy_gpt2(self.root / "gpt2")

    @cached_property
    def src(self) -> Path:
        p = self.root / "src.txt"
        p.write_text("abc\ncab\n", encoding="utf-8")
        return p

    @cached_property
    def data(self) -> Path:
        """A data set of the reverse model's letters (``evaluate --data-dir``)."""
        d = self.root / "data"
        d.mkdir()
        for split in ("train", "dev", "test"):
            (d / f"{split}.tsv").write_text("abc\tcba\nde\ted\nfghij\tjihgf\n", encoding="utf-8")
        return d

    @cached_property
    def pairs(self) -> Path:
        """The user's sentence pairs (``data pairs FILE``)."""
        p = self.root / "my.tsv"
        p.write_text("".join(f"source {i}\ttarget {i}\n" for i in range(30)), encoding="utf-8")
        return p

    @cached_property
    def exercises(self) -> Path:
        """The learner's folder, one exercise (relu) solved."""
        d = self.root / "exercises"
        d.mkdir()
        (d / "relu.py").write_text(EXERCISES["relu"].solution_text(), encoding="utf-8")
        return d

    @cached_property
    def elsewhere(self) -> Path:
        d = self.root / "elsewhere"
        d.mkdir()
        return d

    @cached_property
    def toml(self) -> Path:
        """The user's training config (``train --config``)."""
        p = self.root / "tiny.toml"
        p.write_text(
            '[task]\nname = "reverse"\ntrain_size = 200\nvalid_size = 10\ntest_size = 4\n'
            '[model]\npreset = "tiny"\n',
            encoding="utf-8",
        )
        return p

    # the shapes
    @staticmethod
    def symlink(path: Path, target: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(target, target_is_directory=target.is_dir())
        return path

    @staticmethod
    def hardlink(path: Path, target: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.link(target, path)
        return path

    @staticmethod
    def foreign(path: Path, content: bytes = b"my notes, not the program's\n") -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        return path

    def moved_out(self, path: Path) -> Path:
        """``path`` moved to ``elsewhere`` and a symbolic link to it left in its place."""
        target = self.elsewhere / path.name
        shutil.move(path, target)
        return self.symlink(path, target)


class Case(NamedTuple):
    """One way to put an output where it would destroy something: ``setup(place)``
    makes it and returns ``(argv, fragments of the one line of the refusal)``.
    ``overwrite_too``: refused with --overwrite as well (an input is never written)."""

    name: str
    setup: Callable
    overwrite_too: bool = False


# -- the cases, by command --------------------------------------------------------------------
def _translate(p: Place, out: Path) -> list:
    return [
        "translate",
        "--checkpoint",
        str(p.ckpt),
        "--input",
        str(p.src),
        "--greedy",
        "--output",
        str(out),
    ]


def translate_symlink(p: Place):
    out = p.symlink(p.root / "link.txt", p.src)
    return _translate(p, out), [f"--output {out} is the --input file"]


def translate_hardlink(p: Place):
    out = p.hardlink(p.root / "hard.txt", p.src)
    return _translate(p, out), [f"--output {out} is the --input file"]


def translate_foreign(p: Place):
    out = p.foreign(p.root / "notes.txt")
    return _translate(p, out), [f"--output {out} exists (not written by this output)"]


def _evaluate(p: Place, out: Path) -> list:
    return [
        "evaluate",
        "--checkpoint",
        str(p.ckpt),
        "--data-dir",
        str(p.data),
        "--greedy",
        "--output",
        str(out),
    ]


def evaluate_symlink(p: Place):
    out = p.symlink(p.root / "hyp.txt", p.data / "test.tsv")
    return _evaluate(p, out), [f"--output {out} is the --split test file"]


def evaluate_hardlink(p: Place):
    out = p.hardlink(p.root / "hyp.txt", p.data / "test.tsv")
    return _evaluate(p, out), [f"--output {out} is the --split test file"]


def evaluate_foreign(p: Place):
    out = p.foreign(p.root / "notes.txt")
    return _evaluate(p, out), [f"--output {out} exists (not written by this output)"]


def _average(p: Place, out: Path) -> list:
    return ["average", *map(str, p.checkpoints), "-o", str(out)]


def average_symlink(p: Place):
    out = p.symlink(p.root / "other.npz", p.checkpoints[0])
    return _average(p, out), [f"-o {out} is the input checkpoint file"]


def average_hardlink(p: Place):
    out = p.hardlink(p.root / "other.npz", p.checkpoints[0])
    return _average(p, out), [f"-o {out} is the input checkpoint file"]


def average_foreign(p: Place):
    out = p.root / "mine.npz"
    np.savez(out, weights=np.arange(6.0))  # an .npz of the user's, not a checkpoint of ours
    return _average(p, out), [f"-o {out} exists (not written by this output)"]


def average_default_linked_out(p: Place):
    """``average DIR``: its default output DIR/averaged.npz is a link out of the run."""
    target = p.elsewhere / "averaged.npz"
    shutil.copy(p.ckpt, target)  # a model of the user's, kept outside
    (p.run / "checkpoints" / "averaged.npz").unlink(missing_ok=True)
    out = p.symlink(p.run / "checkpoints" / "averaged.npz", target)
    return ["average", str(p.run / "checkpoints"), "--last", "1"], [f"-o {out} exists", "link"]


def _import(p: Place, out: Path) -> list:
    return ["import", str(p.gpt2), "-o", str(out)]


def import_symlink(p: Place):
    out = p.symlink(p.root / "gpt2.npz", p.gpt2 / "model.safetensors")
    return _import(p, out), [f"-o {out} is the model folder's file"]


def import_hardlink(p: Place):
    out = p.hardlink(p.root / "gpt2.npz", p.gpt2 / "model.safetensors")
    return _import(p, out), [f"-o {out} is the model folder's file"]


def import_foreign(p: Place):
    out = p.root / "mine.npz"
    np.savez(out, weights=np.arange(6.0))  # an .npz of the user's, not a checkpoint of ours
    return _import(p, out), [f"-o {out} exists (not written by this output)"]


def _export(p: Place, out: Path) -> list:
    return ["export", str(p.translation), "-o", str(out)]


def export_symlink(p: Place):
    out = p.root / "hf"
    weights = p.symlink(out / "model.safetensors", p.translation)
    return _export(p, out), [f"{weights} is the checkpoint file"]


def export_hardlink(p: Place):
    out = p.root / "hf"
    weights = p.hardlink(out / "model.safetensors", p.translation)
    return _export(p, out), [f"{weights} is the checkpoint file"]


def export_foreign(p: Place):
    out = p.root / "hf"
    notes = p.foreign(out / "config.json")
    return _export(p, out), [f"{notes} exists with other content", "--overwrite"]


def export_linked_out(p: Place):
    out = p.root / "hf"
    kept = p.foreign(p.elsewhere / "tokenizer.json", b'{"mine": true}\n')
    link = p.symlink(out / "tokenizer.json", kept)
    return _export(p, out), [f"{link} leads out of {out}"]


def _last_attention(folder: Path) -> Path:
    """The last of the three maps ``plot attention`` draws: all are checked before any
    is drawn, so the first two must not be written either."""
    return folder / "attention_cross.png"


def _attention(p: Place, *extra) -> list:
    return ["plot", "attention", str(p.ckpt), "abc", *extra]


def attention_symlink(p: Place):
    out = p.symlink(_last_attention(p.root / "maps"), p.ckpt)
    return _attention(p, "--out-dir", str(p.root / "maps")), [f"-o {out} is the checkpoint file"]


def attention_hardlink(p: Place):
    out = p.hardlink(_last_attention(p.root / "maps"), p.ckpt)
    return _attention(p, "--out-dir", str(p.root / "maps")), [f"-o {out} is the checkpoint file"]


def attention_foreign(p: Place):
    out = p.foreign(_last_attention(p.root / "maps"), tiny_png())
    return _attention(p, "--out-dir", str(p.root / "maps")), [f"-o {out} exists (not written"]


def attention_default_linked_out(p: Place):
    """No --out-dir: the maps go into the run directory, where one is a link out of it."""
    out = p.symlink(_last_attention(p.run), p.foreign(p.elsewhere / "mine.png", tiny_png()))
    return _attention(p), [f"-o {out} exists (not written by this output)", "link"]


def _positional(p: Place, *extra) -> list:
    return ["plot", "positional", "--checkpoint", str(p.ckpt), "--positions", "10", *extra]


def positional_symlink(p: Place):
    out = p.symlink(p.root / "pos.png", p.ckpt)
    return _positional(p, "-o", str(out)), [f"-o {out} is the checkpoint file"]


def positional_hardlink(p: Place):
    out = p.hardlink(p.root / "pos.png", p.ckpt)
    return _positional(p, "-o", str(out)), [f"-o {out} is the checkpoint file"]


def positional_foreign(p: Place):
    out = p.foreign(p.root / "mine.png", tiny_png())
    return _positional(p, "-o", str(out)), [f"-o {out} exists (not written by this output)"]


def positional_default_linked_out(p: Place):
    """No -o with --checkpoint: positional.png in the run directory, a link out of it."""
    out = p.symlink(p.run / "positional.png", p.foreign(p.elsewhere / "mine.png", tiny_png()))
    return _positional(p), [f"-o {out} exists (not written by this output)", "link"]


def schedule_foreign(p: Place):
    out = p.foreign(p.root / "mine.png", tiny_png())
    argv = ["plot", "schedule", "--steps", "50", "-o", str(out)]
    return argv, [f"-o {out} exists (not written by this output)"]


def _curves(p: Place, *extra) -> list:
    return ["plot", "curves", str(p.run / "metrics.jsonl"), *extra]


def curves_symlink(p: Place):
    out = p.symlink(p.root / "curves.png", p.run / "metrics.jsonl")
    return _curves(p, "-o", str(out)), [f"-o {out} is the metrics file"]


def curves_hardlink(p: Place):
    out = p.hardlink(p.root / "curves.png", p.run / "metrics.jsonl")
    return _curves(p, "-o", str(out)), [f"-o {out} is the metrics file"]


def curves_foreign(p: Place):
    out = p.foreign(p.root / "mine.png", tiny_png())
    return _curves(p, "-o", str(out)), [f"-o {out} exists (not written by this output)"]


def curves_default_linked_out(p: Place):
    """No -o: curves.png in the run directory, a link out of it."""
    out = p.symlink(p.run / "curves.png", p.foreign(p.elsewhere / "mine.png", tiny_png()))
    return _curves(p), [f"-o {out} exists (not written by this output)", "link"]


def _pairs(p: Place) -> list:
    return ["data", "pairs", str(p.pairs), "--out", str(p.root / "set")]


def pairs_symlink(p: Place):
    out = p.symlink(p.root / "set" / "train.tsv", p.pairs)
    return _pairs(p), [f"{out} is the pairs file"]


def pairs_hardlink(p: Place):
    out = p.hardlink(p.root / "set" / "dev.tsv", p.pairs)
    return _pairs(p), [f"{out} is the pairs file"]


def pairs_foreign(p: Place):
    out = p.foreign(p.root / "set" / "test.tsv", b"my own test pairs\tedited by hand\n")
    return _pairs(p), [f"{out} exists with other content", "--overwrite"]


def pairs_linked_out(p: Place):
    kept = p.foreign(p.elsewhere / "keep.tsv", b"kept\tsafe\n")
    out = p.symlink(p.root / "set" / "train.tsv", kept)
    return _pairs(p), [f"{out} leads out of {p.root / 'set'}"]


def _start(p: Place) -> list:
    return ["exercise", "start", "relu", "--dir", str(p.root / "ex")]


def start_foreign(p: Place):
    out = p.foreign(p.root / "ex" / "relu.py", b"# my own work on relu\n")
    return _start(p), [f"{out} exists: it is not overwritten"]


def start_linked_out(p: Place):
    mine = p.foreign(p.elsewhere / "mine.py", b"# my own file\n")
    out = p.symlink(p.root / "ex" / "relu.py", mine)
    return _start(p), [str(out)]


def start_dangling_link_out(p: Place):
    """A link out of the folder to a file that does not exist yet: never made there."""
    out = p.symlink(p.root / "ex" / "relu.py", p.elsewhere / "new.py")
    return _start(p), [f"{out} leads out of {p.root / 'ex'}"]


def hint_linked_out(p: Place):
    notes = p.foreign(p.elsewhere / "notes.md", b"# my notes\n")
    out = p.symlink(p.root / "ex" / "relu.hints.md", notes)
    return ["exercise", "hint", "relu", "--dir", str(p.root / "ex")], [
        f"{out} leads out of {p.root / 'ex'}"
    ]


#: the settings of ``exercise train`` that make its runs tiny
EXERCISE_SETS = [
    "--set",
    "model.preset=tiny",
    "--set",
    "task.train_size=200",
    "--set",
    "task.valid_size=10",
    "--set",
    "task.test_size=4",
]


def _exercise_train(p: Place) -> list:
    return [
        "exercise",
        "train",
        "--dir",
        str(p.exercises),
        "--steps",
        "2",
        "--no-progress",
        *EXERCISE_SETS,
    ]


def exercise_train_symlink(p: Place):
    """The run's config.json a link to the learner's exercise file (which it reads)."""
    p.symlink(p.exercises / "runs" / "yours" / "config.json", p.exercises / "relu.py")
    return _exercise_train(p), ["holds config.json, which is not a scratchformer run's file"]


def exercise_train_hardlink(p: Place):
    p.hardlink(p.exercises / "runs" / "yours" / "metrics.jsonl", p.exercises / "relu.py")
    return _exercise_train(p), ["holds metrics.jsonl, which is not a scratchformer run's file"]


def exercise_train_foreign(p: Place):
    p.foreign(p.exercises / "runs" / "yours" / "config.json", b'{"my": "notes"}\n')
    return _exercise_train(p), ["holds config.json, which is not a scratchformer run's file"]


def exercise_train_run_linked_out(p: Place):
    """exercises/runs/yours a link to a run directory outside the exercises folder (a
    real run, whose files the exercise's fresh run would replace)."""
    out = p.symlink(p.exercises / "runs" / "yours", p.run)
    return _exercise_train(p), [str(out)]


def _train(p: Place, run: Path, *extra) -> list:
    return [
        "train",
        "--config",
        str(p.toml),
        "--run-dir",
        str(run),
        "--steps",
        "2",
        "--no-progress",
        "--no-test",
        *extra,
    ]


def train_symlink(p: Place):
    p.symlink(p.root / "new" / "config.json", p.toml)
    return _train(p, p.root / "new"), ["holds config.json, which is not a scratchformer run's"]


def train_hardlink(p: Place):
    p.hardlink(p.root / "new" / "metrics.jsonl", p.toml)
    return _train(p, p.root / "new"), ["holds metrics.jsonl, which is not a scratchformer run's"]


def train_foreign(p: Place):
    p.foreign(p.root / "new" / "config.json", b'{"my": "notes"}\n')
    return _train(p, p.root / "new"), ["holds config.json, which is not a scratchformer run's"]


def train_metrics_linked_out(p: Place):
    """A fresh run in a folder whose metrics.jsonl is a link to another run's log."""
    p.symlink(p.root / "new" / "metrics.jsonl", p.run / "metrics.jsonl")
    return _train(p, p.root / "new"), [f"{p.root / 'new' / 'metrics.jsonl'} leads out of"]


def _resume(p: Place) -> list:
    return [
        "train",
        "--run-dir",
        str(p.run),
        "--resume",
        "--steps",
        "62",
        "--no-progress",
        "--no-test",
    ]


def train_resume_config_linked_out(p: Place):
    out = p.moved_out(p.run / "config.json")
    return _resume(p), [f"{out} leads out of {p.run}"]


def train_resume_metrics_linked_out(p: Place):
    out = p.moved_out(p.run / "metrics.jsonl")
    return _resume(p), [f"{out} leads out of {p.run}"]


def train_overwrite_checkpoints_linked_out(p: Place):
    """``--overwrite`` deletes the run's own checkpoints: never another run's, through a
    checkpoints/ that is a link out of the run directory."""
    new = p.root / "new"
    p.symlink(new / "checkpoints", p.run / "checkpoints")
    return _train(p, new, "--overwrite"), [f"{new / 'checkpoints'} leads out of"]


NO_INPUT = "reads no file of the user's: there is no input to link the output to"
FREE_PATH = "the output is a path the user names, in no folder the program owns"

#: each writing command: for each shape, its cases, or why the shape does not apply
SHAPES: dict = {
    "train": {
        "symlink-to-input": [Case("config.json -> --config", train_symlink, True)],
        "hardlink-to-input": [Case("metrics.jsonl = --config", train_hardlink, True)],
        # --overwrite deletes a run's own files only: a foreign one is refused with it too
        "foreign-file": [Case("config.json of the user's", train_foreign, True)],
        "link-out-of-folder": [
            Case("fresh, metrics.jsonl -> another run's", train_metrics_linked_out),
            Case("--resume, config.json -> outside", train_resume_config_linked_out),
            Case("--resume, metrics.jsonl -> outside", train_resume_metrics_linked_out),
            Case(
                "--overwrite, checkpoints/ -> another run's", train_overwrite_checkpoints_linked_out
            ),
        ],
    },
    "translate": {
        "symlink-to-input": [Case("--output -> --input", translate_symlink, True)],
        "hardlink-to-input": [Case("--output = --input", translate_hardlink, True)],
        "foreign-file": [Case("--output notes.txt", translate_foreign)],
        "link-out-of-folder": FREE_PATH,
    },
    "evaluate": {
        "symlink-to-input": [Case("--output -> test.tsv", evaluate_symlink, True)],
        "hardlink-to-input": [Case("--output = test.tsv", evaluate_hardlink, True)],
        "foreign-file": [Case("--output notes.txt", evaluate_foreign)],
        "link-out-of-folder": FREE_PATH,
    },
    "average": {
        "symlink-to-input": [Case("-o -> checkpoint", average_symlink, True)],
        "hardlink-to-input": [Case("-o = checkpoint", average_hardlink, True)],
        "foreign-file": [Case("-o an .npz of the user's", average_foreign)],
        "link-out-of-folder": [Case("DIR/averaged.npz -> outside", average_default_linked_out)],
    },
    "export": {
        "symlink-to-input": [Case("hf/model.safetensors -> checkpoint", export_symlink, True)],
        "hardlink-to-input": [Case("hf/model.safetensors = checkpoint", export_hardlink, True)],
        "foreign-file": [Case("hf/config.json of the user's", export_foreign)],
        "link-out-of-folder": [Case("hf/tokenizer.json -> outside", export_linked_out, True)],
    },
    "import": {
        "symlink-to-input": [Case("-o -> model.safetensors", import_symlink, True)],
        "hardlink-to-input": [Case("-o = model.safetensors", import_hardlink, True)],
        "foreign-file": [Case("-o an .npz of the user's", import_foreign)],
        "link-out-of-folder": FREE_PATH,
    },
    "plot attention": {
        "symlink-to-input": [Case("map -> checkpoint", attention_symlink, True)],
        "hardlink-to-input": [Case("map = checkpoint", attention_hardlink, True)],
        "foreign-file": [Case("a PNG of the user's", attention_foreign)],
        "link-out-of-folder": [
            Case("run/attention_cross.png -> outside", attention_default_linked_out)
        ],
    },
    "plot positional": {
        "symlink-to-input": [Case("-o -> checkpoint", positional_symlink, True)],
        "hardlink-to-input": [Case("-o = checkpoint", positional_hardlink, True)],
        "foreign-file": [Case("-o a PNG of the user's", positional_foreign)],
        "link-out-of-folder": [
            Case("run/positional.png -> outside", positional_default_linked_out)
        ],
    },
    "plot schedule": {
        "symlink-to-input": NO_INPUT,
        "hardlink-to-input": NO_INPUT,
        "foreign-file": [Case("-o a PNG of the user's", schedule_foreign)],
        "link-out-of-folder": FREE_PATH + " (default runs/plots/schedule.png, no run's)",
    },
    "plot curves": {
        "symlink-to-input": [Case("-o -> metrics.jsonl", curves_symlink, True)],
        "hardlink-to-input": [Case("-o = metrics.jsonl", curves_hardlink, True)],
        "foreign-file": [Case("-o a PNG of the user's", curves_foreign)],
        "link-out-of-folder": [Case("run/curves.png -> outside", curves_default_linked_out)],
    },
    "data pairs": {
        "symlink-to-input": [Case("train.tsv -> FILE", pairs_symlink, True)],
        "hardlink-to-input": [Case("dev.tsv = FILE", pairs_hardlink, True)],
        "foreign-file": [Case("test.tsv edited by hand", pairs_foreign)],
        "link-out-of-folder": [Case("train.tsv -> outside", pairs_linked_out, True)],
    },
    "exercise start": {
        "symlink-to-input": NO_INPUT + " (the exercise's text is the package's)",
        "hardlink-to-input": NO_INPUT + " (the exercise's text is the package's)",
        "foreign-file": [Case("relu.py of the learner's", start_foreign)],
        "link-out-of-folder": [
            Case("relu.py -> outside", start_linked_out),
            Case("relu.py -> outside, not there yet", start_dangling_link_out),
        ],
    },
    "exercise hint": {
        "symlink-to-input": "reads no input but its own hints log, which it appends to",
        "hardlink-to-input": "reads no input but its own hints log, which it appends to",
        "foreign-file": "appends the next hint to the log it keeps in the learner's folder: "
        "a file there is added to, never replaced",
        "link-out-of-folder": [Case("relu.hints.md -> outside", hint_linked_out)],
    },
    "exercise train": {
        "symlink-to-input": [Case("runs/yours/config.json -> relu.py", exercise_train_symlink)],
        "hardlink-to-input": [Case("runs/yours/metrics.jsonl = relu.py", exercise_train_hardlink)],
        "foreign-file": [Case("runs/yours/config.json of the user's", exercise_train_foreign)],
        "link-out-of-folder": [Case("runs/yours -> a run outside", exercise_train_run_linked_out)],
    },
}

CASES = [
    pytest.param(case, overwrite, id=f"{command}: {shape}: {case.name}{' --overwrite' * overwrite}")
    for command, shapes in SHAPES.items()
    for shape, cases in shapes.items()
    if not isinstance(cases, str)
    for case in cases
    for overwrite in ((False, True) if case.overwrite_too else (False,))
]


@pytest.fixture(autouse=True)
def apart(tmp_path, tmp_path_factory, monkeypatch):
    """This test's own ledger of written files (outside its folder), and its folder as
    the current one, so that a default path lands where the snapshot sees it."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def place(tmp_path, request) -> Place:
    return Place(
        tmp_path,
        lambda: request.getfixturevalue("reverse_model"),
        lambda: request.getfixturevalue("translation_checkpoint"),
    )


# -- 1. every command is accounted for --------------------------------------------------------
def test_every_command_is_accounted_for():
    found = set(commands(build_parser()))
    tables = (set(SHAPES), set(WRITES_NOTHING), set(SAME_SPLITS_AS_DATA_PAIRS))
    listed = set().union(*tables)
    assert found - listed == set(), "commands with no entry here: add them to a table"
    assert listed - found == set(), "entries for commands the CLI no longer has"
    assert sum(map(len, tables)) == len(listed), "a command in two tables"
    assert all(WRITES_NOTHING.values()) and all(SAME_SPLITS_AS_DATA_PAIRS.values())


def test_every_writing_command_faces_every_shape():
    """Each shape of each writing command is driven or said not to apply; a command with
    --overwrite is shown to refuse its inputs with --overwrite too."""
    parsers = commands(build_parser())
    for command, shapes in SHAPES.items():
        assert tuple(shapes) == SHAPE_NAMES, command
        for shape, cases in shapes.items():
            assert cases, (command, shape)
            if isinstance(cases, str):
                continue
            assert all(isinstance(c, Case) for c in cases), (command, shape)
            if (
                shape.endswith("-to-input")
                and "--overwrite" in parsers[command]._option_string_actions
            ):
                assert all(c.overwrite_too for c in cases), (command, shape)


# -- 2. each shape, by the real command -------------------------------------------------------
@pytest.mark.parametrize("case, overwrite", CASES)
def test_refused_in_one_line_and_nothing_changes(place, refused, case, overwrite):
    argv, fragments = case.setup(place)
    before = snapshot(place.root)
    refused([*argv, *(["--overwrite"] if overwrite else [])], *fragments)
    assert changes(before, snapshot(place.root)) == {}


# -- 3. the program's own output again; --overwrite ---------------------------------------------
def _written_twice(p: Place) -> dict:
    """``{command: (argv, what the second run's output says)}``: outputs a re-run
    replaces without --overwrite (a data set: the same content, nothing replaced)."""
    return {
        "plot schedule": (["plot", "schedule", "--steps", "50", "-o", "x.png"], "wrote x.png"),
        "translate": (_translate(p, p.root / "out.txt"), "translated 2 sentences"),
        "evaluate": (_evaluate(p, p.root / "hyp.txt"), "BLEU"),
        "average": (_average(p, p.root / "avg.npz"), "-> " + str(p.root / "avg.npz")),
        "plot positional": (_positional(p, "-o", "pos.png"), "wrote pos.png"),
        "plot curves": (_curves(p, "-o", "c.png"), "wrote c.png"),
        "plot attention": (_attention(p, "--out-dir", "maps"), "wrote maps/attention_cross.png"),
        "data pairs": (_pairs(p), "were already there with this very content: nothing replaced"),
    }


@pytest.mark.parametrize(
    "command",
    [
        "plot schedule",
        "translate",
        "evaluate",
        "average",
        "plot positional",
        "plot curves",
        "plot attention",
        "data pairs",
    ],
)
def test_a_rerun_writing_the_same_output_needs_no_overwrite(place, capsys, command):
    if command == "evaluate":
        pytest.importorskip("sacrebleu", reason="evaluate scores with sacreBLEU (the bleu extra)")
    argv, says = _written_twice(place)[command]
    assert main(argv) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert main(argv) == 0, capsys.readouterr().err
    out, err = capsys.readouterr()
    assert says in out + err and "error" not in err


def test_another_commands_output_is_not_the_programs_to_replace(place, refused, capsys):
    """translate's output is not evaluate's; a schedule plot is not a curves plot."""
    out = place.root / "out.txt"
    assert main(_translate(place, out)) == 0
    capsys.readouterr()
    argv = _evaluate(place, out)
    before = snapshot(place.root)
    refused(argv, f"--output {out} exists (written by scratchformer as translate")
    assert main(["plot", "schedule", "--steps", "50", "-o", "x.png"]) == 0
    capsys.readouterr()
    refused(_curves(place, "-o", "x.png"), "-o x.png exists (written by scratchformer as plot")
    before["x.png"] = snapshot(place.root)["x.png"]
    assert changes(before, snapshot(place.root)) == {}


#: the foreign-file cases above, and the file each names: ``--overwrite`` replaces it
FOREIGN = {
    "translate": (translate_foreign, "notes.txt"),
    "evaluate": (evaluate_foreign, "notes.txt"),
    "average": (average_foreign, "mine.npz"),
    "plot schedule": (schedule_foreign, "mine.png"),
    "plot positional": (positional_foreign, "mine.png"),
    "plot curves": (curves_foreign, "mine.png"),
    "plot attention": (attention_foreign, "maps/attention_cross.png"),
    "data pairs": (pairs_foreign, "set/test.tsv"),
}


@pytest.mark.parametrize("command", list(FOREIGN))
def test_overwrite_replaces_a_foreign_file(place, capsys, command):
    """What the foreign-file case refuses, --overwrite replaces (the cases on an input
    above are refused with --overwrite too)."""
    if command == "evaluate":
        pytest.importorskip("sacrebleu", reason="evaluate scores with sacreBLEU (the bleu extra)")
    setup, name = FOREIGN[command]
    argv, _ = setup(place)
    path = place.root / name
    mine = path.read_bytes()
    assert main([*argv, "--overwrite"]) == 0, capsys.readouterr().err
    new = path.read_bytes()
    assert new != mine and not path.is_symlink()
    if command == "average":
        from scratchformer.app.checkpoint import load_checkpoint

        assert "averaged_from" in load_checkpoint(path).meta
    elif command.startswith("plot"):
        assert new.startswith(b"\x89PNG") and len(new) > 1000  # the program's figure
    else:
        assert new.decode("utf-8").count("\n") >= 1


@pytest.mark.parametrize("command", ["train --resume", "exercise hint"])
def test_an_appended_log_with_a_hard_link_outside_leaves_the_outside_file_alone(
    place, capsys, command
):
    """The two logs the program adds to (a run's metrics, an exercise's hints) may have
    another name outside their folder (a hard link: a backup made with ``cp -l``): the
    command works, and the other name keeps its bytes."""
    if command == "exercise hint":
        argv = ["exercise", "hint", "relu", "--dir", str(place.root / "ex")]
        assert main(argv) == 0, capsys.readouterr().err  # the first hint starts the log
        log = place.root / "ex" / "relu.hints.md"
        argv.append("--spoil")  # relu has two hints: the second gives the formula
    else:
        log = place.run / "metrics.jsonl"
        argv = _resume(place)
    outside = place.elsewhere / "backup"
    os.link(log, outside)
    before = outside.read_bytes()
    assert main(argv) == 0, capsys.readouterr().err
    assert outside.read_bytes() == before
    assert log.read_bytes() != before and os.stat(log).st_nlink == 1
