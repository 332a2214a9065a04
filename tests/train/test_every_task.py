"""One loop for every task: the same command shape and output, gradient accumulation,
the time limit and exact resume for reverse, translate, lm and classify alike; a flag
that does not apply to the task is refused in one line."""

import json

import numpy as np
import pytest
from task_data import TASK_NAMES, run_config, write_toml

from scratchformer.app.checkpoint import list_checkpoints, load_checkpoint
from scratchformer.app.cli import main
from scratchformer.app.train import TrainConfig, Trainer, accumulate_gradients, train
from scratchformer.engine import backend as B


def quiet(*a, **k):
    pass


@pytest.fixture(params=TASK_NAMES)
def task(request):
    if request.param == "translate":
        pytest.importorskip("sentencepiece")
    return request.param


def cfg_of(task, root, **train_overrides) -> TrainConfig:
    return TrainConfig.from_dict(run_config(task, root, **train_overrides))


def test_accumulation_takes_the_step_of_one_batch_of_the_union(task, tmp_path, f64):
    """Two micro-batches leave the gradient of the mean loss over their union: the
    gradient one batch of both gives (float64, dropout off)."""
    d = run_config(task, tmp_path, accum_steps=2, max_tokens=64)
    d["model"]["P_drop"] = 0.0
    tr = Trainer(TrainConfig.from_dict(d), progress=False, echo=quiet)
    b1, b2 = tr.sampler.epoch(0)[:2]
    micro = [tr.task.batch("train", b1), tr.task.batch("train", b2)]
    loss_k, _, n_k, _ = accumulate_gradients(tr.model, micro)
    grads_k = {k: B.asnumpy(g).copy() for k, g in tr.model.gradients().items()}
    union = tr.task.batch("train", np.concatenate([b1, b2]))
    loss_1, _, n_1, _ = accumulate_gradients(tr.model, [union])
    assert n_k == n_1 and loss_k == pytest.approx(loss_1, rel=1e-12)
    for k, g in tr.model.gradients().items():
        np.testing.assert_allclose(grads_k[k], B.asnumpy(g), rtol=1e-9, atol=1e-12, err_msg=k)
    rec = tr.train_step()  # the loop's step uses both micro-batches
    assert tr.batch_index == 2 and tr.stepper.optimizer.t == 1
    assert rec["loss"] == pytest.approx(loss_1, rel=1e-12)


def _records(run_dir, kind="train"):
    recs = map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
    keys = ("step", "loss", "lr", "grad_norm") if kind == "train" else ("step", "loss")
    return [tuple(r[k] for k in keys) for r in recs if r["kind"] == kind]


def _same_checkpoints(a, b):
    a, b = load_checkpoint(a), load_checkpoint(b)
    for k, v in a.model.state_dict().items():
        np.testing.assert_array_equal(v, b.model.state_dict()[k], err_msg=k)
    for moment in ("m", "v"):
        for k, v in a.optimizer_state[moment].items():
            np.testing.assert_array_equal(v, b.optimizer_state[moment][k], err_msg=k)
    wall = {"seconds"}
    assert {k: v for k, v in a.train_state.items() if k not in wall} == {
        k: v for k, v in b.train_state.items() if k not in wall
    }


def test_resume_continues_bit_for_bit(task, tmp_path):
    """3 steps, then --resume to 6 (with accumulation, across epochs for the small data
    sets) gives the losses, parameters, Adam moments, data position and validation
    records of 6 steps in one go."""
    kw = {"accum_steps": 2, "log_every": 3}
    full = train(cfg_of(task, tmp_path / "a", **kw), progress=False, echo=quiet, final_eval=False)
    train(cfg_of(task, tmp_path / "b", **kw, steps=3), progress=False, echo=quiet, final_eval=False)
    rest = train(
        cfg_of(task, tmp_path / "b", **kw),
        resume="latest",
        progress=False,
        echo=quiet,
        final_eval=False,
    )
    assert [s for s, _ in rest.losses] == [4, 5, 6]
    assert full.losses[3:] == rest.losses
    _same_checkpoints(full.checkpoint, rest.checkpoint)
    for kind in ("train", "valid"):
        assert _records(tmp_path / "a/run", kind) == _records(tmp_path / "b/run", kind)


def test_time_limit_stops_early_and_resume_finishes_the_same_run(task, tmp_path):
    """A run past its time limit stops after the step that passed it, validated and
    checkpointed; --resume (with the limit lifted) ends where an uninterrupted run does."""
    full = train(cfg_of(task, tmp_path / "a"), progress=False, echo=quiet, final_eval=False)
    lines = []
    cut = train(
        cfg_of(task, tmp_path / "b", time_limit=1e-9),
        progress=False,
        echo=lines.append,
        final_eval=False,
    )
    assert cut.step == 1 and "time limit" in cut.stopped
    assert [s for s, _ in list_checkpoints(tmp_path / "b/run/checkpoints")] == [1]
    assert [r[0] for r in _records(tmp_path / "b/run", "valid")] == [1]
    rest = train(
        cfg_of(task, tmp_path / "b"), resume="latest", progress=False, echo=quiet, final_eval=False
    )
    assert cut.losses + rest.losses == full.losses
    _same_checkpoints(full.checkpoint, rest.checkpoint)


def _write(tmp_path, task) -> str:
    """A TOML file of the task's few-step config."""
    return str(write_toml(run_config(task, tmp_path), tmp_path / f"{task}.toml"))


def test_every_task_runs_from_the_same_command_with_the_same_output(task, tmp_path, capsys):
    """``scratchformer train --config <file>`` for every task: a header of three lines,
    a log line per log_every steps and a line per validation, the test set, and a
    summary naming every file written."""
    assert main(["train", "--config", _write(tmp_path, task), "--no-progress"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"training {task}: task {task}, ")
    assert out[1].startswith("model: ") and " parameters (N=1, d_model=16, h=2, " in out[1]
    assert out[2].startswith("plan: 6 steps of <= 128 tokens")
    steps = [line for line in out if line.startswith("step ")]
    assert [line.split(" | ")[0] for line in steps] == [
        "step 2/6",
        "step 3/6",
        "step 4/6",
        "step 6/6",
        "step 6/6",
    ]
    trained = [line for line in steps if " | dev | " not in line]
    assert all(" | loss " in line and " tok/s | " in line for line in trained)
    assert [line for line in steps if " | dev | " in line][0].startswith("step 3/6 | dev | loss")
    assert any(line.startswith("test set: ") for line in out)
    # checkpoints at steps 3 and 6: only step 6 lies in the last 20% of the run, so
    # there is nothing to average, the last checkpoint is the final model, and the line
    # says why; its score is named as the run's dev lines name it (nll beside a smoothed
    # loss; the loss itself when it is not smoothed: the classifier's and the LM's)
    dev = [line for line in steps if " | dev | " in line]
    name = "nll" if all(" | nll " in line for line in dev) else "loss"
    assert name == ("loss" if task in ("lm", "classify") else "nll")
    # the candidates: the last checkpoint and the best by dev nll (best.npz, of step 3
    # when it validated better than step 6, else the last checkpoint itself)
    ending = [line for line in out if line.startswith("final model: ")]
    assert len(ending) == 1
    best_3 = ending[0].startswith(f"final model: the best checkpoint by dev {name}, of step 3 (")
    assert best_3 or ending[0].startswith(f"final model: the last checkpoint (dev {name} ")
    assert ending[0].endswith(
        "; no average: the average takes the checkpoints of the last 20% of the steps (after "
        "step 4), and only step 6's was saved there: save more often (--checkpoint-every) to "
        "have one"
    )
    final = f"  best by dev {name} (step 3): " if best_3 else "  last checkpoint (step 6): "
    assert any(line.startswith(final) and line.endswith("<- the final model") for line in out)
    assert any(line.startswith("  last checkpoint (step 6): ") for line in out)
    assert not any(line.startswith("  average of ") for line in out)
    assert any(line.startswith("done: step 6, 6 steps in ") for line in out)
    files = out[out.index(f"files in {tmp_path / 'run'}:") :]
    for name in (
        "config.json",
        "metrics.jsonl",
        "checkpoint_3.npz ... checkpoint_6.npz",
        "final.npz     the final model: the "
        + ("best checkpoint" if best_3 else "last checkpoint"),
        f"checkpoints/best.npz  the best model by dev nll (step {3 if best_3 else 6})",
    ):
        assert any(name in line for line in files), name
    for f in ("config.json", "metrics.jsonl", "checkpoints/final.npz"):
        assert (tmp_path / "run" / f).is_file()


@pytest.mark.parametrize(
    "task, argv, message",
    [
        (
            "reverse",
            ["--data-dir", "x"],
            "task.data_dir (from --data-dir) does not apply to task reverse",
        ),
        ("lm", ["--decode", "greedy"], "task.decode (from --decode) does not apply to task lm"),
        (
            "classify",
            ["--set", "task.temperature=1.0"],
            "task.temperature (from --set task.temperature=1.0) does not apply",
        ),
        (
            "translate",
            ["--set", "task.symbols=3"],
            "task.symbols (from --set task.symbols=3) does not apply to task translate",
        ),
    ],
)
def test_a_flag_that_does_not_apply_is_refused_in_one_line(tmp_path, capsys, task, argv, message):
    run = ["--run-dir", str(tmp_path / "run")]
    assert main(["train", "--task", task, *run, *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()  # refused before anything was written
