"""Every ending of a 2-rank run, started by ``--ranks 2`` and by ``mpiexec -n 2``: the
ranks agree on what exists before anyone reads it, the test set is judged, the lock is
released and no rank is left running.

- steps below, at and above the checkpoint interval (2, 5, 12 with a checkpoint every 5),
  and a time limit: exit 0, the test set judged by the last checkpoint and the average;
- Ctrl-C (SIGINT to the launching process, as a terminal sends it): every rank finishes
  the step in flight, rank 0 saves it, exit 130, and ``--resume`` ends exactly where a
  run never stopped ends; SIGTERM: the same, exit 143;
- a second Ctrl-C, while rank 0 writes the checkpoint of the first: stops at once, exit
  130, no temporary file left;
- the test set's decoding shared by the ranks: the records one process gives;
- a failing rank (made to fail by tests/fault_hooks.py), rank 1 or rank 0: the
  job ends, the lock is released by whichever rank ends it.

Slow (mpiexec starts in about 2 s); skipped, with the reason, where two processes cannot
start.

    python -m pytest -m slow -s tests/distributed/test_endings.py
"""

import json
import signal
import time

import pytest
from fault_hooks import faults_env
from mpi_jobs import (
    END_LIMIT,
    ENV,
    RUN_LIMIT,
    Job,
    alive,
    assert_same_state,
    last_step,
    records,
    state,
)
from task_data import run_config, write_toml

from scratchformer.app.checkpoint import list_checkpoints, load_checkpoint
from scratchformer.app.train import TrainConfig
from scratchformer.app.train.final import averaging_window
from scratchformer.app.train.rundir import RunLock
from scratchformer.app.train.tasks import TASKS

pytestmark = pytest.mark.slow
PREFIX = "scratchformer train: "  # rank 0 speaks for the run


def config(root, steps: int, **train):
    """A tiny reverse run in ``root/run``: a checkpoint every 5 steps, a record every step,
    a validation every 4, the test set judged at the end (8 examples)."""
    root.mkdir(parents=True, exist_ok=True)
    d = run_config("reverse", root, steps=steps, checkpoint_every=5, log_every=1, eval_every=4)
    d["train"].update({"keep_checkpoints": 0, "average_last": 2, **train})
    return write_toml(d, root / "reverse.toml")


def start(root, launcher: str, mpiexec: str, *args, env=None) -> Job:
    return Job(root, *args, env=env, mpiexec=mpiexec if launcher == "mpiexec" else None)


def ended(job: Job, ranks, limit=RUN_LIMIT) -> int:
    """Wait for the job; every rank must be gone too. Its exit code."""
    job.wait(limit)
    gone = time.monotonic()
    while any(alive(p) for p in ranks) and time.monotonic() - gone < 5:
        time.sleep(0.01)
    assert not any(alive(p) for p in ranks), f"a rank outlived the job:\n{job.output()}"
    print(f"\nexit {job.p.returncode}\n{job.output()}")
    return job.p.returncode


def kinds(run) -> list[str]:
    return [json.loads(line)["kind"] for line in open(run / "metrics.jsonl")]


def assert_released(run):
    """No name in the lock file, the lock free, no temporary file of a save left."""
    assert (run / ".lock").read_text() == ""
    RunLock(run).acquire().release()
    left = [p.name for p in run.rglob(".*.tmp")]
    assert not left, left


def steps_saved(run) -> list[int]:
    return [s for s, _ in list_checkpoints(run / "checkpoints")]


def wait_for_step(job: Job, run, step: int) -> None:
    deadline = time.monotonic() + RUN_LIMIT
    while last_step(run / "metrics.jsonl") < step:
        if job.p.poll() is not None or time.monotonic() > deadline:
            job.stop()
            pytest.fail(f"no step {step} within {RUN_LIMIT} s:\n{job.output()}")
        time.sleep(0.01)


@pytest.mark.parametrize("launcher", ["ranks", "mpiexec"])
@pytest.mark.parametrize(
    "steps, extra, saved",
    [
        (2, [], [2]),  # below the checkpoint interval
        (5, [], [5]),  # at it
        (12, [], [5, 10, 12]),  # above it
        (100_000, ["--time-limit", "3"], None),  # a time limit
    ],
    ids=["steps-2", "steps-5", "steps-12", "time-limit"],
)
def test_a_run_that_ends_by_itself_is_judged_and_released(
    mpi, tmp_path, launcher, steps, extra, saved
):
    job = start(tmp_path, launcher, mpi, "--config", config(tmp_path, steps), *extra)
    ranks = [job.rank_pid(0), job.rank_pid(1)]
    assert ended(job, ranks) == 0
    run = tmp_path / "run"
    if saved is None:  # the time limit: the step that passed it, checkpointed
        out = job.out.read_text()
        assert "time limit of 3 s reached after step" in out
        last = last_step(run / "metrics.jsonl")
        saved = [s for s in range(5, last, 5)] + [last]
    assert steps_saved(run) == saved
    # the average takes the checkpoints of the last 20% of the steps: two or more of them
    averaged = len(averaging_window([(s, None) for s in saved], 2, saved[-1])) > 1
    judged = [r["model"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
              if r["kind"] == "test"]
    # last, averaged, and best.npz when it is not the last checkpoint
    assert [m for m in judged if m != "best"] == (["last", "averaged"] if averaged else ["last"])
    assert "test set: 8 examples never seen in training" in job.out.read_text()
    assert (run / "checkpoints" / "averaged.npz").is_file() == averaged
    assert (run / "checkpoints" / "final.npz").is_file()
    assert_released(run)
    assert "error" not in job.err.read_text()


def test_the_ranks_share_the_test_decoding_and_judge_as_one_process(mpi, tmp_path):
    """Rank 1 decodes half of the test set, with the averaged model sent by rank 0: the
    test records of the last checkpoint and of the average are those one process gives
    the same checkpoints, example texts included."""
    job = start(tmp_path, "ranks", mpi, "--config", config(tmp_path, 12))
    assert ended(job, [job.rank_pid(0), job.rank_pid(1)]) == 0
    run = tmp_path / "run"
    timing = {"decode_seconds"}
    judged = [
        {k: v for k, v in r.items() if k not in timing}
        for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
        if r["kind"] == "test"
    ]
    cfg = TrainConfig.load(tmp_path / "reverse.toml")
    task = TASKS[cfg.task.name](cfg.task)
    alone = []
    for name, which in (("checkpoint_12.npz", "last"), ("averaged.npz", "averaged")):
        model = load_checkpoint(run / "checkpoints" / name).model
        m, _ = task.test(model, cfg.train.max_tokens, cfg.train.examples, cfg.seed)
        m = {k: v for k, v in m.items() if k not in timing}
        alone.append({"kind": "test", "step": 12, "model": which, **m})
    assert sum(r.pop("final") for r in judged) == 1  # one of them is the final model
    assert [r for r in judged if r["model"] != "best"] == alone
    assert job.out.read_text().count("test set: 8 examples never seen") == 1  # rank 0 speaks


@pytest.mark.parametrize(
    "launcher, signum", [("ranks", signal.SIGINT), ("mpiexec", signal.SIGINT), ("ranks", 15)]
)
def test_a_signal_stops_every_rank_after_the_step_in_flight(mpi, tmp_path, launcher, signum):
    """SIGINT (or SIGTERM) to the launching process: ``--ranks``' python, or mpiexec."""
    root = tmp_path / "stopped"
    cfg = config(root, 100_000)
    job = start(root, launcher, mpi, "--config", cfg)
    ranks = [job.rank_pid(0), job.rank_pid(1)]
    run = root / "run"
    wait_for_step(job, run, 8)
    job.p.send_signal(signum)
    assert ended(job, ranks, END_LIMIT) == 128 + signum
    at = steps_saved(run)[-1]
    name = "Ctrl-C" if signum == signal.SIGINT else "SIGTERM"
    assert job.stderr_lines()[-1] == (
        f"{PREFIX}stopped by {name} after step {at}, saved: `scratchformer train --run-dir "
        f"{run} --resume --ranks 2` continues from {run / 'checkpoints' / f'checkpoint_{at}.npz'}"
    )
    assert last_step(run / "metrics.jsonl") == at  # every rank stopped after that step
    assert "test" not in kinds(run)
    assert_released(run)
    if launcher == "mpiexec" or signum != signal.SIGINT:
        return

    # --resume continues exactly: it ends where a run never stopped ends
    steps = at + 7
    resumed = start(root, "ranks", mpi, "--config", cfg, "--resume", "--steps", steps)
    straight = tmp_path / "straight"
    whole = start(straight, "ranks", mpi, "--config", config(straight, steps))
    for j in (resumed, whole):
        assert ended(j, []) == 0
    final = [r / "checkpoints" / f"checkpoint_{steps}.npz" for r in (run, straight / "run")]
    assert_same_state(state(final[0]), state(final[1]))
    assert records(run / "metrics.jsonl") == records(straight / "run" / "metrics.jsonl")


def test_a_second_ctrl_c_stops_at_once_and_leaves_no_partial_file(mpi, tmp_path):
    """The checkpoint of the first Ctrl-C is held half-written by a fault of
    tests/fault_hooks.py (rank 0 announces it on stderr) when the second comes."""
    cfg = config(tmp_path, 100_000)
    hook = faults_env(ENV, save="before-write:checkpoint_5.npz")  # the first checkpoint
    job = start(tmp_path, "ranks", mpi, "--config", cfg, env=hook)
    ranks = [job.rank_pid(0), job.rank_pid(1)]
    deadline = time.monotonic() + RUN_LIMIT
    while "fault point before-write" not in job.err.read_text():
        assert time.monotonic() < deadline and job.p.poll() is None, job.output()
        time.sleep(0.01)
    job.p.send_signal(signal.SIGINT)
    time.sleep(0.5)
    job.p.send_signal(signal.SIGINT)
    assert ended(job, ranks, END_LIMIT) == 130
    run = tmp_path / "run"
    ours = [ln for ln in job.stderr_lines() if ln.startswith("scratchformer")]
    assert ours == [
        f"{PREFIX}stopped at once by a second Ctrl-C after step 5; nothing to resume (no "
        "checkpoint was written): start again with --overwrite"
    ]
    assert steps_saved(run) == []
    assert_released(run)


@pytest.mark.parametrize("victim", [1, 0])
def test_a_failing_rank_ends_the_job_and_the_lock_is_released(mpi, tmp_path, victim):
    cfg = config(tmp_path, 100_000)
    hook = faults_env(ENV, rank=f"{victim}:9")
    job = start(tmp_path, "ranks", mpi, "--config", cfg, env=hook)
    ranks = [job.rank_pid(0), job.rank_pid(1)]
    assert ended(job, ranks, RUN_LIMIT) == 2
    assert f"(rank {victim} of 2): error: fault injected at gradient sum 9" in job.err.read_text()
    assert steps_saved(tmp_path / "run") == [5]
    assert_released(tmp_path / "run")
