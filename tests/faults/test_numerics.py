"""Numerical faults: no checkpoint is ever written of a non-finite or diverged state.

A step can leave parameters or Adam's moments infinite while its own loss was still
finite (an enormous learning rate overflows the update); the next checkpoint would then
hold that state and be recommended for ``--resume``. The trainer checks parameters and
both moments before every save, stops, and names the last checkpoint that is finite.

A finite loss that explodes (far above guessing, or above its own recent history) is a
stop too, judged on the losses read at each record and before each save (no read from
the device per step), with the same one line and the same guarantee; resuming would
repeat the same steps, and the line says so. ``average`` refuses checkpoints of two
runs, and the API refuses to save a non-finite model.
"""

import json
import math

import numpy as np
import pytest
from task_data import TINY_RUN, run_config

from scratchformer.app.checkpoint import list_checkpoints, load_checkpoint
from scratchformer.app.cli import main as cli_main
from scratchformer.app.train import TrainConfig, Trainer, TrainingDiverged
from scratchformer.engine import backend as B


def test_an_overflowing_update_leaves_no_checkpoint(tmp_path, capsys):
    """lr_factor 1e45 is a finite setting, but the first update overflows float32: the
    loss of step 1 is finite, the state after it is not, and nothing is saved."""
    run = tmp_path / "run"
    rc = cli_main(
        ["train", *TINY_RUN, "--run-dir", str(run), "--steps", "3", "--checkpoint-every", "1"]
        + ["--set", "optim.lr_factor=1e45"]
    )
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "training stopped at step 1" in err[0] and "not finite" in err[0]
    assert "no checkpoint was written; start again (--overwrite)" in err[0]
    assert list_checkpoints(run / "checkpoints") == [] if (run / "checkpoints").exists() else True
    assert not (run / "checkpoints" / "averaged.npz").exists()


@pytest.mark.parametrize("store", ["parameter", "Adam first moment", "Adam second moment"])
def test_a_non_finite_state_is_refused_and_the_last_finite_checkpoint_named(tmp_path, store):
    d = run_config("reverse", tmp_path, steps=2, checkpoint_every=1, eval_every=100)
    d["model"] = {"preset": "tiny"}
    tr = Trainer(TrainConfig.from_dict(d), progress=False, echo=lambda *a: None)
    tr.train_step()
    good = tr.save()
    tr.train_step()
    flat = tr.stepper.optimizer.flat
    array = {
        "parameter": flat.params,
        "Adam first moment": tr.stepper.optimizer.m,
        "Adam second moment": tr.stepper.optimizer.v,
    }[store]
    name = sorted(flat.names)[3]
    flat.view(array, name)[...] = B.xp.inf
    with pytest.raises(TrainingDiverged, match=rf"{store}( of)? {name} .*{good.name}"):
        tr.save()
    assert [s for s, _ in list_checkpoints(good.parent)] == [1]
    state = load_checkpoint(good).model.state_dict()
    assert all(np.isfinite(a).all() for a in state.values())
    assert math.isfinite(float(sum(float(a.sum()) for a in state.values())))
    tr.lock.release()


# -- the decoders' numeric settings, called from Python ---------------------------------
@pytest.fixture(scope="module")
def tiny_models():
    from scratchformer.engine.models import LanguageModel, Transformer, TransformerConfig

    cfg = TransformerConfig(vocab_size=12, N=1, d_model=8, d_ff=16, h=2, max_len=16)
    return Transformer(cfg), LanguageModel(cfg)


@pytest.mark.parametrize(
    "setting, message",
    [
        ({"temperature": float("nan")},
         "temperature must be a finite number >= 0, got nan (0 is greedy)"),
        ({"temperature": float("inf")},
         "temperature must be a finite number >= 0, got inf (0 is greedy)"),
        ({"temperature": -1.0}, "temperature must be a finite number >= 0, got -1.0 (0 is greedy)"),
        ({"top_k": -1}, "top_k must be an integer >= 0, got -1 (0 keeps every token)"),
        ({"top_p": 0}, "top_p must be a number in (0, 1], got 0 (1 keeps every token)"),
        ({"seed": -1}, "seed must be an integer >= 0, got -1"),
        ({"num_samples": 0}, "num_samples must be an integer >= 1, got 0"),
        ({"num_samples": 2.0}, "num_samples must be an integer >= 1, got 2.0"),
        ({"min_new_tokens": -1}, "min_new_tokens must be a whole number >= 0, got -1"),
    ],
    ids=lambda v: str(v) if isinstance(v, dict) else "",
)
def test_sampling_settings_are_checked(tiny_models, setting, message):
    from scratchformer.engine.decode.sample import SamplingError, generate

    with pytest.raises(SamplingError) as e:
        generate(tiny_models[1], [1, 4], max_new_tokens=3, **setting)
    assert str(e.value) == message


@pytest.mark.parametrize(
    "setting, message",
    [
        ({"alpha": float("inf")}, "alpha must be a finite number >= 0, got inf"),
        ({"alpha": float("nan")}, "alpha must be a finite number >= 0, got nan"),
        ({"alpha": -0.5}, "alpha must be a finite number >= 0, got -0.5"),
        ({"beam_size": 0}, "beam_size must be an integer >= 1, got 0"),
        ({"nbest": 5}, "nbest must be an integer in [1, beam_size=4], got 5"),
        ({"max_len_a": float("nan")}, "max_len_a must be a finite number, got nan"),
        ({"max_len_b": float("inf")}, "max_len_b must be a finite number, got inf"),
        ({"min_len": -1}, "min_len must be an integer >= 0, got -1"),
        ({"no_repeat_ngram_size": -2}, "no_repeat_ngram_size must be an integer >= 0, got -2"),
    ],
    ids=lambda v: str(v) if isinstance(v, dict) else "",
)
def test_beam_settings_are_checked(tiny_models, setting, message):
    from scratchformer.engine.decode import beam_search
    from scratchformer.engine.decode.common import DecodeError

    with pytest.raises(DecodeError) as e:
        beam_search(tiny_models[0], np.array([[4, 5, 2]]), **{"beam_size": 4, **setting})
    assert str(e.value).startswith(message)


def test_a_perplexity_beyond_a_float_is_written_as_none():
    """exp(nll) of a diverged model is not clamped to a number that looks measured."""
    from scratchformer.app.train.records import perplexity
    from scratchformer.app.train.report import FORMATS

    assert perplexity(1e7) is None and perplexity(2.0) == pytest.approx(math.exp(2.0))
    assert FORMATS["ppl"][1](None) == "beyond 1e308"


@pytest.mark.parametrize("value", [1e300, 1e30, 12345.678, float("inf")])
def test_a_huge_perplexity_is_printed_in_a_few_digits(value):
    """A diverging run's perplexity (exp of a loss of 700) is a number, not 300 digits."""
    from scratchformer.app.train.report import FORMATS

    text = FORMATS["ppl"][1](value)
    assert len(text) <= 10 and float(text) == pytest.approx(value, rel=1e-2)


@pytest.mark.parametrize("factor", ["1e3", "1e6"])
def test_a_diverging_learning_rate_stops_with_finite_checkpoints_only(tmp_path, capsys, factor):
    """A finite but enormous learning rate: the run either trains (each checkpoint
    finite) or stops in one line naming the step, never saving a non-finite state."""
    run = tmp_path / "run"
    argv = ["train", *TINY_RUN, "--run-dir", str(run), "--steps", "30", "--checkpoint-every", "5"]
    rc = cli_main([*argv, "--lr-factor", factor, "--no-test"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc in (0, 2) and (rc == 0 or (len(err) == 1 and "training stopped at step" in err[0]))
    for _, path in list_checkpoints(run / "checkpoints") if (run / "checkpoints").exists() else []:
        state = load_checkpoint(path).model.state_dict()
        assert all(np.isfinite(a).all() for a in state.values())


# -- a finite loss that explodes ---------------------------------------------------------------
@pytest.mark.parametrize(
    "flags",
    [
        ["--set", "optim.schedule=constant", "--set", "optim.lr=1000"],
        ["--lr-factor", "1e9"],
    ],
    ids=["lr-1000-constant", "lr-factor-1e9"],
)
def test_an_exploding_loss_stops_the_run_before_a_checkpoint_of_it(tmp_path, capsys, flags):
    run = tmp_path / "run"
    argv = ["train", *TINY_RUN, "--run-dir", str(run), "--steps", "50", "--checkpoint-every", "1"]
    rc = cli_main([*argv, *flags])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert "training stopped at step" in err[0] and "(diverged)" in err[0]
    assert "above 12.6 (guessing uniformly among 14 outputs scores 2.64)" in err[0]
    assert "lower the learning rate" in err[0] and "continue with --resume" not in err[0]
    found = list_checkpoints(run / "checkpoints") if (run / "checkpoints").exists() else []
    step = int(err[0].split("training stopped at step ")[1].split(":")[0])  # checked every step
    assert f"training stopped at step {step}: the training loss is" in err[0]
    assert all(s < step for s, _ in found) and not (run / "checkpoints" / "averaged.npz").exists()
    for _, path in found:
        assert all(np.isfinite(a).all() for a in load_checkpoint(path).model.state_dict().values())
    # the loss of step s is the model of step s - 1: that checkpoint is never called good
    good = [p for s, p in found if s <= step - 2]
    if good:
        assert f"the last good checkpoint is {good[-1]} " in err[0]
    else:
        assert "no checkpoint was written before the divergence" in err[0]
    assert f"(checkpoint_{step - 1}.npz holds the model that diverged)" in err[0]
    last = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()][-1]
    assert last["kind"] == "error" and last["step"] == step


def test_a_divergence_after_checkpoints_names_the_last_good_one_and_repeats_on_resume(
    tmp_path, capsys
):
    """A linear warmup to a constant rate too high: checkpoints every 2 steps until the
    loss explodes; resuming the last good checkpoint repeats the same steps and stops at
    the same step with the same line (so the line says to change the learning rate)."""
    run = tmp_path / "run"
    argv = ["train", *TINY_RUN, "--run-dir", str(run), "--steps", "60", "--no-test"]
    argv += ["--checkpoint-every", "2", "--log-every", "2", "--set", "optim.schedule=constant"]
    argv += ["--set", "optim.lr=8", "--set", "optim.warmup=200"]
    assert cli_main(argv) == 2
    first = capsys.readouterr().err.strip().splitlines()
    assert len(first) == 1 and "(diverged)" in first[0], first
    kept = list_checkpoints(run / "checkpoints")
    assert kept and f"the last good checkpoint is {kept[-1][1]}" in first[0]
    assert "resuming it repeats these steps exactly" in first[0]
    assert cli_main([*argv, "--resume"]) == 2
    again = capsys.readouterr().err.strip().splitlines()
    assert again == first
    assert list_checkpoints(run / "checkpoints") == kept


def test_a_checkpoint_of_the_model_whose_loss_diverged_is_never_called_good(tmp_path, capsys):
    """The loss of step s is computed with the model of step s - 1. A checkpoint of step s
    - 1 (saved while every loss read was sound) holds the model that diverged: the line
    names the one before as the last good checkpoint, and names that one as diverged."""
    run = tmp_path / "run"
    argv = ["train", *TINY_RUN, "--run-dir", str(run), "--steps", "60", "--no-test"]
    argv += ["--checkpoint-every", "1", "--log-every", "1", "--set", "optim.schedule=constant"]
    argv += ["--set", "optim.lr=8", "--set", "optim.warmup=200"]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "(diverged)" in err[0], err
    step = int(err[0].split("training stopped at step ")[1].split(":")[0])
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    losses = {r["step"]: r["loss"] for r in records if r["kind"] == "train"}
    assert losses[step - 1] < 12.6  # sound when checkpoint step - 1 was saved
    kept = dict(list_checkpoints(run / "checkpoints"))
    assert step - 1 in kept and step - 2 in kept
    named = f"the last good checkpoint is {kept[step - 2]} (checkpoint_{step - 1}.npz holds"
    assert named in err[0]


def test_a_divergence_read_at_a_later_record_names_both_steps(tmp_path, capsys):
    """Losses are read every log_every steps: the run stops at the record after the
    divergence, naming the step it began and the step it stopped, no checkpoint between."""
    run = tmp_path / "run"
    argv = ["train", *TINY_RUN, "--run-dir", str(run), "--steps", "50", "--log-every", "10"]
    assert cli_main([*argv, "--lr-factor", "1e9"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "scratchformer train: error: training stopped at step 10: at step 2, the training loss"
    ), err
    assert not (run / "checkpoints").exists() or list_checkpoints(run / "checkpoints") == []


def test_a_spike_that_recovers_stops_nothing_and_a_lasting_one_does():
    from scratchformer.app.train.records import Divergence

    d = Divergence(outputs=100)  # uniform: log 100 = 4.6, limit 14.6
    assert [d.check(s, 1.0) for s in range(30)] == [""] * 30
    assert d.check(30, 9.0) == d.check(31, 9.0) == ""  # two steps above 4.6 and 4 x 1.0
    assert d.check(32, 1.1) == ""  # recovered: the count starts again
    assert d.check(33, 9.0) == d.check(34, 9.0) == ""
    assert "for 3 steps, worse than guessing uniformly" in d.check(35, 9.0)
    assert d.first == 33  # the step it began: the model of step 32 is the last good one
    assert "above 14.6" in d.check(36, 15.0) and d.first == 36
    assert "above 14.6" in Divergence(outputs=100).check(1, 15.0)  # at once, any history
    assert Divergence(outputs=100).check(1, 14.0) == ""  # a fresh model near log 100


def test_the_api_refuses_to_save_a_non_finite_model(tmp_path):
    from scratchformer.app.checkpoint import CheckpointError, save_checkpoint
    from scratchformer.engine.models import Transformer, TransformerConfig

    model = Transformer(TransformerConfig.preset("tiny", vocab_size=13))
    model.parameters()["embed.E"][3, 2] = np.nan
    with pytest.raises(CheckpointError, match="'model/embed.E' holds non-finite values"):
        save_checkpoint(tmp_path / "c.npz", model)
    assert list(tmp_path.iterdir()) == []


def test_average_refuses_checkpoints_of_two_runs(tmp_path, capsys):
    """Two reverse runs with other seeds: the same shapes, task and tokenizer."""
    paths = []
    for seed in ("1", "2"):
        run = tmp_path / f"run{seed}"
        assert cli_main(["train", *TINY_RUN, "--run-dir", str(run), "--steps", "2", "--no-test"]
                        + ["--seed", seed]) == 0
        paths.append(str(run / "checkpoints" / "checkpoint_2.npz"))
    capsys.readouterr()
    assert cli_main(["average", *paths, "-o", str(tmp_path / "avg.npz")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "their seeds differ (model: 2 against 1, run: 2 against 1)" in err[0]
    assert not (tmp_path / "avg.npz").exists()
