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


@pytest.mark.parametrize("task", ["lm", "classify"])
def test_resume_continues_exactly(tmp_path, data_dir, task):
    """3 steps, then --resume to 6, gives the same losses and the same parameters as 6
    steps in one go: the checkpoint holds Adam's moments and the place in the data, and
    dropout is seeded by (seed, step)."""
    from scratchformer.checkpoint import read_params  # noqa: PLC0415
    from scratchformer.train_tasks import resume_config  # noqa: PLC0415

    attention = "relative_skew" if task == "lm" else "relative"
    whole = run_cfg(tmp_path / "whole", data_dir, task, attention=attention)
    res_whole = train_task(whole, progress=False)
    part = run_cfg(tmp_path / "part", data_dir, task, attention=attention)
    part.steps = 3
    train_task(part, progress=False)
    flags = {"task": task, "run_dir": part.run_dir, "steps": 6}
    cfg, path = resume_config(flags, {}, "latest")
    assert path.name == "checkpoint_3.npz" and cfg.steps == 6 and cfg.max_tokens == 256
    res_part = train_task(cfg, progress=False, resume=path)

    def train_losses(run_dir):
        lines = (tmp_path / run_dir / task / "metrics.jsonl").read_text().splitlines()
        return [(r["step"], r["loss"]) for r in map(json.loads, lines) if r["kind"] == "train"]

    assert train_losses("whole") == train_losses("part") and len(train_losses("part")) == 2
    a, _ = read_params(res_whole["checkpoint"])
    b, _ = read_params(res_part["checkpoint"])
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    assert res_part["test"] == res_whole["test"]

    with pytest.raises(TaskTrainError, match="other max_tokens"):
        resume_config({**flags, "max_tokens": 512}, {}, "latest")
    with pytest.raises(TaskTrainError, match="other model"):
        resume_config(flags, {"d_model": 32}, "latest")
    with pytest.raises(TaskTrainError, match="past step 3.*--overwrite"):
        train_task(cfg, progress=False, resume=path)
    with pytest.raises(TaskTrainError, match="nothing to resume"):
        resume_config({"task": task, "run_dir": str(tmp_path / "none")}, {}, "latest")
    with pytest.raises(TaskTrainError, match="other seed"):  # also when called directly
        train_task(TaskTrainConfig(**{**cfg.__dict__, "seed": 7}), progress=False, resume=path)


def test_resume_survives_a_cut_log_line_and_a_moved_directory(tmp_path, data_dir):
    """A crash can leave half a line in metrics.jsonl, and a run directory may be moved
    or named with a trailing slash: neither stops --resume."""
    from scratchformer.train_tasks import resume_config  # noqa: PLC0415

    cfg = run_cfg(tmp_path / "a", data_dir, "lm", attention="relative_skew")
    cfg.steps = 3
    train_task(cfg, progress=False)
    run = tmp_path / "a" / "lm"
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"kind": "train", "step": 4, "lo')
    moved = tmp_path / "moved"
    run.rename(moved)
    new_cfg, path = resume_config(
        {"task": "lm", "run_dir": str(moved) + "/", "steps": 6}, {}, "latest"
    )
    res = train_task(new_cfg, progress=False, resume=path)
    assert res["step"] == 6 and (moved / "checkpoints" / "checkpoint_6.npz").exists()
    recs = [json.loads(line) for line in (moved / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in recs if r["kind"] == "train"] == [3, 6]


def test_cli_resumes_a_task_run(tmp_path, data_dir, capsys):
    argv = ["train", "--task", "lm", "--run-dir", str(tmp_path / "lm"), "--data-dir"]
    argv += [str(data_dir), "--eval-every", "0", "--no-progress"]
    for s in [f"model.{k}={v}" for k, v in TINY.items()]:
        argv += ["--set", s]
    assert main([*argv, "--steps", "2"]) == 0
    assert main(["train", "--task", "lm", "--run-dir", str(tmp_path / "lm"), "--steps", "4",
                 "--resume", "--no-progress"]) == 0  # fmt: skip
    assert "resuming at step 2" in capsys.readouterr().out
    names = sorted(p.name for p in (tmp_path / "lm" / "checkpoints").iterdir())
    assert names == ["checkpoint_2.npz", "checkpoint_4.npz"]


def test_task_settings_of_the_wrong_type_are_named(tmp_path, capsys):
    assert main(["train", "--task", "lm", "--set", "steps=abc", "--run-dir", str(tmp_path)]) == 2
    assert "steps must be of type int, got 'abc'" in capsys.readouterr().err
