"""Two-rank training jobs for the tests that start mpiexec: a job in its own session with
its output in files, the process of each rank (found through /proc), the fixtures that
skip where two processes cannot start and kill what a test left running, and what a
job's run left: its last step, its records and the state of a checkpoint. A plugin of
the whole suite (tests/conftest.py), so that its fixtures reach every test folder."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from scratchformer.app import distributed
from scratchformer.app.checkpoint import load_checkpoint
from scratchformer.app.train.limits import cores

#: how long a job may take to end after one of its ranks was killed or failed
END_LIMIT = 30
#: how long one job may run before the test gives up on it
RUN_LIMIT = 120
#: one BLAS thread (the tests share the cores), no fault (tests/fault_hooks.py) and no
#: launcher of ours
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
    if cores() < 2:
        pytest.skip("--ranks 2 needs two cores (at most one process per core)")
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


class Job:
    """``scratchformer train --ranks 2 ARGS`` in its own session, its output in files;
    with ``mpiexec`` (its path), ``mpiexec -n 2 scratchformer train ARGS`` instead."""

    def __init__(self, root: Path, *args, env=None, mpiexec=None):
        root.mkdir(parents=True, exist_ok=True)
        self.out, self.err = root / "out.txt", root / "err.txt"
        train = [sys.executable, "-m", "scratchformer", "train", *map(str, args)]
        argv = [mpiexec, "-n", "2", *train] if mpiexec else [*train, "--ranks", "2"]
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
