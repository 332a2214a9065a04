"""Faults of data-parallel training: no rank is ever left waiting, errors are told in one
line, and a killed job resumes exactly.

- A rank killed with SIGKILL while training (rank 1, or rank 0, the one that writes)
  ends the whole job within seconds, with a non-zero exit (mpiexec reports the kill in
  its own words); ``--resume`` with the same number of processes then ends bit for bit
  where an uninterrupted 2-rank run ends (the last checkpoint's parameters, Adam's
  moments and position, the averaged model, the checkpoints kept, and the metrics log's
  train and validation records, timings aside). Another number of processes is refused
  in one line, either way round.
- A rank that fails (a fault of tests/fault_hooks.py, ``rank="<rank>:<n>"``, makes it
  raise at its n-th gradient sum) prints one line naming itself, on a line of its own
  while rank 0 draws its progress bar, and ends the job (MPI_Abort); an error every
  rank meets (a bad ``--set``) is told once, by rank 0.
- Without mpiexec or mpi4py, ``--ranks 2`` and a process started by an MPI launcher
  say in one line what to install.

The tests that start mpiexec are slow (``-m slow``) and skip, with the reason, only where
mpiexec or mpi4py are missing or mpiexec cannot start two processes.

    python -m pytest -m slow -s tests/faults/test_distributed.py
"""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fault_hooks import faults_env
from mpi_jobs import (
    END_LIMIT,
    ENV,
    PREFIX,
    RUN_LIMIT,
    Job,
    alive,
    assert_same_state,
    last_step,
    records,
    state,
)
from task_data import TINY_RUN, run_config, write_toml

from scratchformer.app import distributed
from scratchformer.app.checkpoint import latest_checkpoint, list_checkpoints, load_checkpoint


def config(root: Path, steps: int) -> Path:
    """A tiny reverse run in ``root/run``: a checkpoint every 5 steps, a train record
    every step, a validation every 4 (so that records and checkpoints do not coincide)."""
    root.mkdir(parents=True, exist_ok=True)
    d = run_config("reverse", root, steps=steps, checkpoint_every=5, log_every=1, eval_every=4)
    d["train"].update(keep_checkpoints=3, average_last=2, test=False)
    return write_toml(d, root / "reverse.toml")


@pytest.mark.slow
@pytest.mark.parametrize("victim", [1, 0])
def test_a_killed_rank_ends_the_job_and_resume_continues_exactly(mpi, tmp_path, victim):
    """SIGKILL to one rank's process while training (rank 1, or rank 0, the writer)."""
    killed = tmp_path / "killed"
    cfg = config(killed, steps=100_000)  # never ends by itself
    job = Job(killed, "--config", cfg)
    killed_pid, other = job.rank_pid(victim), job.rank_pid(1 - victim)
    deadline = time.monotonic() + RUN_LIMIT
    while last_step(killed / "run" / "metrics.jsonl") < 8:  # after the checkpoint of step 5
        if job.p.poll() is not None or time.monotonic() > deadline:
            job.stop()
            pytest.fail(f"no step 8 within {RUN_LIMIT} s:\n{job.output()}")
        time.sleep(0.01)
    os.kill(killed_pid, signal.SIGKILL)
    ended = job.wait(END_LIMIT)
    gone = time.monotonic()
    while alive(other) and time.monotonic() - gone < 5:
        time.sleep(0.01)
    print(f"\njob ended {ended:.2f} s after rank {victim} was killed, exit {job.p.returncode}")
    print(job.output())
    assert job.p.returncode != 0, job.output()
    assert not alive(other), f"rank {1 - victim} outlived the job"
    assert ended < END_LIMIT

    ckpt = latest_checkpoint(killed / "run" / "checkpoints")
    assert ckpt is not None, job.output()
    resumed_at = load_checkpoint(ckpt).train_state["step"]
    steps = resumed_at + 7  # on past the next checkpoint and validation

    # another number of processes is refused in one line, leaving the run as it was
    one = [sys.executable, "-m", "scratchformer", "train", "--config", str(cfg), "--resume"]
    p = subprocess.run(one, capture_output=True, text=True, env=ENV, timeout=RUN_LIMIT)
    print(p.stderr)
    assert p.returncode == 2 and p.stderr.splitlines() == [
        f"{PREFIX}: error: {ckpt} was written by a run of 2 processes and this one has 1: "
        "resume it with the same number (mpiexec -n 2), as each process draws its own "
        "dropout masks"
    ]
    assert latest_checkpoint(killed / "run" / "checkpoints") == ckpt

    resumed = Job(killed, "--config", cfg, "--resume", "--steps", steps)
    straight = tmp_path / "straight"
    whole = Job(straight, "--config", config(straight, steps=steps))
    for j in (resumed, whole):
        j.wait(RUN_LIMIT)
        assert j.p.returncode == 0, j.output()
    assert f"resuming reverse at step {resumed_at}" in resumed.out.read_text()

    final = [
        run / "checkpoints" / f"checkpoint_{steps}.npz"
        for run in (killed / "run", straight / "run")
    ]
    assert_same_state(state(final[0]), state(final[1]))
    got, want = (records(run / "metrics.jsonl") for run in (killed / "run", straight / "run"))
    assert [r["step"] for r in got if r["kind"] == "train"] == list(range(1, steps + 1))
    assert got == want
    kept = [
        [s for s, _ in list_checkpoints(run / "checkpoints")]
        for run in (killed / "run", straight / "run")
    ]
    assert kept[0] == kept[1]
    averaged = [
        load_checkpoint(run / "checkpoints" / "averaged.npz").model.state_dict()
        for run in (killed / "run", straight / "run")
    ]
    assert_same_state(*averaged)


def assert_told_once(job, line: str) -> None:
    """The job failed, and its only line of ours on stderr is ``line`` (no traceback)."""
    ours = [ln for ln in job.stderr_lines() if ln.startswith(PREFIX)]
    assert ours == [line], job.output()
    assert job.p.returncode != 0
    assert "Traceback" not in job.output()


@pytest.mark.slow
def test_a_run_of_one_process_is_not_resumed_by_two(mpi, tiny_checkpoint, tmp_path):
    ckpt = tmp_path / "checkpoint_2.npz"
    shutil.copy(tiny_checkpoint, ckpt)
    job = Job(tmp_path, "--resume", ckpt, "--run-dir", tmp_path / "run", "--steps", 4)
    took = job.wait(END_LIMIT)
    print(f"\nrefused in {took:.2f} s, exit {job.p.returncode}\n{job.output()}")
    assert_told_once(
        job,
        f"{PREFIX} (rank 0 of 2): error: {ckpt} was written by a run of 1 process and this "
        "one has 2: resume it with the same number (one process), as each process draws "
        "its own dropout masks",
    )


@pytest.mark.slow
def test_a_failing_rank_names_itself_and_ends_the_job(mpi, tmp_path):
    cfg = config(tmp_path, steps=100_000)
    job = Job(tmp_path, "--config", cfg, env=faults_env(ENV, rank="1:6"))
    took = job.wait(RUN_LIMIT)
    print(f"\njob ended {took:.2f} s after its start, exit {job.p.returncode}\n{job.output()}")
    # a line of its own: not after the progress bar that rank 0 draws (no --no-progress)
    assert_told_once(
        job,
        f"{PREFIX} (rank 1 of 2): error: fault injected at gradient sum 6 "
        "(SCRATCHFORMER_FAULT_RANK=1:6)",
    )
    assert last_step(tmp_path / "run" / "metrics.jsonl") == 5  # rank 0 waited at step 6


@pytest.mark.slow
def test_an_error_every_rank_meets_is_told_once_by_rank_0(mpi, tmp_path):
    job = Job(tmp_path, *TINY_RUN, "--run-dir", tmp_path / "run", "--set", "train.steps=abc")
    took = job.wait(END_LIMIT)
    print(f"\njob ended {took:.2f} s after its start, exit {job.p.returncode}\n{job.output()}")
    assert_told_once(
        job,
        f"{PREFIX} (rank 0 of 2): error: train.steps must be a whole number, got 'abc' "
        "(from --set train.steps=abc)",
    )
    assert job.output().count("must be a whole number") == 1
    assert not (tmp_path / "run").exists()


# -- without MPI ---------------------------------------------------------------------------
def test_ranks_without_mpiexec_name_the_extra(monkeypatch, refused):
    monkeypatch.setattr(distributed, "find_mpiexec", lambda: None)
    line = refused(["train", "--ranks", "2"], "2 processes need mpiexec", distributed.EXTRA)
    assert line.startswith(f"{PREFIX}: error: ")


def test_ranks_without_mpi4py_name_the_extra(monkeypatch, refused):
    monkeypatch.setattr(distributed, "find_mpiexec", lambda: "/usr/bin/mpiexec")
    monkeypatch.setattr(distributed, "missing_mpi4py", lambda: True)
    line = refused(["train", "--ranks", "2"], "2 processes need mpi4py", distributed.EXTRA)
    assert line.startswith(f"{PREFIX}: error: ")


#: a process that cannot import mpi4py, then the command line with sys.argv[1:]
BLOCK_MPI4PY = """
import sys

class NoMPI:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "mpi4py":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, NoMPI())
from scratchformer.app.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_launched_process_without_mpi4py_names_the_extra(tmp_path):
    argv = ["train", *TINY_RUN, "--run-dir", str(tmp_path / "run"), "--steps", "2"]
    env = {**ENV, "PMI_SIZE": "2", "PMI_RANK": "1"}
    p = subprocess.run(
        [sys.executable, "-c", BLOCK_MPI4PY, *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=RUN_LIMIT,
    )
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert lines == [
        f"{PREFIX} (rank 1 of 2): error: started by an MPI launcher with 2 processes, but "
        f"mpi4py is not installed: {distributed.EXTRA}"
    ]
    assert not (tmp_path / "run").exists()  # refused before anything was read or written


def test_ranks_other_than_the_launchers_are_refused(monkeypatch, refused):
    monkeypatch.setenv("PMI_SIZE", "3")
    refused(["train", "--ranks", "2"], "--ranks 2, but the MPI launcher started 3 processes")
