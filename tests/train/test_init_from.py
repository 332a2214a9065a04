"""``train --init-from CKPT`` (``[model] init_from``): a run that starts from a
checkpoint's model and tokenizer, for each of our models (an imported GPT-2's: the slow
tests/hf/test_gpt2_finetune.py). Its [model] keys are refused; a checkpoint of another
kind of model, other classes or another alphabet is refused in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
from task_data import run_config, write_toml

from scratchformer.app.checkpoint import load_checkpoint, read_params
from scratchformer.app.cli import main
from scratchformer.app.train import TrainConfig, Trainer
from scratchformer.engine.errors import ConfigError


def trained(tmp_path, task: str, **train) -> tuple:
    """(final.npz of a few-step run of ``task``, its config dict)."""
    cfg = run_config(task, tmp_path, **train)
    Trainer(TrainConfig.from_dict(cfg), progress=False, echo=lambda *a: None).run()
    return tmp_path / "run" / "checkpoints" / "final.npz", cfg


@pytest.mark.parametrize("task", ["lm", "classify", "reverse"])
def test_a_run_starts_from_our_own_checkpoint(tmp_path, task):
    """The new run's model is the checkpoint's, weights and config; it trains on; its
    checkpoints keep the tokenizer."""
    ckpt, cfg = trained(tmp_path / "first", task)
    cfg = run_config(task, tmp_path / "second", steps=3)
    cfg["model"] = {"init_from": str(ckpt)}
    captured = {}
    run = Trainer(TrainConfig.from_dict(cfg), progress=False, echo=lambda *a: None)
    start = load_checkpoint(ckpt)
    for name, p in run.model.parameters().items():
        captured[name] = np.asarray(p).copy()
        np.testing.assert_array_equal(captured[name], start.model.parameters()[name])
    assert run.model_config == start.config
    run.run()
    after, header = read_params(tmp_path / "second" / "run" / "checkpoints" / "final.npz")
    assert header["meta"]["tokenizer"] == start.meta["tokenizer"]
    assert header["meta"]["train_config"]["model"] == {"init_from": str(ckpt)}
    assert any(not np.array_equal(after[k], captured[k]) for k in captured)  # it trained


def test_a_translation_model_starts_from_its_checkpoint_and_tokenizer(tmp_path):
    pytest.importorskip("sentencepiece")
    ckpt, _ = trained(tmp_path / "first", "translate", steps=4, checkpoint_every=4)
    cfg = run_config("translate", tmp_path / "second", steps=2, test=False)
    cfg["task"]["vocab_size"] = 400  # not used: the checkpoint's BPE reads the pairs
    cfg["model"] = {"init_from": str(ckpt)}
    run = Trainer(TrainConfig.from_dict(cfg), progress=False, echo=lambda *a: None)
    assert run.task.tokenizer.to_dict() == load_checkpoint(ckpt).meta["tokenizer"]
    run.run()


def test_the_flag_and_model_keys_refused_with_it(tmp_path, capsys):
    ckpt, cfg = trained(tmp_path / "first", "lm")
    cfg = run_config("lm", tmp_path / "second", steps=2)
    path = write_toml(cfg, tmp_path / "lm.toml")  # its [model] holds keys of a new model
    assert main(["train", "--config", str(path), "--init-from", str(ckpt)]) == 2
    err = capsys.readouterr().err
    assert f"model.N (from {path}) cannot be set with --init-from" in err
    cfg.pop("model")
    path = write_toml({**cfg, "model": {}}, tmp_path / "lm2.toml")
    argv = ["train", "--config", str(path), "--init-from", str(ckpt), "--no-progress"]
    assert main([*argv, "--set", "model.d_model=8"]) == 2
    assert "model.d_model (from --set model.d_model=8) cannot be set" in capsys.readouterr().err
    assert main([*argv, "--no-test"]) == 0
    stored = json.loads((tmp_path / "second" / "run" / "config.json").read_text())
    assert stored["model"] == {"init_from": str(ckpt)}
    assert main([*argv, "--resume", "--steps", "3", "--no-test"]) == 0  # it reads it again


def test_a_checkpoint_of_another_model_is_refused(tmp_path):
    ckpt, _ = trained(tmp_path / "first", "classify")
    cfg = run_config("lm", tmp_path / "second")
    cfg["model"] = {"init_from": str(ckpt)}
    with pytest.raises(ConfigError, match="holds an EncoderClassifier, and task lm trains a "
                       "LanguageModel"):
        Trainer(TrainConfig.from_dict(cfg), progress=False, echo=lambda *a: None)


def test_a_classifier_of_other_labels_is_refused(tmp_path):
    ckpt, _ = trained(tmp_path / "first", "classify")
    cfg = run_config("classify", tmp_path / "second")
    genre = tmp_path / "second" / "data" / "genre"
    for split in ("train", "dev", "test"):
        text = (genre / f"{split}.tsv").read_text().replace("law\t", "poetry\t")
        (genre / f"{split}.tsv").write_text(text)
    cfg["model"] = {"init_from": str(ckpt)}
    with pytest.raises(ConfigError, match=r"classifies into \['gospels', 'law'\], the data's"):
        Trainer(TrainConfig.from_dict(cfg), progress=False, echo=lambda *a: None)


def test_a_string_task_of_another_alphabet_is_refused(tmp_path):
    ckpt, _ = trained(tmp_path / "first", "reverse")
    cfg = run_config("reverse", tmp_path / "second")
    cfg["task"]["symbols"] = 5
    cfg["model"] = {"init_from": str(ckpt)}
    with pytest.raises(ConfigError, match="another vocabulary than task reverse's alphabet"):
        Trainer(TrainConfig.from_dict(cfg), progress=False, echo=lambda *a: None)
