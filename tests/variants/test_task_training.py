"""``train --task lm`` / ``--task classify`` end to end on a tiny data directory, the
checkpoint round trip and ``scratchformer generate``."""

import json

import numpy as np
import pytest

from scratchformer.cli import main
from scratchformer.train_tasks import (
    TaskTrainConfig,
    TaskTrainError,
    load_task_checkpoint,
    train_task,
    words,
)

TINY = dict(N=1, d_model=16, d_ff=32, h=2, max_len=64)


@pytest.fixture
def data_dir(tmp_path):
    r = np.random.default_rng(0)
    d = tmp_path / "data"
    d.mkdir()
    lines = ["in the beginning god created", "and the earth was formless", "let there be light"]
    for s, n in (("train", 30), ("dev", 6), ("test", 6)):
        (d / f"web.{s}.txt").write_text(
            "".join(lines[i] + "\n" for i in r.integers(0, 3, n)), encoding="utf-8"
        )
        rows = [("law", "Moses spoke to Aaron."), ("gospels", "Jesus said to them, “Follow me.”")]
        (d / f"genre.{s}.tsv").write_text(
            "".join(f"{lab}\t{t}\tX 1:1\n" for lab, t in (rows[i] for i in r.integers(0, 2, n))),
            encoding="utf-8",
        )
    return d


def run_cfg(tmp_path, data_dir, task, **kw):
    return TaskTrainConfig(
        task=task,
        data_dir=str(data_dir),
        run_dir=str(tmp_path / task),
        steps=6,
        log_every=3,
        eval_every=3,
        warmup=2,
        max_tokens=256,
        model=dict(TINY, **kw),
        min_freq=1,
    )


@pytest.mark.parametrize("attention", ["relative_skew", "local"])
def test_lm_trains_reports_bpc_and_generates(tmp_path, data_dir, capsys, attention):
    res = train_task(run_cfg(tmp_path, data_dir, "lm", attention=attention), progress=False)
    assert res["step"] == 6 and res["test"]["bpc"] > 0 and "sample" in res
    recs = [
        json.loads(line) for line in (tmp_path / "lm" / "metrics.jsonl").read_text().splitlines()
    ]
    assert {r["kind"] for r in recs} == {"train", "valid", "test"}
    model, tok, meta = load_task_checkpoint(res["checkpoint"])
    assert meta["task"] == "lm" and model.config.attention == attention
    capsys.readouterr()
    argv = ["generate", "--checkpoint", res["checkpoint"], "--prompt", "in the", "--num", "2"]
    assert main([*argv, "--seed", "3", "--max-new", "20", "--top-k", "5"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and all(line.startswith("in the") for line in out)


def test_classifier_trains_and_reports_the_majority_baseline(tmp_path, data_dir):
    res = train_task(run_cfg(tmp_path, data_dir, "classify", attention="relative"), progress=False)
    t = res["test"]
    assert 0 <= t["accuracy"] <= 1 and 0 < t["majority_baseline"] <= 1
    assert t["majority_class"] in ("law", "gospels")
    model, tok, meta = load_task_checkpoint(res["checkpoint"])
    assert meta["labels"] == ["gospels", "law"] and model.num_classes == 2


def test_task_runs_checkpoint_at_each_validation_and_guard_their_directory(tmp_path, data_dir):
    """An interrupted lm/classify run keeps its work (a checkpoint per validation), and a
    second run in the same directory does not silently mix with the first."""
    cfg = run_cfg(tmp_path, data_dir, "classify", attention="relative")
    train_task(cfg, progress=False)
    ckpts = sorted(p.name for p in (tmp_path / "classify" / "checkpoints").iterdir())
    assert ckpts == ["checkpoint_3.npz", "checkpoint_6.npz"]
    with pytest.raises(TaskTrainError, match="already holds checkpoints.*--overwrite"):
        train_task(cfg, progress=False)
    train_task(cfg, progress=False, overwrite=True)


def test_missing_data_names_the_command(tmp_path):
    cfg = TaskTrainConfig(task="classify", data_dir=str(tmp_path / "nowhere"))
    with pytest.raises(TaskTrainError, match="scratchformer data genre"):
        train_task(cfg, progress=False)


def test_word_pre_tokenisation():
    assert words("Jesus said, “Follow me.”") == "jesus said , “ follow me . ”"


def test_cli_train_task_lm_and_classify(tmp_path, data_dir, capsys):
    common = ["--data-dir", str(data_dir), "--steps", "4", "--eval-every", "0", "--no-progress"]
    tiny = [f"model.{k}={v}" for k, v in TINY.items()]
    for task in ("lm", "classify"):
        argv = ["train", "--task", task, "--run-dir", str(tmp_path / task), *common]
        for s in [*tiny, "min_freq=1", "log_every=2"]:
            argv += ["--set", s]
        assert main(argv) == 0
        assert (tmp_path / task / "checkpoints" / "checkpoint_4.npz").exists()
    out = capsys.readouterr().out
    assert "bits/char" in out and "majority baseline" in out
    assert main(["train", "--task", "lm", "--set", "nonsense=1"]) == 2
    assert "nonsense" in capsys.readouterr().err
