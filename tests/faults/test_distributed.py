"""Faults of data-parallel training: no rank is ever left waiting, errors are told in one
line, and a killed job resumes exactly.

- A rank killed with SIGKILL while training (rank 1, or rank 0, the one that writes)
  ends the whole job within seconds, with a non-zero exit (mpiexec reports the kill in
  its own words); ``--resume`` with the same number of processes then ends bit for bit
  where an uninterrupted 2-rank run ends (the last checkpoint's parameters, Adam's
  moments and position, the averaged model, the checkpoints kept, and the metrics log's
  train and validation records, timings aside). Another number of processes is refused
  in one line, either way round.
- A rank that fails (the testing hook ``SCRATCHFORMER_FAULT_RANK=<rank>:<n>`` makes it
  raise at its n-th gradient sum) prints one line naming itself, on a line of its own
  while rank 0 draws its progress bar, and ends the job (MPI_Abort); an error every
  rank meets (a bad ``--set``) is told once, by rank 0.
- Without mpiexec or mpi4py, ``--ranks 2`` and a process started by an MPI launcher
  say in one line what to install.

The tests that start mpiexec are slow (``-m slow``) and skip, with the reason, only where
mpiexec or mpi4py are missing or mpiexec cannot start two processes.

    python -m pytest -m slow -s tests/faults/test_distributed.py
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from task_data import TINY_RUN, run_config, write_toml

from scratchformer import distributed
from scratchformer.checkpoint import latest_checkpoint, list_checkpoints, load_checkpoint

#: how long a job may take to end after one of its ranks was killed or failed
END_LIMIT = 30
#: how long one job may run before the test gives up on it
RUN_LIMIT = 120
#: one BLAS thread (the tests share the cores), no testing hook and no launcher of ours
ENV = {
    k: v
    for k, v in os.environ.items()
    if not k.startswith(("SCRATCHFORMER_FAULT", "PMI_", "PMIX_", "OMPI_", "SLURM_"))
}
ENV.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
PREFIX = "scratchformer train"
#: the variables by which launchers (MPICH, Open MPI, PMIx, Slurm) tell a rank its number
RANK_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID")
#: the jobs a test started, killed when it ends (passed or not)
JOBS: list = []


@pytest.fixture(scope="module")
def mpi():
    """Skip, with the reason, where two processes cannot be started."""
    mpiexec = distributed.find_mpiexec()
    if mpiexec is None or distributed.missing_mpi4py():
        pytest.skip(f"no MPI here ({distributed.EXTRA})")
    if not Path("/proc/self/environ").exists():
        pytest.skip("finding a rank's process needs /proc")
    probe = [mpiexec, "-n", "2", sys.executable, "-c", "from mpi4py import MPI"]
    p = subprocess.run(probe, capture_output=True, text=True, env=ENV, timeout=60)
    if p.returncode != 0:
        pytest.skip(f"mpiexec cannot start 2 processes here: {(p.stdout + p.stderr)[-200:]}")
    return mpiexec


@pytest.fixture(autouse=True)
def no_job_left():
    """Kill whatever a failed test left running."""
    yield
    while JOBS:
        JOBS.pop().stop()


def config(root: Path, steps: int) -> Path:
    """A tiny reverse run in ``root/run``: a checkpoint every 5 steps, a train record
    every step, a validation every 4 (so that records and checkpoints do not coincide)."""
    root.mkdir(parents=True, exist_ok=True)
    d = run_config("reverse", root, steps=steps, checkpoint_every=5, log_every=1, eval_every=4)
    d["train"].update(keep_checkpoints=3, average_last=2, test=False)
    return write_toml(d, root / "reverse.toml")


class Job:
    """``scratchformer train --ranks 2 ARGS`` in its own session, its output in files."""

    def __init__(self, root: Path, *args, env=None):
        root.mkdir(parents=True, exist_ok=True)
        self.out, self.err = root / "out.txt", root / "err.txt"
        argv = [sys.executable, "-m", "scratchformer", "train", "--ranks", "2", *map(str, args)]
        with open(self.out, "w") as out, open(self.err, "w") as err:
            self.p = subprocess.Popen(
                argv,
                cwd=root,
                env={**ENV, **(env or {})},
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        JOBS.append(self)

    def output(self) -> str:
        return f"{self.out.read_text()[-3000:]}\n--- stderr:\n{self.err.read_text()[-3000:]}"

    def stderr_lines(self) -> list[str]:
        return [ln for ln in self.err.read_text().splitlines() if ln.strip()]

    def wait(self, limit: float) -> float:
        """Seconds until it ended (at most ``limit``, else the test fails)."""
        t0 = time.monotonic()
        try:
            self.p.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            self.stop()
            pytest.fail(f"the job did not end within {limit} s:\n{self.output()}")
        return time.monotonic() - t0

    def stop(self) -> None:
        """Kill what is left of the job (its session: mpiexec, its proxy and the ranks)."""
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait()

    def rank_pid(self, rank: int) -> int:
        """The process id of ``rank``: the job's descendant whose launcher variables say
        it is that rank."""
        deadline = time.monotonic() + RUN_LIMIT
        while time.monotonic() < deadline:
            for pid in descendants(self.p.pid):
                env = environ(pid)
                if "scratchformer" in cmdline(pid) and any(f"{v}={rank}" in env for v in RANK_VARS):
                    return pid
            if self.p.poll() is not None:
                pytest.fail(f"the job ended before rank {rank} was found:\n{self.output()}")
            time.sleep(0.02)
        self.stop()
        pytest.fail(f"rank {rank} not found within {RUN_LIMIT} s")


def _read(pid: int, name: str) -> list[str]:
    try:
        return Path(f"/proc/{pid}/{name}").read_bytes().decode(errors="replace").split("\0")
    except OSError:  # gone
        return []


def environ(pid: int) -> list[str]:
    return _read(pid, "environ")


def cmdline(pid: int) -> str:
    return " ".join(_read(pid, "cmdline"))


def descendants(top: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(p.name))
    out, todo = [], [top]
    while todo:
        kids = children.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its parent counts as ended)."""
    stat = _read(pid, "stat")
    return bool(stat) and stat[0].rsplit(")", 1)[1].split()[0] != "Z"


def last_step(metrics: Path) -> int:
    """The step of the newest complete "train" record (0 before the first)."""
    text = metrics.read_text() if metrics.exists() else ""
    lines = text.split("\n")[:-1]  # the last piece may be half written
    steps = [r["step"] for r in map(json.loads, lines) if r.get("kind") == "train"]
    return steps[-1] if steps else 0


def records(metrics: Path) -> list[dict]:
    """The train and validation records, without timings."""
    timing = {"elapsed", "tokens_per_s"}
    out = []
    for line in metrics.read_text().splitlines():
        r = json.loads(line)
        if r["kind"] in ("train", "valid"):
            out.append({k: v for k, v in r.items() if k not in timing})
    return out


def state(path: Path) -> dict:
    """Every array and number a checkpoint holds that decides how training goes on."""
    ck = load_checkpoint(path)
    out = {f"model.{k}": np.asarray(v) for k, v in ck.model.state_dict().items()}
    for k, v in ck.optimizer_state.items():
        if isinstance(v, dict):
            out.update({f"optim.{k}.{kk}": np.asarray(vv) for kk, vv in v.items()})
        else:
            out[f"optim.{k}"] = v
    ts = ck.train_state
    out.update({f"train.{k}": ts[k] for k in ("step", "epoch", "batch_index", "tokens_seen")})
    out["train.ranks"] = ts["ranks"]
    return out


def assert_same_state(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    differ = [k for k in a if not np.array_equal(a[k], b[k])]
    assert not differ, differ


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
    job = Job(tmp_path, "--config", cfg, env={"SCRATCHFORMER_FAULT_RANK": "1:6"})
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
from scratchformer.cli import main
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
