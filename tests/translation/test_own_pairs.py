"""Your own sentence pairs, as the README's recipe trains them: one TSV file split by
``scratchformer data pairs``, then ``train --config pairs``, whose vocabulary and model are
chosen from the data and printed, with the unigram baseline the dev loss must beat.

- the recipe on 200 pairs (slow: 150 steps, about 40 s): SentencePiece accepts the
  vocabulary chosen, the sizes are printed, and the dev NLL ends below the unigram
  baseline;
- the split: the same file always splits the same way, every pair lands in one split;
- a vocabulary size SentencePiece cannot make of the data, given by hand, is refused in
  one line naming task.vocab_size and the bound;
- the two length limits a run prints, the pairs kept and the model's positions, each
  under its own name (task.max_len, model.max_len).
"""

import re
import subprocess
import sys

import pytest
from task_data import corpus, write_translation

from scratchformer.app.data.bible_pairs import split_pairs
from scratchformer.app.data.pairs import vocabulary_for
from scratchformer.app.train import TASKS, TrainConfig
from scratchformer.app.train.tasks import fit

pytest.importorskip("sentencepiece", reason="the translation tests need the bpe extra")

NEGATED = {"ve": "no ve", "come": "no come", "ama": "no ama", "busca": "no busca"}
NOT_EN = {"sees": "does not see", "eats": "does not eat", "loves": "does not love"}
NOT_EN["seeks"] = "does not seek"


def pairs_200() -> list[tuple[str, str]]:
    """200 Spanish -> English pairs: the tests' corpus, and its sentences negated."""
    out = list(corpus())
    for s, t in corpus():
        verb = next(v for v in NEGATED if f" {v} " in s)
        en = next(v for v in NOT_EN if f" {v} " in t)
        out.append((s.replace(f" {verb} ", f" {NEGATED[verb]} "), t.replace(en, NOT_EN[en])))
    return out[:200]


def scratchformer(*argv, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "scratchformer", *map(str, argv)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.slow
def test_the_recipe_on_200_pairs_chooses_its_sizes_and_beats_the_unigram_baseline(tmp_path):
    rows = pairs_200()
    assert len(rows) == 200 and len(set(rows)) == 200
    (tmp_path / "my-pairs.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in rows), "utf-8")
    split = scratchformer("data", "pairs", "my-pairs.tsv", cwd=tmp_path)
    assert split.returncode == 0, split.stderr
    assert split.stdout.splitlines()[:3] == [
        "train     180 pairs",
        "dev        10 pairs",
        "test       10 pairs",
    ]

    argv = ["train", "--config", "pairs", "--data-dir", "data/my-pairs", "--steps", "150"]
    run = scratchformer(*argv, "--eval-every", "50", "--decode", "greedy", cwd=tmp_path)
    out = run.stdout
    assert run.returncode == 0, run.stderr + out[-2000:]
    vocab = re.search(r"chosen from the data: vocabulary (\d+) \((\d+) characters and ", out)
    assert vocab, out
    small = r"N=2, d_model=128, h=4, d_ff=512, P_drop=0\.3, eps_ls=0\.1, "
    small += r"model\.max_len=\d+ positions"
    model = re.search(rf"chosen from the data: model {small} \(([\d,]+) target tokens", out)
    assert model, out
    assert f"vocabulary {vocab.group(1)}" in out.split("training pairs: ")[1].splitlines()[0]
    unigram = float(re.search(r"unigram baseline: dev nll ([\d.]+) ", out).group(1))
    dev = [float(x) for x in re.findall(r"\| dev \| loss [\d.]+ \| nll ([\d.]+) ", out)]
    assert len(dev) == 3 and dev[-1] < unigram, (dev, unigram)
    assert "BLEU" in out or "no BLEU" in out  # the test set was translated


def test_a_vocabulary_the_data_cannot_make_is_refused_naming_the_setting(tmp_path):
    data = tmp_path / "data"
    (tmp_path / "p.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in pairs_200()), "utf-8")
    split_pairs(tmp_path / "p.tsv", data)
    for size, bound in (("8000", "at most"), ("270", "at least")):
        run = scratchformer(
            "train", "--config", "pairs", "--data-dir", data, "--set",
            f"task.vocab_size={size}", "--run-dir", tmp_path / f"run{size}", cwd=tmp_path,
        )
        lines = run.stderr.splitlines()
        assert run.returncode == 2 and len(lines) == 1, run.stderr
        assert lines[0].startswith(
            f"scratchformer train: error: task.vocab_size={size} does not fit {data / 'train.tsv'}"
            f": SentencePiece can make {bound} "
        )
        assert "or to 0 to choose it from the data" in lines[0]


def test_a_file_of_pairs_always_splits_the_same_way(tmp_path):
    rows = pairs_200()
    (tmp_path / "p.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in rows), "utf-8")
    counts = split_pairs(tmp_path / "p.tsv", tmp_path / "a", dev=0.1, test=0.05)
    assert counts == {"train": 170, "dev": 20, "test": 10}
    split_pairs(tmp_path / "p.tsv", tmp_path / "b", dev=0.1, test=0.05)
    got = {}
    for s in ("train", "dev", "test"):
        a = (tmp_path / "a" / f"{s}.tsv").read_text("utf-8")
        assert a == (tmp_path / "b" / f"{s}.tsv").read_text("utf-8")
        got[s] = [tuple(line.split("\t")) for line in a.splitlines()]
    assert sorted(sum(got.values(), [])) == sorted(rows)  # each pair in exactly one split
    assert got["train"] == [r for r in rows if r in got["train"]]  # in the file's order


def test_the_sizes_chosen_grow_with_the_data():
    small, _ = vocabulary_for(pairs_200())
    assert 260 < small <= 500
    assert fit.model_for(70_000, 60, 100)[0]["d_model"] == 128
    assert fit.model_for(1_000_000, 60, 100)[0]["d_model"] == 256
    assert fit.model_for(10_000_000, 60, 100)[0]["d_model"] == 512
    assert fit.model_for(70_000, 130, 140)[0]["max_len"] == 192  # the source + 50 decoded


def test_a_model_far_larger_than_its_data_is_named_in_a_note(tmp_path):
    """--task translate on a small TSV trains bible-cpu's model, saying it is too large."""
    (tmp_path / "p.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in pairs_200()), "utf-8")
    split_pairs(tmp_path / "p.tsv", tmp_path / "data")
    d = {"task": {"name": "translate", "data_dir": str(tmp_path / "data"), "vocab_size": 0}}
    cfg = TrainConfig.from_dict(d)
    task = TASKS["translate"](cfg.task)
    task.configure(cfg.model, cfg.seed)  # bible-cpu's model: d_model 256
    notes = task.notes()
    assert any(n.startswith("note: d_model=256 for ") and "--config pairs" in n for n in notes)
    task = TASKS["translate"](cfg.task)
    task.configure({"preset": "data"}, cfg.seed)
    assert not any(n.startswith("note: d_model") for n in task.notes())


def test_the_pairs_left_out_and_the_model_s_positions_are_two_names(tmp_path):
    """``task.max_len`` (the longest side of a training pair kept) and ``model.max_len``
    (the model's positions) are printed on consecutive lines, each by its own name."""
    long = " ".join(["la casa grande"] * 30), " ".join(["the big house"] * 30)
    data = write_translation(tmp_path / "data", corpus() + [long])  # a training pair only
    run = scratchformer(
        "train", "--config", "pairs", "--data-dir", data, "--set", "task.max_len=40",
        "--steps", "1", "--no-test", "--no-progress", "--run-dir", tmp_path / "run",
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    left = next(i for i, line in enumerate(lines) if line.startswith("left out "))
    assert "with a side longer than task.max_len=40 BPE tokens" in lines[left]
    model = next(line for line in lines if line.startswith("chosen from the data: model "))
    assert re.search(r", model\.max_len=\d+ positions \(", model), model
    assert " max_len=" not in model.replace("model.max_len=", "")


def test_a_checkpoint_s_source_end_is_appended_to_every_source(data_dir, bpe):
    """Pairs read with a checkpoint's tokenizer and its model's ``source_end_id``
    (Marian's </s>): every source ends with that id, the targets are as they were, and
    the length limit counts it."""
    from scratchformer.app.data.pairs import translation_pairs  # noqa: PLC0415

    plain = translation_pairs(data_dir, vocab_size=0, max_len=64, tokenizer=bpe)
    ended = translation_pairs(data_dir, vocab_size=0, max_len=64, tokenizer=bpe, source_end=2)
    for split in ("train", "valid", "test"):
        a, b = plain.encoded(split), ended.encoded(split)
        assert [s + [2] for s, _ in a] == [s for s, _ in b]
        assert [t for _, t in a] == [t for _, t in b]
