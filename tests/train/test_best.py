"""The best checkpoint (``train.best_metric``, checkpoints/best.npz), early stopping
(``train.patience``) and the final model chosen among the last checkpoint, the average
and the best ones; all resumed bit for bit."""

import hashlib
import json

import numpy as np
import pytest
from task_data import run_config

from scratchformer.app.checkpoint import load_checkpoint
from scratchformer.app.cli import main as cli_main
from scratchformer.app.train import ConfigError, TrainConfig, Trainer, train
from scratchformer.app.train import best as best_mod
from scratchformer.app.train import loop as train_loop


def quiet(*a, **k):
    pass


def config(root, task="reverse", run_dir=None, **train_overrides) -> TrainConfig:
    """A few-step run validating at every step, saving every third (in ``root/run``, or
    ``run_dir``)."""
    over = {"steps": 12, "eval_every": 1, "checkpoint_every": 3, "keep_checkpoints": 0}
    d = run_config(task, root, **{**over, **train_overrides})
    return TrainConfig.from_dict({**d, **({"run_dir": run_dir} if run_dir else {})})


def records(run, kind):
    recs = map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
    return [r for r in recs if r["kind"] == kind]


def sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def same_parameters(a, b) -> None:
    sa, sb = load_checkpoint(a).model.state_dict(), load_checkpoint(b).model.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        np.testing.assert_array_equal(sa[k], sb[k], err_msg=k)


def test_best_npz_is_the_model_of_the_best_validation_written_only_when_it_improves(
    tmp_path, monkeypatch
):
    written = []
    real = best_mod.save_best
    monkeypatch.setattr(
        best_mod, "save_best", lambda tr, m, s: written.append((m, s)) or real(tr, m, s)
    )
    cfg = config(tmp_path, checkpoint_every=1, test=False)
    train(cfg, progress=False, echo=quiet)
    run = tmp_path / "run"
    valid = records(run, "valid")
    improved, low = [], float("inf")
    for r in valid:
        if r["nll"] < low:
            improved.append(r["step"])
            low = r["nll"]
    assert written == [("nll", s) for s in improved]  # a write per improvement, no other
    best = load_checkpoint(run / "checkpoints/best.npz")
    assert best.step == improved[-1] and best.optimizer_state is None
    assert best.meta["best"] == {
        "metric": "nll",
        "step": improved[-1],
        "scores": {"nll": low},
    }
    same_parameters(run / "checkpoints/best.npz", run / f"checkpoints/checkpoint_{best.step}.npz")
    # the last checkpoint's state records it, to be resumed
    last = load_checkpoint(run / "checkpoints/checkpoint_12.npz").train_state["best"]
    assert last["best"]["nll"] == {"step": improved[-1], "scores": {"nll": low}}
    assert last["since"] == 12 - improved[-1]


#: dev nll by step, planted: the best at step 4, then three validations without a better one
SCRIPT = {1: 3.0, 2: 2.0, 3: 2.5, 4: 0.5, 5: 0.6, 6: 0.7, 7: 0.8, 8: 0.1, 9: 0.9, 10: 0.9}
SCRIPT |= {11: 0.9, 12: 0.9}


def plant(monkeypatch):
    """The best is judged on SCRIPT's scores (the records keep the real ones)."""
    real = best_mod.Best.update
    monkeypatch.setattr(
        best_mod.Best, "update", lambda self, s, scores: real(self, s, {"nll": SCRIPT[s]})
    )


def test_patience_stops_the_run_and_kill_and_resume_stop_at_the_same_step(
    tmp_path, monkeypatch
):
    """Patience 3: the run stops after the validation of step 7, checkpointed there;
    one killed after writing best.npz (step 4) and before its next checkpoint (6), then
    resumed from step 3, writes the same best.npz, byte for byte, and stops at step 7
    with the same state."""
    plant(monkeypatch)
    lines = []
    # both runs in a folder "run" of their own (the configuration best.npz keeps names it)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    full = train(config(tmp_path / "a", patience=3, run_dir="run"), progress=False,
                 echo=lines.append)
    assert full.step == 7 and full.stopped.startswith(
        "stopped early: dev nll has not improved for 3 validations (train.patience = 3); the "
        "best, 0.5000, was at step 4"
    )
    assert full.stopped in lines and "step  7/12 | dev | " in "\n".join(lines)
    a = tmp_path / "a/run/checkpoints"
    assert load_checkpoint(a / "checkpoint_7.npz").train_state["best"]["since"] == 3
    assert [r["step"] for r in records(tmp_path / "a/run", "train")][-1] == 7  # its record
    final = load_checkpoint(a / "final.npz").meta["final"]
    assert final["model"] == "best" and final["best_steps"] == {"best": 4}
    assert final["valid_nll"]["best"] == 0.5
    same_parameters(a / "final.npz", a / "best.npz")
    assert any(line.startswith("final model: the best checkpoint by dev nll, of step 4 (dev ")
               for line in lines)
    assert any(line.startswith("  best by dev nll (step 4): ") and
               line.endswith("<- the final model") for line in lines)

    real_save = train_loop.Trainer.save

    def killed(self):
        if self.step == 6:
            raise KeyboardInterrupt  # no handler runs: as a kill, after best.npz of step 4
        return real_save(self)

    monkeypatch.setattr(train_loop.Trainer, "save", killed)
    monkeypatch.chdir(tmp_path / "b")
    b = tmp_path / "b/run/checkpoints"
    cfg = config(tmp_path / "b", patience=3, run_dir="run")
    with pytest.raises(KeyboardInterrupt):
        Trainer(cfg, progress=False, echo=quiet).run()
    assert load_checkpoint(b / "best.npz").step == 4 and not (b / "checkpoint_6.npz").exists()
    monkeypatch.setattr(train_loop.Trainer, "save", real_save)
    rest = Trainer(cfg, resume="latest", progress=False, echo=quiet).run()
    assert rest.step == 7 and rest.stopped == full.stopped
    assert sha(a / "best.npz") == sha(b / "best.npz")  # the same bytes
    ours, theirs = (load_checkpoint(d / "checkpoint_7.npz").train_state for d in (a, b))
    assert ours["best"] == theirs["best"] and ours["step"] == theirs["step"] == 7

    # a run that stopped early, resumed, has nothing to train; more patience trains on
    said = []
    again = Trainer(cfg, resume="latest", progress=False, echo=said.append).run(final_eval=False)
    assert again.step == 7 and again.stopped == full.stopped and not again.losses
    cfg = config(tmp_path / "b", patience=5, run_dir="run")
    more = Trainer(cfg, resume="latest", progress=False, echo=quiet).run(final_eval=False)
    assert more.step == 12 and not more.stopped  # step 8 improves (0.1): on to the end
    assert load_checkpoint(b / "best.npz").step == 8


def test_a_best_file_of_abandoned_steps_the_resumed_run_does_not_validate_again_goes(
    tmp_path, monkeypatch
):
    plant(monkeypatch)
    real_save = train_loop.Trainer.save
    monkeypatch.setattr(
        train_loop.Trainer, "save",
        lambda self: (_ for _ in ()).throw(KeyboardInterrupt) if self.step == 6
        else real_save(self),
    )
    with pytest.raises(KeyboardInterrupt):
        Trainer(config(tmp_path), progress=False, echo=quiet).run()
    monkeypatch.setattr(train_loop.Trainer, "save", real_save)
    said = []
    cfg = config(tmp_path, eval_every=5)  # validates at 5 and 10 now, never at 4 again
    Trainer(cfg, resume="latest", progress=False, echo=said.append).run(final_eval=False)
    assert any(line.startswith("note: removed ") and "best.npz" in line for line in said)
    assert load_checkpoint(tmp_path / "run/checkpoints/best.npz").step == 5  # SCRIPT's best


@pytest.mark.parametrize(
    "task, metric, message",
    [
        ("reverse", "bleu", "train.best_metric='bleu' (from --best-metric) does not apply to "
         "task reverse, whose dev metrics are nll"),
        ("classify", "chrf", "does not apply to task classify, whose dev metrics are nll, "
         "accuracy"),
        ("translate", "accuracy", "whose dev metrics are nll, bleu, chrf"),
    ],
)
def test_a_best_metric_the_task_has_not_is_refused_in_one_line(
    tmp_path, capsys, task, metric, message
):
    run = ["--run-dir", str(tmp_path / "run")]
    assert cli_main(["train", "--task", task, *run, "--best-metric", metric]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()
    with pytest.raises(ConfigError, match="expected one of nll, bleu, chrf, accuracy"):
        TrainConfig.from_dict({"train": {"best_metric": "loss"}})


def test_overwrite_deletes_the_best_files_and_a_fresh_run_refuses_them(tmp_path, capsys):
    cfg = config(tmp_path, steps=3, test=False)
    train(cfg, progress=False, echo=quiet)
    ckpts = tmp_path / "run/checkpoints"
    for p in ckpts.iterdir():
        if p.name != "best.npz":
            p.unlink()
    (tmp_path / "run/metrics.jsonl").unlink()
    (tmp_path / "run/config.json").unlink()
    with pytest.raises(ConfigError, match=r"holds an earlier run \(best.npz\)"):
        Trainer(cfg, progress=False, echo=quiet)
    (tmp_path / "run/notes.txt").write_text("mine")
    train(cfg, overwrite=True, progress=False, echo=quiet)
    assert (tmp_path / "run/notes.txt").read_text() == "mine"
    assert load_checkpoint(ckpts / "best.npz").step in (1, 2, 3)


def test_classify_keeps_the_best_by_accuracy_and_by_nll(tmp_path):
    lines = []
    cfg = config(tmp_path, task="classify", best_metric="accuracy", steps=6)
    train(cfg, progress=False, echo=lines.append)
    ckpts = tmp_path / "run/checkpoints"
    valid = records(tmp_path / "run", "valid")
    best = load_checkpoint(ckpts / "best.npz").meta["best"]
    by_nll = load_checkpoint(ckpts / "best_nll.npz").meta["best"]
    assert best["metric"] == "accuracy" and by_nll["metric"] == "nll"
    first_max = max(valid, key=lambda r: (r["accuracy"], -r["step"]))
    assert best["step"] == first_max["step"]  # the first of the highest: a tie is no gain
    assert by_nll["step"] == min(valid, key=lambda r: (r["nll"], r["step"]))["step"]
    final = load_checkpoint(ckpts / "final.npz").meta["final"]
    assert final["metric"] == "accuracy" and final["model"] in ("last", "best", "best_nll")
    assert any(line.startswith("final model: ") and "dev accuracy" in line for line in lines)
    tests = records(tmp_path / "run", "test")
    assert tests[0]["model"] == "last" and sum(r["final"] for r in tests) == 1
    assert "best: checkpoints/best.npz by dev accuracy" in lines


def test_translate_keeps_the_best_by_dev_bleu_with_its_seconds(tmp_path):
    pytest.importorskip("sentencepiece")
    pytest.importorskip("sacrebleu")
    lines = []
    cfg = config(tmp_path, task="translate", best_metric="bleu", steps=6, eval_every=3)
    train(cfg, progress=False, echo=lines.append)
    valid = records(tmp_path / "run", "valid")
    assert [r["step"] for r in valid] == [3, 6]
    for r in valid:
        assert {"bleu", "chrf", "decode_seconds"} <= set(r) and r["decoded"] == 6
        assert r["decode_seconds"] >= 0
    dev = [line for line in lines if " | dev | " in line]
    assert all(" (greedy, 6 sentences, " in line for line in dev), dev
    assert "best: checkpoints/best.npz by dev BLEU (greedy, 6 dev sentences)" in lines
    ckpts = tmp_path / "run/checkpoints"
    best = load_checkpoint(ckpts / "best.npz").meta["best"]
    assert best["metric"] == "bleu" and set(best["scores"]) == {"bleu", "nll"}
    assert load_checkpoint(ckpts / "best_nll.npz").meta["best"]["metric"] == "nll"
    final = load_checkpoint(ckpts / "final.npz").meta["final"]
    assert final["metric"] == "bleu" and "last" in final["valid_bleu"]
    ending = next(line for line in lines if line.startswith("final model: "))
    assert "dev BLEU" in ending
