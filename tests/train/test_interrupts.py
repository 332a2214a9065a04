"""Ctrl-C and SIGTERM end a run of one process cleanly (scratchformer/app/train/interrupts.py).

- The first signal while the steps run: the step in flight finishes with what its end
  writes anyway, is checkpointed, and the command exits 130 (143 for SIGTERM), its lock
  released, saying what ``--resume`` will do; ``--resume`` then ends exactly where a run
  never stopped ends (parameters, Adam's moments, position, records).
- A second signal stops at once: a checkpoint being written leaves no temporary file.
- Before the first step and while the test set is judged, the first signal stops at once,
  and the message says what is saved and what ``--resume`` does.

The signals are real (``os.kill`` of this process), sent from inside the run at a chosen
point so that the tests are exact; the processes of several ranks are tested in
tests/distributed/test_endings.py.
"""

import json
import os
import signal
import threading

import pytest
from fault_hooks import hook_saves
from mpi_jobs import assert_same_state, records, state
from task_data import run_config, write_toml

from scratchformer.app.checkpoint import list_checkpoints
from scratchformer.app.cli import main as cli_main
from scratchformer.app.train import loop
from scratchformer.app.train.rundir import RunLock

PREFIX = "scratchformer train: "


@pytest.fixture(autouse=True)
def ctrl_c_raises():
    """Python's own handler of SIGINT (KeyboardInterrupt), as in a terminal: a process
    started in the background by a shell inherits SIGINT ignored, and keeps it so."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def config(root, steps: int, **train):
    """A tiny reverse run in ``root/run``: a checkpoint every 5 steps, a record every step,
    a validation every 4."""
    root.mkdir(parents=True, exist_ok=True)
    d = run_config("reverse", root, steps=steps, checkpoint_every=5, log_every=1, eval_every=4)
    d["train"].update({"keep_checkpoints": 0, "average_last": 2, "test": False, **train})
    return write_toml(d, root / "reverse.toml")


def train(cfg, capfd, *extra) -> tuple[int, str]:
    """``scratchformer train --config cfg --no-progress EXTRA``: (exit code, stderr)."""
    code = cli_main(["train", "--config", str(cfg), "--no-progress", *map(str, extra)])
    return code, capfd.readouterr().err


def signal_after_step(monkeypatch, step: int, signum=signal.SIGINT, then=None):
    """Send ``signum`` to this process while step ``step`` runs (its gradients done);
    ``then``: a second signal that many seconds later, from another thread."""
    real = loop.Trainer.train_step

    def train_step(self):
        rec = real(self)
        if self.step == step:
            os.kill(os.getpid(), signum)
            if then is not None:
                threading.Timer(then, os.kill, (os.getpid(), signum)).start()
        return rec

    monkeypatch.setattr(loop.Trainer, "train_step", train_step)


def assert_released(run):
    """No name in the lock file, and the lock free: another run may take it."""
    assert (run / ".lock").read_text() == ""
    RunLock(run).acquire().release()


def steps_saved(run) -> list[int]:
    return [s for s, _ in list_checkpoints(run / "checkpoints")]


def test_ctrl_c_finishes_the_step_saves_it_and_resume_continues_exactly(
    tmp_path, capfd, monkeypatch
):
    cfg = config(tmp_path / "a", steps=12)
    run = tmp_path / "a" / "run"
    with monkeypatch.context() as m:
        signal_after_step(m, 7)
        code, err = train(cfg, capfd)
    assert code == 130, err
    ckpt = run / "checkpoints" / "checkpoint_7.npz"
    assert err.splitlines()[-1] == (
        f"{PREFIX}stopped by Ctrl-C after step 7, saved: `scratchformer train --run-dir "
        f"{run} --resume` continues from {ckpt}"
    )
    assert "Ctrl-C: stopping after the step in flight, which is saved" in err
    assert "Traceback" not in err
    assert steps_saved(run) == [5, 7]
    assert [r["step"] for r in records(run / "metrics.jsonl") if r["kind"] == "train"] == list(
        range(1, 8)
    )
    assert_released(run)

    code, err = train(cfg, capfd, "--resume")
    assert code == 0, err
    straight = tmp_path / "b"
    code, err = train(config(straight, steps=12), capfd)
    assert code == 0, err
    final = [r / "checkpoints" / "checkpoint_12.npz" for r in (run, straight / "run")]
    assert_same_state(state(final[0]), state(final[1]))
    assert records(run / "metrics.jsonl") == records(straight / "run" / "metrics.jsonl")


def test_sigterm_ends_the_run_as_ctrl_c_does_with_its_own_code(tmp_path, capfd, monkeypatch):
    cfg = config(tmp_path, steps=12)
    signal_after_step(monkeypatch, 3, signal.SIGTERM)
    code, err = train(cfg, capfd)
    assert code == 143, err
    assert err.splitlines()[-1].startswith(f"{PREFIX}stopped by SIGTERM after step 3, saved: ")
    assert steps_saved(tmp_path / "run") == [3]
    assert_released(tmp_path / "run")


def test_a_second_ctrl_c_stops_at_once_and_leaves_no_partial_file(tmp_path, capfd, monkeypatch):
    """The second Ctrl-C arrives while the checkpoint of the first is written (the save's
    fault of tests/fault_hooks.py holds it there, its temporary file open)."""
    cfg = config(tmp_path, steps=12)
    run = tmp_path / "run"
    hook_saves("before-write:checkpoint_7.npz", monkeypatch.setattr)
    signal_after_step(monkeypatch, 7, then=1.0)
    code, err = train(cfg, capfd)
    assert code == 130, err
    assert err.splitlines()[-1] == (
        f"{PREFIX}stopped at once by a second Ctrl-C after step 7; `scratchformer train "
        f"--run-dir {run} --resume` continues from {run / 'checkpoints' / 'checkpoint_5.npz'}"
    )
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert names in (["checkpoint_5.npz"], ["best.npz", "checkpoint_5.npz"])  # of step 4
    assert_released(run)


def test_ctrl_c_before_the_first_checkpoint_says_there_is_nothing_to_resume(
    tmp_path, capfd, monkeypatch
):
    """A second Ctrl-C during the first save: nothing is saved, and the message says how
    to start again (the directory holds the run's config.json and log)."""
    cfg = config(tmp_path, steps=12)
    hook_saves("before-write:checkpoint_2.npz", monkeypatch.setattr)
    signal_after_step(monkeypatch, 2, then=1.0)
    code, err = train(cfg, capfd)
    assert code == 130, err
    assert err.splitlines()[-1] == (
        f"{PREFIX}stopped at once by a second Ctrl-C after step 2; nothing to resume (no "
        "checkpoint was written): start again with --overwrite"
    )
    assert list((tmp_path / "run" / "checkpoints").iterdir()) == []
    assert_released(tmp_path / "run")


def test_ctrl_c_before_training_stops_at_once(tmp_path, capfd, monkeypatch):
    cfg = config(tmp_path, steps=12)

    def interrupted(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(loop.TokenBatchSampler, "__init__", interrupted)
    code, err = train(cfg, capfd)
    assert code == 130, err
    assert err.splitlines() == [
        f"{PREFIX}stopped by Ctrl-C before training began; nothing to resume (no checkpoint "
        "was written): start it again"
    ]
    assert not (tmp_path / "run" / "config.json").exists()


def test_ctrl_c_while_the_test_set_is_judged_keeps_the_training(tmp_path, capfd, monkeypatch):
    """Training is done and saved; the test set is not judged, and --resume judges it."""
    cfg = config(tmp_path, steps=6, test=True)
    run = tmp_path / "run"
    real = loop.final.final_evaluation

    def final_evaluation(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        return real(*args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(loop.final, "final_evaluation", final_evaluation)
        code, err = train(cfg, capfd)
    assert code == 130, err
    assert err.splitlines()[-1] == (
        f"{PREFIX}stopped by Ctrl-C after training (step 6, saved): the test set was not "
        f"judged; `scratchformer train --run-dir {run} --resume` continues from "
        f"{run / 'checkpoints' / 'checkpoint_6.npz'} and judges it"
    )
    assert_released(run)
    code, err = train(cfg, capfd, "--resume")
    assert code == 0, err
    kinds = [json.loads(line)["kind"] for line in open(run / "metrics.jsonl")]
    assert kinds.count("test") == 2  # the last checkpoint and the average


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_outside_a_run_a_signal_ends_a_command_in_one_line(signum, capfd, monkeypatch):
    """gradcheck, say: stopped where it is, exit 128 + the signal's number."""
    from scratchformer.app.commands import gradcheck

    def check(args):
        os.kill(os.getpid(), signum)

    monkeypatch.setattr(gradcheck, "run", check)  # the parser is built after: it takes this
    assert cli_main(["gradcheck"]) == 128 + signum
    name = "Ctrl-C" if signum == signal.SIGINT else "SIGTERM"
    assert capfd.readouterr().err.splitlines() == [f"scratchformer gradcheck: stopped by {name}"]
