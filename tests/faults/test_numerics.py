"""Numerical faults: no checkpoint is ever written of a non-finite state.

A step can leave parameters or Adam's moments infinite while its own loss was still
finite (an enormous learning rate overflows the update); the next checkpoint would then
hold that state and be recommended for ``--resume``. The trainer checks parameters and
both moments before every save, stops, and names the last checkpoint that is finite.
"""

import math

import numpy as np
import pytest
from task_data import TINY_RUN, run_config

from scratchformer import backend as B
from scratchformer.checkpoint import list_checkpoints, load_checkpoint
from scratchformer.cli import main as cli_main
from scratchformer.train import TrainConfig, Trainer, TrainingDiverged


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
    assert "no checkpoint was written yet" in err[0]
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
    flat = tr.optimizer.flat
    array = {
        "parameter": flat.params,
        "Adam first moment": tr.optimizer.m,
        "Adam second moment": tr.optimizer.v,
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
    from scratchformer.models import LanguageModel, Transformer, TransformerConfig

    cfg = TransformerConfig(vocab_size=12, N=1, d_model=8, d_ff=16, h=2, max_len=16)
    return Transformer(cfg), LanguageModel(cfg)


@pytest.mark.parametrize(
    "setting, message",
    [
        ({"temperature": float("nan")}, "temperature must be a finite number >= 0, got nan"),
        ({"temperature": float("inf")}, "temperature must be a finite number >= 0, got inf"),
        ({"temperature": -1.0}, "temperature must be a finite number >= 0, got -1.0"),
        ({"top_k": -1}, "top_k must be a whole number >= 0, got -1"),
        ({"seed": -1}, "seed must be a whole number >= 0, got -1"),
        ({"num_samples": 0}, "num_samples must be a whole number >= 1, got 0"),
        ({"num_samples": 2.0}, "num_samples must be a whole number >= 1, got 2.0"),
    ],
    ids=lambda v: str(v) if isinstance(v, dict) else "",
)
def test_sampling_settings_are_checked(tiny_models, setting, message):
    from scratchformer.decode.sample import SamplingError, generate

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
    from scratchformer.decode import beam_search
    from scratchformer.decode.common import DecodeError

    with pytest.raises(DecodeError) as e:
        beam_search(tiny_models[0], np.array([[4, 5, 2]]), **{"beam_size": 4, **setting})
    assert str(e.value).startswith(message)


@pytest.mark.parametrize("value", [1e300, 1e30, 12345.678, float("inf")])
def test_a_huge_perplexity_is_printed_in_a_few_digits(value):
    """A diverging run's perplexity (exp of a loss of 700) is a number, not 300 digits."""
    from scratchformer.train.report import FORMATS

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
