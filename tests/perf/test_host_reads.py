"""Host reads of a training step and of a decoding step, counted on a stand-in device
(tests/perf/host_reads.py): a GPU's launch queue stalls at each one.

Budgets: a training step reads nothing back between two records, for every task and any
depth (the loss, the NLL and the gradient norm stay on the device; clipping scales on
the device); a record or a checkpoint reads the steps since the last one in one
transfer; a decoding step makes at most one transfer (the chosen tokens). The budgets
are asserted at N = 2 and N = 6, and a test shows the check failing when a
``float(loss)`` is put back into the step.
"""

import numpy as np
import pytest
from host_reads import recording
from task_data import TASK_NAMES, run_config

from scratchformer.app.train import TrainConfig, Trainer
from scratchformer.engine import backend as B
from scratchformer.engine import step as train_stepper
from scratchformer.engine.decode import beam_search, greedy_decode
from scratchformer.engine.models import Transformer, TransformerConfig

STEPS = 3


def _has_sentencepiece() -> bool:
    try:
        import sentencepiece  # noqa: F401
    except ImportError:
        return False
    return True


def trainer(task, N, root, **train):
    if task == "translate" and not _has_sentencepiece():
        pytest.skip("sentencepiece is not installed (the bpe extra)")
    cfg = run_config(task, root, steps=100, log_every=100, eval_every=100, checkpoint_every=100)
    cfg["model"].update(N=N, P_drop=0.1, P_drop_attn=0.1)
    cfg["train"]["accum_steps"] = 2
    cfg["train"].update(train)
    return Trainer(TrainConfig.from_dict(cfg), progress=False, echo=lambda *a: None)


def steps_reads(tr, reads):
    """The reads of STEPS training steps (added to the window as the loop does), then of
    the check a record makes."""
    reads.clear()
    for _ in range(STEPS):
        tr.window.add(tr.train_step())
    during = list(reads)
    reads.clear()
    read = tr._check_steps()
    assert [s for s, *_ in read] == list(range(1, STEPS + 1))
    return during, list(reads)


def within_budget(during, per_step: int = 0):
    assert len(during) <= per_step * STEPS, "host reads in training steps:\n" + "\n".join(during)


@pytest.mark.parametrize("N", [2, 6])
@pytest.mark.parametrize("task", TASK_NAMES)
def test_a_training_step_reads_nothing_back(task, N, tmp_path, monkeypatch):
    with recording(monkeypatch) as reads:
        tr = trainer(task, N, tmp_path)
        try:
            during, at_record = steps_reads(tr, reads)
        finally:
            tr.lock.release()
    within_budget(during)
    assert at_record == ["transfer to NumPy at app/train/records.py:" + at_record[0].split(":")[1]]


@pytest.mark.parametrize("task", TASK_NAMES)
def test_a_mixed_precision_step_reads_nothing_back(task, tmp_path, monkeypatch):
    """Loss scaling decides on the device: the scale, the skip flag and Adam's step count
    stay device arrays (a first scale of 2^40 makes the first steps overflow and skip)."""
    with recording(monkeypatch) as reads:
        tr = trainer(task, 2, tmp_path, precision="float16", loss_scale=2.0**40)
        try:
            during, _ = steps_reads(tr, reads)
        finally:
            tr.lock.release()
    within_budget(during)


def test_the_count_fails_when_a_float_of_the_loss_comes_back(tmp_path, monkeypatch):
    """The check is not vacuous: reading the loss in the step is caught, per step."""
    original = train_stepper.accumulate_gradients

    def reads_the_loss(*args, **kwargs):
        out = original(*args, **kwargs)
        float(out[0])
        return out

    monkeypatch.setattr(train_stepper, "accumulate_gradients", reads_the_loss)
    with recording(monkeypatch) as reads:
        tr = trainer("reverse", 2, tmp_path)
        try:
            during, _ = steps_reads(tr, reads)
        finally:
            tr.lock.release()
    assert len(during) == STEPS and all(r.startswith("float()") for r in during)
    with pytest.raises(AssertionError, match="host reads in training steps"):
        within_budget(during)


def _model(N):
    cfg = TransformerConfig.preset("tiny", vocab_size=17, N=N, max_len=40)
    return Transformer(cfg)


@pytest.mark.parametrize("N", [2, 6])
@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_a_decoding_step_makes_at_most_one_transfer(search, N, monkeypatch):
    """Counted over a whole decode (its steps plus the setup, which reads the source's
    lengths once), per step: at most the one transfer that choosing tokens needs."""
    src = np.array([[5, 6, 7, 8, 0], [9, 10, 11, 12, 13]])
    with recording(monkeypatch) as reads:
        m = _model(N)
        reads.clear()
        if search == "greedy":
            out = greedy_decode(m, src, max_len_a=0, max_len_b=8)
            steps = max(len(o) for o in out) + 1
        else:
            out = beam_search(m, src, beam_size=3, max_len_a=0, max_len_b=8)
            steps = 9  # the longest a beam may run: 8 tokens, then <eos> forced
    per_step = [r for r in reads if "source_lengths" not in r]
    assert len(per_step) <= steps, "\n".join(reads)
    assert all(r.startswith("transfer to NumPy") for r in per_step), "\n".join(reads)
    assert B.backend_name() == "numpy"
