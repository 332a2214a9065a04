"""TensorBoard's event files of a run (``train.tensorboard``, ``--tensorboard``), read back
with TensorBoard's own reader: every scalar of metrics.jsonl, the attention image at each
validation, the test scores; a run killed and resumed shows each step once.

Skipped where the tensorboard extra (tensorboardX) or TensorBoard itself is missing,
except under CI=true, where .ci/run installs them."""

import json
import os
import sys

import pytest
from task_data import run_config

from scratchformer.app.cli import main as cli_main
from scratchformer.app.train import ConfigError, TrainConfig, Trainer
from scratchformer.app.train import loop as train_loop
from scratchformer.app.train.rundir import event_files


def need(module: str):
    try:
        return __import__(module)
    except ImportError as e:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{module} cannot be imported in CI: {e}")
        pytest.skip(f"{module} is not installed here ({e})")


def accumulator(run):
    need("tensorboardX")
    need("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import (  # noqa: PLC0415
        EventAccumulator,
    )

    ea = EventAccumulator(str(run), size_guidance={"scalars": 0, "images": 0, "tensors": 0})
    ea.Reload()
    return ea


def config(root, **train) -> TrainConfig:
    over = {"steps": 12, "log_every": 2, "eval_every": 4, "checkpoint_every": 4}
    return TrainConfig.from_dict(run_config("reverse", root, tensorboard=True, **{**over, **train}))


def quiet(*a, **k):
    pass


def test_the_event_files_hold_the_scalars_and_images_once_each_after_a_kill(
    tmp_path, monkeypatch
):
    need("tensorboardX")
    real = train_loop.Trainer.save

    def killed(self):  # after step 10's records were written, before its checkpoint
        if self.step == 10:
            raise KeyboardInterrupt
        return real(self)

    cfg = config(tmp_path, checkpoint_every=5, eval_every=5)
    monkeypatch.setattr(train_loop.Trainer, "save", killed)
    with pytest.raises(KeyboardInterrupt):
        Trainer(cfg, progress=False, echo=quiet).run()
    monkeypatch.setattr(train_loop.Trainer, "save", real)
    Trainer(cfg, resume="latest", progress=False, echo=quiet).run()
    run = tmp_path / "run"
    files = event_files(run)
    assert len(files) == 2 and [f.name[-5:] for f in files] == [".0001", ".0002"]

    ea = accumulator(run)
    recs = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    train_recs = [r for r in recs if r["kind"] == "train"]
    # each step once (the first file's steps 6-10 are purged by the second's mark at 6)
    for key in ("loss", "nll", "ppl", "lr", "grad_norm", "tokens_per_s"):
        events = ea.Scalars(f"train/{key}")
        assert [e.step for e in events] == [r["step"] for r in train_recs], key
    for e, r in zip(ea.Scalars("train/loss"), train_recs):
        assert e.value == pytest.approx(r["loss"], rel=1e-6)
    valid = [r for r in recs if r["kind"] == "valid"]
    for key in ("loss", "nll", "token_acc", "seq_acc"):
        assert [e.step for e in ea.Scalars(f"dev/{key}")] == [5, 10, 12], key
    assert [e.value for e in ea.Scalars("dev/nll")] == pytest.approx([r["nll"] for r in valid])
    images = ea.Images("dev/attention")
    assert [i.step for i in images] == [5, 10, 12]
    assert images[0].width > 100 and images[0].height > 100
    assert images[0].encoded_image_string.startswith(b"\x89PNG")
    tests = [r for r in recs if r["kind"] == "test"]
    for r in tests:
        (e,) = ea.Scalars(f"test/{r['model']}/seq_acc_decoded")
        assert e.step == 12 and e.value == pytest.approx(r["seq_acc_decoded"])
    assert "final model/text_summary" in ea.Tags()["tensors"]


def test_the_flag_sets_the_key_and_the_files_are_the_run_s_own(tmp_path, capsys):
    need("tensorboardX")
    d = run_config("reverse", tmp_path, steps=2, eval_every=0, checkpoint_every=0, test=False)
    argv = ["train", "--set", f"run_dir={d['run_dir']}", "--task", "reverse", "--no-progress"]
    argv += ["--steps", "2", "--set", "model.preset=tiny", "--set", "task.train_size=50"]
    argv += ["--set", "task.valid_size=4", "--set", "task.test_size=4", "--no-test"]
    assert cli_main([*argv, "--tensorboard"]) == 0
    run = tmp_path / "run"
    assert json.loads((run / "config.json").read_text())["train"]["tensorboard"] is True
    out = capsys.readouterr().out
    assert "TensorBoard's event file, one per session of the run: tensorboard --logdir" in out
    (first,) = event_files(run)
    assert cli_main(argv) == 2  # an earlier run's files: refused without --overwrite
    assert cli_main([*argv, "--overwrite"]) == 0  # deletes them, with the rest of the run
    assert not first.exists() and not event_files(run)


def test_without_tensorboardx_the_run_is_refused_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboardX", None)  # import fails
    with pytest.raises(ConfigError, match=r"needs tensorboardX: pip install -e '.\[tensorboard"):
        Trainer(config(tmp_path), progress=False, echo=quiet)
    assert not (tmp_path / "run").exists()
