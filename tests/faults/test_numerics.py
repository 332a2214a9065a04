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
    arrays = {
        "parameter": tr.model.parameters(),
        "Adam first moment": tr.optimizer.m,
        "Adam second moment": tr.optimizer.v,
    }[store]
    name = sorted(arrays)[3]
    arrays[name][...] = B.xp.inf
    with pytest.raises(TrainingDiverged, match=rf"{store} arrays \({name}.*{good.name}"):
        tr.save()
    assert [s for s, _ in list_checkpoints(good.parent)] == [1]
    state = load_checkpoint(good).model.state_dict()
    assert all(np.isfinite(a).all() for a in state.values())
    assert math.isfinite(float(sum(float(a.sum()) for a in state.values())))
    tr.lock.release()
