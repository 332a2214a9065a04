"""Mixed precision: float32 master weights, float16 activations (emulated on NumPy as
tensor cores compute), dynamic loss scaling decided on the device. A planted overflow is
skipped, halves the scale and changes nothing; good steps grow it back; a run whose
steps overflow never stops as divergence and counts them; a killed and resumed mixed
run equals the uninterrupted one bit for bit."""

import json
import re

import numpy as np
import pytest
from test_loop import quiet, small_config

from scratchformer.app.checkpoint import load_checkpoint
from scratchformer.app.train import ConfigError, TrainConfig, TrainingDiverged, train
from scratchformer.app.train.config import LoopConfig, OptimConfig
from scratchformer.app.train.records import Window, overflow_problem
from scratchformer.app.train.report import train_line
from scratchformer.engine import backend as B
from scratchformer.engine import device, dispatch
from scratchformer.engine.models import Transformer, TransformerConfig
from scratchformer.engine.optim.scaler import LossScaler
from scratchformer.engine.step import Stepper

MIXED = {"precision": "float16"}


def _stepper(window=2, scale=2.0**15, **model):
    cfg = TransformerConfig.preset("tiny", vocab_size=13, **{"P_drop": 0.0, **model})
    d = TrainConfig.default().to_dict()
    loop = LoopConfig(**{**d["train"], "precision": "float16", "loss_scale": scale,
                         "loss_scale_window": window})
    return Stepper(Transformer(cfg), OptimConfig(**d["optim"]), loop, cfg.d_model)


def _batch(seed=0):
    from scratchformer.app.data import collate
    from scratchformer.app.train.tasks.base import TaskBatch

    r = np.random.default_rng(seed)
    pairs = [(list(r.integers(3, 13, 5)), list(r.integers(3, 13, 4))) for _ in range(6)]
    src, tgt_in, tgt_out, _, n = collate(pairs)
    return TaskBatch((src, tgt_in), tgt_out, n, n)


def test_the_activations_are_float16_and_the_master_weights_float32():
    st = _stepper()
    with B.autocast("float16"):
        logits, _ = st.model.forward(*_batch().inputs)
    assert logits.dtype == np.float16
    rec = st.step(1, [_batch()], [device.generator(1)])
    assert st.flat.params.dtype == np.float32 and st.flat.grads.dtype == np.float32
    assert rec["loss"].dtype == np.float64 and not bool(rec["skipped"])
    chosen = {t.name: t.chosen("float16").name for t in dispatch.TABLES.values()}
    assert chosen["linear"] == chosen["attention_core"] == "float16"


def test_a_planted_overflow_is_skipped_halves_the_scale_and_good_steps_grow_it():
    """A first scale of 2^60 overflows float16's gradients (largest 65,504): each such
    step leaves the parameters, the moments and Adam's step count exactly as they were and
    halves the scale; once a step fits, every ``window`` good steps double it."""
    st = _stepper(window=2, scale=2.0**60)
    trace = []
    for s in range(1, 60):
        before = (
            B.asnumpy(st.flat.params).copy(),
            B.asnumpy(st.optimizer.m).copy(),
            int(st.optimizer.t),
        )
        rec = st.step(s, [_batch(s)], [None])
        skipped = bool(rec["skipped"])
        trace.append((s, float(rec["loss_scale"]), skipped, float(st.scaler.scale)))
        if skipped:
            np.testing.assert_array_equal(B.asnumpy(st.flat.params), before[0])
            np.testing.assert_array_equal(B.asnumpy(st.optimizer.m), before[1])
            assert int(st.optimizer.t) == before[2]
        else:
            assert int(st.optimizer.t) == before[2] + 1
    print("step  scale used  skipped  scale after")  # shown with pytest -s
    for s, used, skipped, after in trace[:40]:
        print(f"{s:>4}  {used:>10.4g}  {'yes' if skipped else 'no':>7}  {after:>11.4g}")
    skips = [t for t in trace if t[2]]
    assert skips and trace[0][2], trace[:3]
    for _, used, skipped, after in trace:
        assert after == (used / 2 if skipped else after)
    first_good = next(i for i, t in enumerate(trace) if not t[2])
    good = trace[first_good]
    # the window: two good steps in a row, then the scale doubles
    assert trace[first_good + 1][1] == good[1] or trace[first_good + 1][2]
    grown = [t for t in trace[first_good:] if not t[2] and t[3] == 2 * t[1]]
    assert grown, trace
    assert int(st.scaler.skipped) == len(skips)
    assert int(st.optimizer.t) == len(trace) - len(skips)


def test_the_scaler_grows_and_halves_by_its_rules_on_the_device():
    xp = B.xp
    sc = LossScaler(8.0, window=3)
    for ok, want in [(True, 8), (True, 8), (True, 16), (False, 8), (True, 8), (True, 8),
                     (True, 16)]:
        sc.update(xp.asarray(ok))
        assert float(sc.scale) == want
    assert sc.state_dict() == {"scale": 16.0, "good": 0, "skipped": 1, "window": 3}


def test_an_overflowing_run_does_not_stop_as_divergence_and_counts_its_skips(tmp_path):
    """A first scale of 2^60: the first steps overflow and are skipped (counted in
    metrics.jsonl with the loss scale), never reported as a divergence; the run ends."""
    cfg = small_config(tmp_path, steps=30, log_every=5, **MIXED, loss_scale=2.0**60)
    result = train(cfg, progress=False, echo=quiet, final_eval=False)
    assert result.step == 30
    recs = [json.loads(x) for x in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    train_recs = [r for r in recs if r["kind"] == "train"]
    assert train_recs[0]["skipped_steps"] > 0
    assert sum(r["skipped_steps"] for r in train_recs) > 0
    assert train_recs[-1]["loss_scale"] < 2.0**60
    assert not [r for r in recs if r["kind"] == "error"]


def test_a_killed_and_resumed_mixed_run_equals_the_uninterrupted_one(tmp_path):
    n = 6
    mixed = {**MIXED, "loss_scale": 2.0**20, "loss_scale_window": 3}

    def run(where, steps, resume=None):
        cfg = small_config(tmp_path / where, steps=steps, checkpoint_every=n, **mixed)
        return train(cfg, resume=resume, progress=False, echo=quiet, final_eval=False)

    full = run("a", 2 * n)
    first = run("b", n)
    second = run("b", 2 * n, resume="latest")
    assert first.losses + second.losses == full.losses  # bit for bit
    a, b = load_checkpoint(full.checkpoint), load_checkpoint(second.checkpoint)
    for k, v in a.model.state_dict().items():
        assert v.dtype == np.float32  # the master weights
        np.testing.assert_array_equal(v, b.model.state_dict()[k])
    for moment in ("m", "v"):
        for k, v in a.optimizer_state[moment].items():
            np.testing.assert_array_equal(v, b.optimizer_state[moment][k])
    assert a.optimizer_state["t"] == b.optimizer_state["t"]
    assert a.train_state["loss_scale"] == b.train_state["loss_scale"]


def test_the_setting_is_checked_where_it_enters(tmp_path):
    with pytest.raises(ConfigError, match="train.precision='float8'"):
        small_config(tmp_path, precision="float8")
    with pytest.raises(ConfigError, match="train.loss_scale must be a positive"):
        small_config(tmp_path, **MIXED, loss_scale=0.0)
    assert TrainConfig.default().train.precision == "float32"  # off by default


def test_a_float16_run_on_numpy_says_once_that_it_is_emulated_and_slower(tmp_path):
    """On NumPy float16 is emulated: the header says so once, with what a step costs
    against float32 (a measured figure); a float32 run says nothing of it, and on CuPy
    (real float16 products) the note is left out."""
    from scratchformer.app.train.report import FLOAT16_ON_NUMPY, precision_note

    lines = []
    train(small_config(tmp_path / "a", steps=2, **MIXED), progress=False, echo=lines.append,
          final_eval=False)
    said = [line for line in lines if "float16 on NumPy is emulated" in line]
    assert len(said) == 1 and f"about {FLOAT16_ON_NUMPY:g}x float32's" in said[0]
    assert lines.index(said[0]) == 1 + next(
        i for i, line in enumerate(lines) if line.startswith("precision: float16 activations")
    )
    lines.clear()
    train(small_config(tmp_path / "b", steps=2), progress=False, echo=lines.append,
          final_eval=False)
    assert not [line for line in lines if line.startswith(("precision:", "  float16 on NumPy"))]
    loop = TrainConfig.from_dict({"train": MIXED}).train
    assert len(precision_note(loop, "numpy")) == 2 and len(precision_note(loop, "cupy")) == 1


def test_a_diverging_float16_run_stops_as_float32_does_and_writes_no_final_model(tmp_path):
    """A learning rate 1e6 times the paper's: in float32 the loss explodes; in float16
    nearly every step overflows and is skipped, the loss scale halving each time. Below
    train.min_loss_scale the run stops as diverged (the same error, naming the skipped
    steps and the scale), and no final model is written."""
    for precision in ("float32", "float16"):
        cfg = small_config(tmp_path / precision, steps=30, precision=precision)
        cfg.optim.lr_factor = 1e6
        with pytest.raises(TrainingDiverged) as e:
            train(cfg, progress=False, echo=quiet, final_eval=False)
        assert not (tmp_path / precision / "run/checkpoints/final.npz").exists()
    assert re.search(
        r"the loss scale fell to [0-9.e-]+, below train.min_loss_scale = 1, with \d+ of the "
        r"last \d+ steps skipped, their float16 gradients overflowing \(diverged\)",
        str(e.value),
    ), str(e.value)
    recs = [
        json.loads(x) for x in (tmp_path / "float16/run/metrics.jsonl").read_text().splitlines()
    ]
    assert recs[-1]["kind"] == "error" and "min_loss_scale" in recs[-1]["message"]


def test_a_window_skipping_more_than_its_share_after_the_first_steps_is_a_divergence():
    """Past the first Window.GRACE steps, a log window that skips more than
    train.max_skipped_share of its steps stops the run (judged at the record); before,
    a first scale too large is halved until it fits, and nothing stops."""
    loop = TrainConfig.default().train
    w = Window()
    for s in range(91, 111):  # 10 steps within the grace, 10 after: 6 of those skipped
        w.add({"step": s, "loss": 1.0, "nll": 1.0, "grad_norm": 1.0, "tokens": 1,
               "skipped": s > 104, "loss_scale": 8.0})
    w.flush()
    assert w.late == [4, 6] and w.skipped == 6
    why = overflow_problem(w, 8.0, loop, at_record=True)
    assert why.startswith("6 of the last 10 steps after step 100 were skipped") and "0.5" in why
    assert overflow_problem(w, 8.0, loop, at_record=False) == ""  # a save between records
    assert "fell to 0.5, below" in overflow_problem(w, 0.5, loop, at_record=False)
    early = Window()
    for s in range(1, 21):
        early.add({"step": s, "loss": 1.0, "nll": 1.0, "grad_norm": 1.0, "tokens": 1,
                   "skipped": True, "loss_scale": 8.0})
    early.flush()
    assert overflow_problem(early, 8.0, loop, at_record=True) == ""
    rec = early.record(20, 0, {"lr": 1.0, "grad_norm": 1.0, "loss_scale": 8.0}, 20)
    assert "loss" not in rec and "nll" not in rec and "ppl" not in rec  # no loss, not 0.0
    assert rec["skipped_steps"] == 20
    assert "no loss: every step skipped" in train_line({**rec, "tokens_per_s": 1, "elapsed": 1}, 20)
    assert Window(w.state()).late == [4, 6]  # kept for a resume between records


def test_the_floor_and_the_share_are_checked_where_they_enter(tmp_path):
    with pytest.raises(ConfigError, match="train.min_loss_scale must be a positive number"):
        small_config(tmp_path, **MIXED, min_loss_scale=0.0)
    with pytest.raises(ConfigError, match=r"train.max_skipped_share must be in \(0, 1\]"):
        small_config(tmp_path, **MIXED, max_skipped_share=1.5)
