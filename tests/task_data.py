"""Tiny data sets for every task, and a few-step configuration of each, for the tests of
the training loop: a Spanish -> English corpus (translate), verses one per line (lm),
labelled verses (classify); the string tasks make their own data."""

import itertools
import json
from pathlib import Path

import numpy as np

ES = ["el perro", "la casa", "un niño", "la mujer", "el rey", "su hijo"]
VERBS_ES = ["ve", "come", "ama", "busca"]
EN = ["the dog", "the house", "a boy", "the woman", "the king", "his son"]
VERBS_EN = ["sees", "eats", "loves", "seeks"]

VERSES = ["in the beginning god created", "and the earth was formless", "let there be light"]
LABELLED = [("law", "Moses spoke to Aaron."), ("gospels", "Jesus said to them, “Follow me.”")]

#: a model small enough that a step takes milliseconds
TINY = {"N": 1, "d_model": 16, "d_ff": 32, "h": 2, "max_len": 64}
TASK_NAMES = ("reverse", "translate", "lm", "classify")

#: ``scratchformer train`` flags of a reverse run that takes a second or two
TINY_RUN = ["--task", "reverse", "--set", "model.preset=tiny", "--no-progress"] + [
    a for k in ("train_size=200", "valid_size=10", "test_size=4") for a in ("--set", f"task.{k}")
]


def corpus():
    """~150 Spanish -> English sentence pairs with accents and punctuation."""
    out = []
    for (s1, e1), (v, ve), (s2, e2) in itertools.product(
        zip(ES, EN), zip(VERBS_ES, VERBS_EN), zip(ES, EN)
    ):
        if s1 != s2:
            out.append((f"{s1.capitalize()} {v} á {s2}.", f"{e1.capitalize()} {ve} {e2}."))
    return out


def write_translation(d, pairs=None):
    """``{train,dev,test}.tsv`` under ``d``: all pairs for training, six each for dev/test."""
    pairs = corpus() if pairs is None else pairs
    d.mkdir(parents=True, exist_ok=True)
    for i, split in enumerate(("train", "dev", "test")):
        rows = pairs if split == "train" else pairs[i * 5 : i * 5 + 6]
        (d / f"{split}.tsv").write_text(
            "".join(f"{s}\t{t}\tGen 1:{j}\n" for j, (s, t) in enumerate(rows, 1)),
            encoding="utf-8",
        )
    return d


def train_translation(root, steps: int = 150):
    """A small BPE translation model trained in seconds on ``corpus()`` (2+2 layers,
    d_model 32, a 350-id joint BPE): the path of its ``final.npz``. Needs SentencePiece."""
    from scratchformer.app.cli import main as cli_main

    root = Path(root)
    data = write_translation(root / "data")
    argv = ["train", "--task", "translate", "--set", f"task.data_dir={data}"]
    argv += ["--set", "task.vocab_size=350", "--set", "model.N=2", "--set", "model.d_model=32"]
    argv += ["--set", "model.d_ff=64", "--set", "model.h=4", "--set", "train.max_tokens=1024"]
    argv += ["--steps", str(steps), "--set", f"train.checkpoint_every={steps}"]
    argv += ["--run-dir", str(root / "run"), "--no-progress", "--no-test"]
    assert cli_main(argv) == 0
    return root / "run" / "checkpoints" / "final.npz"


def write_monolingual(d, former: bool = False):
    """``web-text/{split}.txt`` (lm) and ``genre/{split}.tsv`` (classify) under ``d``;
    ``former``: the former layout instead, ``web.{split}.txt`` and ``genre.{split}.tsv``
    in ``d`` itself (still read)."""
    r = np.random.default_rng(0)
    web, genre = (d, d) if former else (d / "web-text", d / "genre")
    for folder in (web, genre):
        folder.mkdir(parents=True, exist_ok=True)
    for s, n in (("train", 30), ("dev", 6), ("test", 6)):
        (web / (f"web.{s}.txt" if former else f"{s}.txt")).write_text(
            "".join(VERSES[i] + "\n" for i in r.integers(0, 3, n)), encoding="utf-8"
        )
        (genre / (f"genre.{s}.tsv" if former else f"{s}.tsv")).write_text(
            "".join(
                f"{lab}\t{t}\tX 1:1\n" for lab, t in (LABELLED[i] for i in r.integers(0, 2, n))
            ),
            encoding="utf-8",
        )
    return d


def run_config(task: str, root, **train) -> dict:
    """A config of ``task`` (one of TASK_NAMES) that trains a few steps in ``root/run``,
    its data (if any) in ``root/data``; ``train`` updates the [train] section."""
    data = root / "data"
    tasks = {
        "reverse": {
            "name": "reverse",
            "symbols": 6,
            "max_len": 6,
            "train_size": 200,
            "valid_size": 20,
            "test_size": 8,
        },
        "translate": {
            "name": "translate",
            "data_dir": str(data),
            "vocab_size": 350,
            "max_len": 30,
            "decode": "greedy",
        },
        "lm": {"name": "lm", "data_dir": str(data / "web-text"), "sample_len": 20},
        "classify": {"name": "classify", "data_dir": str(data / "genre"), "min_freq": 1},
    }
    if task == "translate" and not (data / "train.tsv").exists():
        write_translation(data)
    if task in ("lm", "classify") and not (data / "web-text" / "train.txt").exists():
        write_monolingual(data)
    return {
        "name": task,
        "run_dir": str(root / "run"),
        "seed": 3,
        "task": tasks[task],
        "model": dict(TINY),
        "optim": {"warmup": 4},
        "train": {
            "steps": 6,
            "max_tokens": 128,
            "log_every": 2,
            "eval_every": 3,
            "checkpoint_every": 3,
            "examples": 2,
            **train,
        },
    }


def write_toml(d: dict, path):
    """``d`` (a ``run_config``) as the TOML file ``path``: the top-level keys, then each
    section (strings, numbers and booleans read the same in JSON and TOML)."""
    lines = [f"{k} = {json.dumps(d[k])}" for k in ("name", "run_dir", "seed")]
    for section in ("task", "model", "optim", "train"):
        lines.append(f"[{section}]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in d[section].items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
