"""The training loop on the encoder-decoder task: accumulation, resume checks, the run
directory guard, divergence, logs, averaging, and the CLI. (tests/train/test_every_task.py
checks what holds for every task.)"""

import json
import math
import re
import time
from pathlib import Path

import numpy as np
import pytest
from task_data import run_config

from scratchformer.app.checkpoint import average_checkpoints, list_checkpoints, load_checkpoint
from scratchformer.app.cli import main as cli_main
from scratchformer.app.data import collate
from scratchformer.app.train import (
    ConfigError,
    TrainConfig,
    Trainer,
    TrainingDiverged,
    accumulate_gradients,
    train,
)
from scratchformer.app.train import loop as train_loop
from scratchformer.app.train.tasks.seq2seq import pair_batch
from scratchformer.engine import backend as B
from scratchformer.engine.models import Transformer, TransformerConfig


def small_config(tmp_path, **train_overrides) -> TrainConfig:
    """A reverse run that takes well under a second per few steps (two layers, preset
    tiny: N=2, d_model=16)."""
    train = {"steps": 8, "max_tokens": 96, "eval_every": 4, "checkpoint_every": 4}
    d = run_config("reverse", tmp_path, **{**train, **train_overrides})
    d["model"] = {"preset": "tiny", "d_model": 16, "d_ff": 32, "h": 2, "P_drop": 0.1}
    d["optim"]["warmup"] = 10
    return TrainConfig.from_dict(d)


def quiet(*a, **k):
    pass


# -- gradient accumulation -----------------------------------------------------------------
def test_accumulation_equals_one_batch_of_the_union(backend, f64):
    cfg = TransformerConfig.preset("tiny", vocab_size=12, P_drop=0.0, eps_ls=0.1)
    model = Transformer(cfg)
    r = np.random.default_rng(0)
    pairs = [
        (list(r.integers(4, 12, r.integers(1, 9))), list(r.integers(4, 12, r.integers(0, 7))))
        for _ in range(11)
    ]
    micro = [pair_batch(pairs, idx) for idx in ([0, 1, 2], [3], range(4, 11))]  # unequal
    loss_k, _, n_k, _ = accumulate_gradients(model, micro)
    grads_k = {k: B.asnumpy(g).copy() for k, g in model.gradients().items()}

    loss_1, _, n_1, _ = accumulate_gradients(model, [pair_batch(pairs, range(11))])
    assert n_k == n_1 == sum(len(y) + 1 for _, y in pairs)
    assert loss_k == pytest.approx(loss_1, rel=1e-12)
    for k, g in model.gradients().items():
        np.testing.assert_allclose(grads_k[k], B.asnumpy(g), rtol=1e-9, atol=1e-12, err_msg=k)
    # and it is the model's own gradient of the union's mean loss
    model.zero_grad()
    u = collate(pairs)
    _, cache = model.loss_forward(*(B.asarray(a) for a in u[:3]))
    model.loss_backward(cache)
    for k, g in model.gradients().items():
        np.testing.assert_allclose(grads_k[k], B.asnumpy(g), rtol=1e-9, atol=1e-12, err_msg=k)


# -- exact resume ---------------------------------------------------------------------------
def test_resume_reproduces_the_uninterrupted_run(tmp_path):
    n = 6
    full = train(
        small_config(tmp_path / "a", steps=2 * n, checkpoint_every=n),
        progress=False,
        echo=quiet,
        final_eval=False,
    )
    first = train(
        small_config(tmp_path / "b", steps=n, checkpoint_every=n),
        progress=False,
        echo=quiet,
        final_eval=False,
    )
    second = train(
        small_config(tmp_path / "b", steps=2 * n, checkpoint_every=n),
        resume="latest",
        progress=False,
        echo=quiet,
        final_eval=False,
    )
    assert [s for s, _ in second.losses] == list(range(n + 1, 2 * n + 1))
    assert first.losses + second.losses == full.losses  # bit for bit
    a = load_checkpoint(full.checkpoint)
    b = load_checkpoint(second.checkpoint)
    for k, v in a.model.state_dict().items():
        np.testing.assert_array_equal(v, b.model.state_dict()[k])
    for moment in ("m", "v"):
        for k, v in a.optimizer_state[moment].items():
            np.testing.assert_array_equal(v, b.optimizer_state[moment][k])
    # wall time differs; the position in the data does not. The best scores differ: the
    # first part was a run of its own, ending at its own train.steps (6), validated there
    wall = ("seconds", "best")
    assert {k: v for k, v in a.train_state.items() if k not in wall} == {
        k: v for k, v in b.train_state.items() if k not in wall
    }
    assert b.train_state["seconds"] > 0
    # the training records of the resumed run's log read like the uninterrupted one's
    assert _train_records(tmp_path / "b") == _train_records(tmp_path / "a")


def _train_records(root):
    recs = map(json.loads, (root / "run/metrics.jsonl").read_text().splitlines())
    return [(r["step"], r["loss"], r["lr"], r["grad_norm"]) for r in recs if r["kind"] == "train"]


def test_resume_across_an_epoch_boundary_and_with_accumulation(tmp_path):
    cfg = small_config(tmp_path / "a", steps=10, accum_steps=3, checkpoint_every=5)
    tr = Trainer(cfg, progress=False, echo=quiet)
    assert len(tr.sampler) < 10 * 3  # 30 micro-batches: the run crosses an epoch boundary
    full = tr.run(final_eval=False)
    train(
        small_config(tmp_path / "b", steps=5, accum_steps=3, checkpoint_every=5),
        progress=False,
        echo=quiet,
        final_eval=False,
    )
    rest = train(
        small_config(tmp_path / "b", steps=10, accum_steps=3, checkpoint_every=5),
        resume="latest",
        progress=False,
        echo=quiet,
        final_eval=False,
    )
    assert full.losses[5:] == rest.losses


def test_resume_refuses_a_different_model_or_task(tmp_path):
    train(small_config(tmp_path, steps=4), progress=False, echo=quiet, final_eval=False)
    other = small_config(tmp_path, steps=8)
    other.model["d_model"] = 32
    with pytest.raises(ConfigError, match="model differs"):
        Trainer(other, resume="latest", progress=False, echo=quiet)
    other = small_config(tmp_path, steps=8)
    other.task.train_size = 300
    with pytest.raises(ConfigError, match="with other task.train_size: the run would not"):
        Trainer(other, resume="latest", progress=False, echo=quiet)
    other = small_config(tmp_path, steps=8, max_tokens=200)  # another data order
    with pytest.raises(ConfigError, match="with other train.max_tokens"):
        Trainer(other, resume="latest", progress=False, echo=quiet)


def test_resume_from_an_older_checkpoint_refuses_or_drops_the_abandoned_ones(tmp_path):
    """Resuming at step 4 of a run that reached step 8 abandons checkpoint 8: it must not
    be averaged into (or resumed by) the new run without the user saying so."""
    train(small_config(tmp_path, steps=8), progress=False, echo=quiet, final_eval=False)
    ckpts = tmp_path / "run/checkpoints"
    old = ckpts / "checkpoint_4.npz"
    with pytest.raises(ConfigError, match="checkpoint_8.npz.*--overwrite"):
        Trainer(small_config(tmp_path), resume=old, progress=False, echo=quiet)
    assert [s for s, _ in list_checkpoints(ckpts)] == [4, 8]  # nothing deleted
    tr = Trainer(small_config(tmp_path), resume=old, overwrite=True, progress=False, echo=quiet)
    assert tr.step == 4
    assert [s for s, _ in list_checkpoints(ckpts)] == [4]


def test_fresh_run_does_not_clobber_an_earlier_run(tmp_path):
    train(small_config(tmp_path, steps=8), progress=False, echo=quiet)
    with pytest.raises(ConfigError, match="holds an earlier run.*step 8.*--resume"):
        Trainer(small_config(tmp_path), progress=False, echo=quiet)
    ckpts = tmp_path / "run/checkpoints"
    for _, p in list_checkpoints(ckpts):  # only the final model and the log left: still a run
        p.unlink()
    with pytest.raises(ConfigError, match="holds an earlier run \\(final.npz\\)"):
        Trainer(small_config(tmp_path), progress=False, echo=quiet)
    assert (ckpts / "final.npz").exists() and (tmp_path / "run/metrics.jsonl").exists()
    Trainer(small_config(tmp_path), overwrite=True, progress=False, echo=quiet)
    assert not (ckpts / "final.npz").exists() and not (tmp_path / "run/metrics.jsonl").exists()


# -- a NaN stops the run ---------------------------------------------------------------------
def test_nan_loss_stops_training_and_keeps_the_last_good_checkpoint(tmp_path):
    tr = Trainer(small_config(tmp_path, steps=4), progress=False, echo=quiet)
    tr.run(final_eval=False)
    good = tr.last_checkpoint
    before = good.read_bytes()
    tr.cfg.train.steps = 8
    tr.model.parameters()["decoder.layers.0.ffn.W_1"][0, 0] = np.nan
    with pytest.raises(TrainingDiverged, match=r"step 5, the training loss is nan.*checkpoint_4"):
        tr.run(final_eval=False)
    assert [s for s, _ in list_checkpoints(good.parent)] == [4]  # nothing newer written
    assert good.read_bytes() == before
    assert math.isfinite(float(load_checkpoint(good).model.state_dict()["embed.E"].sum()))
    last = json.loads((tmp_path / "run/metrics.jsonl").read_text().splitlines()[-1])
    assert last["kind"] == "error" and last["step"] == 5


def test_inf_gradient_stops_training(tmp_path, monkeypatch):
    """The norm stays on the device; it is read with the loss at the next record (or save)
    and the stop names the step it was not finite at."""
    tr = Trainer(small_config(tmp_path), progress=False, echo=quiet)
    monkeypatch.setattr(
        "scratchformer.engine.step.clip_grad_norm", lambda g, m: B.asarray(float("inf"))
    )
    with pytest.raises(TrainingDiverged, match="step 1, the gradient norm is inf.*no checkpoint"):
        tr.run(final_eval=False)


# -- logs, outputs, final evaluation ------------------------------------------------------------
def test_without_a_bar_no_stretch_of_steps_is_silent(tmp_path, monkeypatch):
    """A log (or a rank 0 under mpiexec) gets a line whenever TICK_SECONDS would pass
    without one: after steps 1, 2, 3 and 5 here; steps 4 and 6 write their own lines.
    The run's clock moves only in the steps (0.06 s each, against a tick of 0.05 s), so
    that a busy machine (a slow validation, a slow save) changes nothing."""
    monkeypatch.setattr(train_loop, "TICK_SECONDS", 0.05)
    now = [1000.0]
    monkeypatch.setattr(time, "perf_counter", lambda: now[0])
    step = Trainer.train_step

    def slow_step(self):
        now[0] += 0.06
        return step(self)

    monkeypatch.setattr(Trainer, "train_step", slow_step)
    cfg = small_config(tmp_path, steps=6, log_every=4, eval_every=4, checkpoint_every=4)
    lines = []
    Trainer(cfg, progress=False, echo=lines.append).run(final_eval=False)
    ticks = [ln.split(" (")[0] for ln in lines if ln.startswith("  training: ")]
    assert ticks == [f"  training: {s}/6" for s in (1, 2, 3, 5)], lines


def test_a_progress_line_shows_the_runs_clock_and_the_time_left():
    """After a resume at step 10 (600 s of training before it), 20 steps in 20 s: the
    clock counts from the run's start, as the step lines do, and 70 steps are left at
    1 step/s, unless a time limit ends the run first."""
    from types import SimpleNamespace

    from scratchformer.app.train.report import progress_line

    no_limit, limit = SimpleNamespace(time_limit=0), SimpleNamespace(time_limit=50)
    assert progress_line(30, 10, 100, 20.0, 600.0, no_limit) == (
        "  training: 30/100 (0:10:20, about 0:01:10 left)"
    )
    assert progress_line(30, 10, 100, 20.0, 600.0, limit).endswith("(0:10:20, about 0:00:30 left)")


def test_a_resumed_run_s_plan_says_its_time_limit_is_of_this_session(tmp_path):
    """The time limit counts this process's training: a run resumed past it says "at
    most S s more" and how long it trained before, never "at most S s" alone; a fresh
    run says "at most S s"."""
    first, again = [], []
    cfg = small_config(tmp_path, time_limit=1e-9, eval_every=0)
    assert train(cfg, progress=False, echo=first.append, final_eval=False).step == 1
    res = train(cfg, resume="latest", progress=False, echo=again.append, final_eval=False)
    assert res.step == 2 and res.stopped == "time limit of 1e-09 s more reached after step 2"
    plan = [line for line in first if line.startswith("plan: ")]
    assert plan and ", at most 1e-09 s, " in plan[0]
    plan = [line for line in again if line.startswith("plan: ")]
    assert plan and re.search(
        r", at most 1e-09 s more \(the run trained \d+:\d\d:\d\d before this resume\), ", plan[0]
    )


def test_run_writes_metrics_checkpoints_and_evaluates(tmp_path):
    lines = []
    res = train(small_config(tmp_path, checkpoint_every=1), progress=False, echo=lines.append)
    recs = [json.loads(x) for x in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    kinds = [(r["kind"], r["step"]) for r in recs]
    # best.npz: the model of the validation with the lower nll (step 4 or 8); a best of
    # step 4 is a third model judged on the test set, after the last and the average
    ckpts = tmp_path / "run/checkpoints"
    best = load_checkpoint(ckpts / "best.npz").meta["best"]
    best_step = 4 if recs[2]["nll"] < recs[5]["nll"] else 8
    assert (
        best["step"] == best_step
        and best["scores"]["nll"] == recs[2 if best_step == 4 else 5]["nll"]
    )
    judged = ["last", "averaged"] + (["best"] if best_step == 4 else [])
    assert kinds == [
        ("train", 2),
        ("train", 4),
        ("valid", 4),
        ("train", 6),
        ("train", 8),
        ("valid", 8),
        *[("test", 8)] * len(judged),
    ]
    assert [r["model"] for r in recs[6:]] == judged
    recs = recs[:8]  # the last and the average, as below
    train_rec = recs[0]
    assert {"loss", "ppl", "lr", "grad_norm", "tokens_per_s"} <= set(train_rec)
    valid_rec = recs[2]
    assert {"loss", "ppl", "token_acc", "seq_acc"} <= set(valid_rec)
    assert valid_rec["ppl"] == pytest.approx(math.exp(valid_rec["nll"]))
    assert [s for s, _ in list_checkpoints(ckpts)] == [4, 5, 6, 7, 8]  # the newest 5 kept
    ck = load_checkpoint(res.checkpoint)
    assert ck.meta["tokenizer"]["type"] == "char" and ck.step == 8
    # the paper's averaging, of the checkpoints of the last 20% of the 8 steps: 7 and 8
    avg = load_checkpoint(ckpts / "averaged.npz")
    assert avg.meta["averaged_from"] == ["checkpoint_7.npz", "checkpoint_8.npz"]
    want = average_checkpoints([ckpts / "checkpoint_7.npz", res.checkpoint])
    for k, v in avg.model.state_dict().items():
        np.testing.assert_array_equal(v, want[k])
    # the final model: the one of the two with the lower validation nll, said and recorded
    final = load_checkpoint(ckpts / "final.npz")
    chosen = final.meta["final"]
    nll = chosen["valid_nll"]
    assert nll["last"] == recs[5]["nll"]  # the last validation, not judged again
    if best_step == 8:  # the best is the last checkpoint: two candidates
        assert chosen["model"] == ("averaged" if nll["averaged"] <= nll["last"] else "last")
    if chosen["model"] == "best":  # the third candidate won: the rest is of the other two
        return
    source = avg if chosen["model"] == "averaged" else ck
    for k, v in source.model.state_dict().items():
        np.testing.assert_array_equal(final.model.state_dict()[k], v)
    assert final.optimizer_state is None
    assert [r["final"] for r in recs[-2:]] == [
        chosen["model"] == "last",
        chosen["model"] == "averaged",
    ]
    name = "averaged model" if chosen["model"] == "averaged" else "last checkpoint"
    assert f"final model: the {name} (dev nll " in "\n".join(lines)
    marked = [x for x in lines if x.endswith("<- the final model")]
    assert len(marked) == 1
    assert marked[0].startswith(
        "  average of 2 checkpoints (7, 8): exact match"
        if chosen["model"] == "averaged"
        else "  last checkpoint (step 8): exact match"
    )
    assert json.loads((tmp_path / "run/config.json").read_text())["task"]["name"] == "reverse"
    assert res.test is not None and len(res.examples) == 2
    assert res.test == {
        k: v
        for k, v in recs[-1 if chosen["model"] == "averaged" else -2].items()
        if k not in ("kind", "step", "model", "final")
    }
    assert 0.0 <= res.test["seq_acc_decoded"] <= 1.0 and res.test["decode"] == "beam 4, alpha 0.6"
    assert res.files == [
        tmp_path / "run" / f
        for f in (
            "config.json",
            "metrics.jsonl",
            *(f"checkpoints/checkpoint_{s}.npz" for s in (4, 5, 6, 7, 8)),
            "checkpoints/final.npz",
            "checkpoints/best.npz",
            "checkpoints/averaged.npz",
        )
    ]


@pytest.mark.parametrize("better", ["last", "averaged"])
def test_the_final_model_is_the_one_with_the_lower_validation_nll(tmp_path, monkeypatch, better):
    """Whichever of the last checkpoint and the average scores the lower validation
    cross-entropy is written to final.npz (the scores planted: the choice alone is
    tested here)."""
    from scratchformer.app.train import final as final_mod  # noqa: PLC0415

    real = final_mod.choose_final

    def planted(task, model, averaged, **kw):
        def evaluate(m, *a, **k):
            good = (m is averaged[0]) == (better == "averaged")
            return {"nll": 1.0 if good else 2.0}

        monkeypatch.setattr(task, "evaluate", evaluate)
        return real(task, model, averaged, **{**kw, "valid": [], "best": None})

    monkeypatch.setattr(final_mod, "choose_final", planted)
    cfg = small_config(tmp_path, checkpoint_every=1, test=False)
    res = train(cfg, progress=False, echo=quiet)
    ckpts = tmp_path / "run/checkpoints"
    final = load_checkpoint(ckpts / "final.npz")
    assert final.meta["final"]["model"] == better
    assert final.meta["final"]["valid_nll"] == {
        "last": 1.0 if better == "last" else 2.0,
        "averaged": 1.0 if better == "averaged" else 2.0,
    }
    source = load_checkpoint(ckpts / "averaged.npz" if better == "averaged" else res.checkpoint)
    for k, v in source.model.state_dict().items():
        np.testing.assert_array_equal(final.model.state_dict()[k], v)


def test_keep_checkpoints(tmp_path):
    train(
        small_config(tmp_path, checkpoint_every=2, keep_checkpoints=2, average_last=2),
        progress=False,
        echo=quiet,
        final_eval=False,
    )
    assert [s for s, _ in list_checkpoints(tmp_path / "run/checkpoints")] == [6, 8]


def test_evaluation_seq_acc_matches_greedy_decoding(tmp_path):
    """Teacher-forced exact match equals greedy decoding's (the claim in evaluation.py)."""
    from scratchformer.engine.decode import greedy_decode  # noqa: PLC0415

    tr = Trainer(
        small_config(tmp_path, steps=30, eval_every=0, checkpoint_every=0),
        progress=False,
        echo=quiet,
    )
    tr.run(final_eval=False)
    m = tr.task.evaluate(tr.model, "valid", 96)
    pairs = tr.task.examples("valid")
    out = greedy_decode(tr.model, B.asarray(collate(pairs).src))
    greedy = np.mean([list(o) == list(y) for o, (_, y) in zip(out, pairs)])
    assert m["seq_acc"] == pytest.approx(greedy)


# -- command line ---------------------------------------------------------------------------
def _toml(tmp_path) -> Path:
    p = tmp_path / "tiny.toml"
    p.write_text(
        """
name = "cli"
[task]
name = "copy"
symbols = 5
max_len = 5
train_size = 100
valid_size = 10
test_size = 4
[model]
preset = "tiny"
[train]
steps = 4
max_tokens = 64
checkpoint_every = 2
eval_every = 2
"""
    )
    return p


def test_cli_train_resume_and_average(tmp_path, capsys):
    cfg, run = _toml(tmp_path), tmp_path / "run"
    argv = ["train", "--config", str(cfg), "--run-dir", str(run), "--no-progress"]
    assert cli_main([*argv, "--steps", "2", "--set", "optim.warmup=5"]) == 0
    out = capsys.readouterr().out
    assert "exact match" in out and "done: step 2, 2 steps" in out
    # continue with the stored configuration and a new step budget
    assert (
        cli_main(["train", "--resume", "--run-dir", str(run), "--no-progress", "--steps", "4"]) == 0
    )
    assert "resuming cli at step 2" in capsys.readouterr().out
    assert [s for s, _ in list_checkpoints(run / "checkpoints")] == [2, 4]
    stored = json.loads((run / "config.json").read_text())
    assert stored["optim"]["warmup"] == 5 and stored["train"]["steps"] == 4

    # the run's own averaged.npz is replaced: named with --overwrite
    assert cli_main(["average", str(run / "checkpoints"), "--last", "2", "--overwrite"]) == 0
    avg = load_checkpoint(run / "checkpoints/averaged.npz")
    a, b = (load_checkpoint(run / f"checkpoints/checkpoint_{s}.npz") for s in (2, 4))
    for k, v in avg.model.state_dict().items():
        want = (a.model.state_dict()[k].astype(np.float64) + b.model.state_dict()[k]) / 2
        np.testing.assert_allclose(v, want, rtol=1e-6, atol=1e-7)
    assert avg.optimizer_state is None and avg.meta["tokenizer"]["type"] == "char"
    assert len(avg.meta["averaged_from"]) == 2


def test_average_never_overwrites_one_of_its_inputs(tmp_path, capsys):
    train(small_config(tmp_path, steps=8), progress=False, echo=quiet, final_eval=False)
    last = tmp_path / "run/checkpoints/checkpoint_8.npz"
    before = last.read_bytes()
    assert cli_main(["average", str(last.parent), "--last", "2", "-o", str(last)]) == 2
    assert "is the input checkpoint file" in capsys.readouterr().err
    assert last.read_bytes() == before


def test_cli_errors_are_clean(tmp_path, capsys):
    assert cli_main(["train", "--config", str(tmp_path / "missing.toml")]) == 2
    assert "no config file" in capsys.readouterr().err
    bad = tmp_path / "bad.toml"
    bad.write_text("[train\n")
    assert cli_main(["train", "--config", str(bad)]) == 2
    assert "not valid TOML" in capsys.readouterr().err
    assert cli_main(["train", "--set", "train.nope=1", "--run-dir", str(tmp_path)]) == 2
    assert "unknown key 'nope' in [train] (from --set train.nope=1)" in capsys.readouterr().err
    assert cli_main(["train", "--resume", "--run-dir", str(tmp_path / "empty")]) == 2
    assert "nothing to resume" in capsys.readouterr().err
    assert cli_main(["average", str(tmp_path)]) == 2
    assert "holds 0" in capsys.readouterr().err


@pytest.mark.slow
def test_default_run_reaches_99_percent_held_out(tmp_path):
    """About 2 minutes on 2 cores: the default run learns to reverse."""
    res = train(
        TrainConfig.from_dict({"run_dir": str(tmp_path / "run")}), progress=False, echo=quiet
    )
    acc = res.test.get("seq_acc_decoded", res.test["seq_acc"])
    assert acc >= 0.99


def test_no_test_skips_the_test_set_but_keeps_the_final_model(tmp_path):
    lines = []
    res = train(small_config(tmp_path, test=False), progress=False, echo=lines.append)
    assert res.test is None and "\ntest set: not judged (train.test = false)" in lines
    assert (tmp_path / "run/checkpoints/final.npz").is_file()
    recs = [json.loads(x) for x in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    assert "test" not in {r["kind"] for r in recs}


def test_a_run_with_one_checkpoint_still_writes_the_final_model(tmp_path):
    """final.npz is the final model of every run (the README's commands name it): with
    one checkpoint it holds that checkpoint's parameters, and nothing is averaged."""
    res = train(small_config(tmp_path, steps=3, checkpoint_every=0), progress=False, echo=quiet)
    final = load_checkpoint(tmp_path / "run/checkpoints/final.npz")
    last = load_checkpoint(res.checkpoint)
    assert final.optimizer_state is None and final.meta["final"]["model"] == "last"
    assert not (tmp_path / "run/checkpoints/averaged.npz").exists()
    for k, v in last.model.state_dict().items():
        np.testing.assert_array_equal(final.model.state_dict()[k], v)
