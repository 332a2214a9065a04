"""The language-model and classification tasks through the one loop: what each reports,
their checkpoints, ``scratchformer generate``, and resuming them."""

import json

import pytest
from task_data import TINY, run_config

from scratchformer.app.checkpoint import load_with_tokenizer
from scratchformer.app.cli import main
from scratchformer.app.data import CorpusError, load_labelled, words
from scratchformer.app.train import ConfigError, TrainConfig, Trainer, train
from scratchformer.engine.models import EncoderClassifier, LanguageModel


def quiet(*a, **k):
    pass


def cfg_of(task, root, model=None, **train_overrides):
    d = run_config(task, root, **train_overrides)
    d["model"].update(model or {})
    return TrainConfig.from_dict(d)


@pytest.mark.parametrize("attention", ["relative_skew", "local"])
def test_lm_reports_bits_per_character_and_generates(tmp_path, capsys, attention):
    lines = []
    res = train(cfg_of("lm", tmp_path, {"attention": attention}), progress=False, echo=lines.append)
    assert res.step == 6 and res.test["bpc"] > 0 and "sample" in res.test
    assert res.test["bpc"] == pytest.approx(res.test["nll"] / 0.6931471805599453)
    assert any(line.startswith("  sample (temperature 0.8): ") for line in lines)
    recs = [json.loads(x) for x in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    assert {r["kind"] for r in recs} == {"train", "valid", "test"}
    assert all("bpc" in r for r in recs if r["kind"] == "valid")
    ck, tok = load_with_tokenizer(res.checkpoint, expect=LanguageModel)
    assert ck.meta["task"] == "lm" and ck.model.config.attention == attention
    capsys.readouterr()
    argv = ["generate", "--checkpoint", str(res.checkpoint), "--prompt", "in the", "--num", "2"]
    assert main([*argv, "--seed", "3", "--max-new", "20", "--top-k", "5"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and all(line.startswith("in the") for line in out)


def test_classifier_reports_accuracy_beside_the_majority_baseline(tmp_path):
    lines = []
    res = train(
        cfg_of("classify", tmp_path, {"attention": "relative"}), progress=False, echo=lines.append
    )
    t = res.test
    assert 0 <= t["accuracy"] <= 1 and 0 < t["majority_baseline"] <= 1
    assert t["majority_class"] in ("law", "gospels") and set(t["per_class_recall"]) == {
        "gospels",
        "law",
    }
    # both baselines, named as what they are, the test set's own largest class computed
    labels = [lab for lab, _ in load_labelled(tmp_path / "data" / "genre")["test"]]
    share = max(labels.count(lab) for lab in set(labels)) / len(labels)
    assert t["largest_class"] == share
    test_line = next(line for line in lines if line.endswith("<- the final model"))
    step_lines = [line for line in lines if line.startswith("step ")]
    assert step_lines and not [line for line in step_lines if "ppl" in line]  # no perplexity
    assert f"training set's majority class {100 * t['majority_baseline']:.2f}% (" in test_line
    assert f"this set's largest class {100 * share:.2f}% ('{t['largest_class_name']}')" in (
        test_line
    )
    examples = [line for line in lines if line.startswith("  '")]
    assert len(examples) == 2 and all(("ok" in x) or ("WRONG, want" in x) for x in examples)
    ck, _ = load_with_tokenizer(res.checkpoint, expect=EncoderClassifier)
    assert ck.meta["labels"] == ["gospels", "law"] and ck.model.num_classes == 2


def test_missing_data_names_the_command(tmp_path):
    cfg = TrainConfig.from_dict({"task": {"name": "classify", "data_dir": str(tmp_path / "no")}})
    with pytest.raises(CorpusError, match="scratchformer data genre"):
        Trainer(cfg, progress=False, echo=quiet)
    cfg = TrainConfig.from_dict({"task": {"name": "lm", "data_dir": str(tmp_path / "no")}})
    with pytest.raises(CorpusError, match="scratchformer data web-text"):
        Trainer(cfg, progress=False, echo=quiet)


def test_word_pre_tokenisation():
    assert words("Jesus said, “Follow me.”") == "jesus said , “ follow me . ”"


def test_the_former_task_grammar_still_trains(tmp_path, capsys):
    """`--task lm --set KEY=VALUE` without sections, as before: a note per old key."""
    data = tmp_path / "data"
    run_config("lm", tmp_path)  # writes the data
    common = ["--steps", "4", "--eval-every", "0", "--no-progress"]
    tiny = [f"model.{k}={v}" for k, v in TINY.items()]
    for task, corpus in (("lm", "web-text"), ("classify", "genre")):
        argv = ["train", "--task", task, "--run-dir", str(tmp_path / task), *common]
        argv += ["--data-dir", str(data / corpus)]
        for s in [*tiny, "min_freq=1" if task == "classify" else "log_every=2"]:
            argv += ["--set", s]
        assert main(argv) == 0
        assert (tmp_path / task / "checkpoints" / "checkpoint_4.npz").exists()
    out = capsys.readouterr().out
    assert "bits/char" in out and "training set's majority class" in out
    assert "note: --set min_freq is now --set task.min_freq" in out
    assert main(["train", "--task", "lm", "--set", "nonsense=1"]) == 2
    assert "nonsense" in capsys.readouterr().err


@pytest.mark.parametrize("task", ["lm", "classify"])
def test_resume_refuses_settings_that_would_not_continue_the_run(tmp_path, task):
    train(cfg_of(task, tmp_path, steps=3), progress=False, echo=quiet, final_eval=False)
    with pytest.raises(ConfigError, match="with other train.max_tokens"):
        Trainer(cfg_of(task, tmp_path, max_tokens=512), resume="latest", progress=False)
    with pytest.raises(ConfigError, match="its model differs \\(d_model: 16 there, 32 here"):
        Trainer(cfg_of(task, tmp_path, {"d_model": 32}), resume="latest", progress=False)
    other = cfg_of(task, tmp_path)
    other.seed = 7
    with pytest.raises(ConfigError, match="with other seed"):
        Trainer(other, resume="latest", progress=False)


def test_resume_survives_a_cut_log_line_and_a_moved_directory(tmp_path, capsys):
    """A crash can leave half a line in metrics.jsonl, and a run directory may be moved
    or named with a trailing slash: neither stops --resume."""
    train(cfg_of("lm", tmp_path, steps=3), progress=False, echo=quiet)
    run = tmp_path / "run"
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"kind": "train", "step": 4, "lo')
    moved = tmp_path / "moved"
    run.rename(moved)
    argv = ["train", "--resume", "--run-dir", str(moved) + "/", "--steps", "6", "--no-progress"]
    assert main(argv) == 0
    assert "resuming lm at step 3" in capsys.readouterr().out
    assert (moved / "checkpoints" / "checkpoint_6.npz").exists()
    recs = [json.loads(line) for line in (moved / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in recs if r["kind"] == "train"] == [2, 3, 4, 6]
