"""``kill -9`` during training changes nothing: a run killed again and again, each time
continued with ``--resume``, ends bit for bit where a run that was never stopped ends.

A real ``python -m scratchformer train`` process is killed with SIGKILL

- at random moments (seeded delays): while it starts, trains, validates or saves;
- inside a checkpoint save, deterministically, through a fault of tests/fault_hooks.py
  installed at the process's start (``save="<point>:<file name>"``): with the temporary file created
  but empty (``before-write``), written but not renamed (``after-write``), and renamed
  into place before the run pruned its old checkpoints (``after-replace``); at a
  checkpoint a few steps on, at the final averaged model and at the final model.

After each kill every checkpoint in the directory still loads, and the next run starts
from the newest one (``--resume``), or afresh with ``--overwrite`` when the kill came
before the first checkpoint. It removes the temporary file a killed save left, saying
so. At the end, the parameters, Adam's moments and step count, the data position and
the averaged, final and best models (every array of every kept checkpoint, compared with
``np.array_equal``), the list of files, and the metrics log's train, validation and
test records (timings aside) equal those of one uninterrupted run of the same config.

    python -m pytest -m slow -s tests/faults/test_faults.py
"""

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from fault_hooks import faults_env
from task_data import run_config, write_toml

from scratchformer.app.checkpoint import META_KEY, list_checkpoints, load_checkpoint

pytestmark = pytest.mark.slow

EVERY = 5  # steps between checkpoints
#: one BLAS thread: the tests share two cores with each other
ENV = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
SEGMENT_LIMIT = 120  # seconds one process may take before the test gives up on it
TEMPORARY = re.compile(r"^\.(checkpoint_\d+|averaged|final)\.npz\.[0-9a-f]{12}\.tmp$")


def write_config(root: Path, task: str, steps: int) -> Path:
    """A TOML config of ``task`` writing to ``run`` (relative, so that two copies of the
    run in two directories store the same configuration): a checkpoint every 5 steps,
    the newest 4 kept, the last 3 averaged, a "train" record every 3 steps (so records
    and checkpoints do not coincide) and a validation every 7."""
    d = run_config(task, root, steps=steps, checkpoint_every=EVERY, log_every=3, eval_every=7)
    d["run_dir"] = "run"
    d["train"].update(keep_checkpoints=4, average_last=3)
    return write_toml(d, root / f"{task}.toml")


class KilledRun:
    """A run in ``cwd/run``, started, killed and resumed by the plan's entries."""

    def __init__(self, cwd: Path, config: Path):
        self.cwd, self.config = cwd, config
        self.run = cwd / "run"
        self.ckpts = self.run / "checkpoints"
        self.kills = {}  # what -> how many
        self.cwd.mkdir(parents=True, exist_ok=True)

    def command(self) -> list:
        """Resume from the newest checkpoint; afresh (over what the killed run left)
        when there is none."""
        has = self.ckpts.is_dir() and list_checkpoints(self.ckpts)
        how = "--resume" if has else "--overwrite"
        return [sys.executable, "-m", "scratchformer", "train", "--config", str(self.config)] + [
            "--no-progress",
            how,
        ]

    def start(self, fault: str = ""):
        env = faults_env(ENV, save=fault) if fault else ENV
        out = open(self.cwd / "out.txt", "w")  # closed by kill
        err = open(self.cwd / "err.txt", "w")
        p = subprocess.Popen(self.command(), cwd=self.cwd, env=env, stdout=out, stderr=err)
        return p, (out, err)

    def text(self, name: str) -> str:
        return (self.cwd / name).read_text(errors="replace")

    def wait_for(self, p, found) -> None:
        """Poll until ``found()``; fail with the process's output if it ends first."""
        deadline = time.monotonic() + SEGMENT_LIMIT
        while not found():
            if p.poll() is not None:
                pytest.fail(f"exit {p.returncode} before the kill:\n{self.output()}")
            if time.monotonic() > deadline:
                p.kill()
                pytest.fail(f"no kill point within {SEGMENT_LIMIT} s:\n{self.output()}")
            time.sleep(0.005)

    def output(self) -> str:
        return self.text("out.txt")[-3000:] + "\n--- stderr:\n" + self.text("err.txt")[-3000:]

    def kill(self, p, files, what: str) -> None:
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        for f in files:
            f.close()
        assert p.returncode == -signal.SIGKILL, self.output()
        self.kills[what] = self.kills.get(what, 0) + 1

    def random_kill(self, rng: random.Random, from_start: bool) -> None:
        """Kill after a seeded delay: from the process's start (it may still be loading,
        resuming or cleaning up), or from its first line (it is training)."""
        p, files = self.start()
        if not from_start:
            self.wait_for(p, lambda: self.text("out.txt").strip())
        time.sleep(rng.uniform(0.02, 0.3))
        if p.poll() is not None:
            pytest.fail(f"the run ended before its kill (raise steps):\n{self.output()}")
        self.kill(p, files, "at a random moment" + (" of the start" if from_start else ""))

    def save_kill(self, point: str, name: str) -> None:
        """Kill inside the save of ``name`` at ``point`` (the fault stops it there)."""
        p, files = self.start(f"{point}:{name}")
        marker = f"fault point {point}: "
        self.wait_for(p, lambda: marker in self.text("err.txt"))
        which = name if name in ("averaged.npz", "final.npz") else "a checkpoint"
        self.kill(p, files, f"inside the save of {which}, {point}")
        target = self.ckpts / name
        temporaries = [q.name for q in self.ckpts.iterdir() if TEMPORARY.match(q.name)]
        if point == "after-replace":
            assert target.is_file() and not temporaries
        else:  # the temporary file is left, the real name untouched
            assert [t for t in temporaries if t.startswith(f".{name}.")] == temporaries
            assert len(temporaries) == 1 and not target.exists()

    def check_after_kill(self) -> None:
        """Whatever the kill interrupted, every checkpoint under its real name loads."""
        for _, path in list_checkpoints(self.ckpts) if self.ckpts.is_dir() else []:
            load_checkpoint(path)
        for name in ("averaged.npz", "final.npz", "best.npz"):
            if (self.ckpts / name).exists():
                load_checkpoint(self.ckpts / name)

    def finish(self) -> None:
        """Resume with no fault until the run ends."""
        leftover = self.temporaries()
        p = subprocess.run(self.command(), cwd=self.cwd, env=ENV, capture_output=True, text=True)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr
        if leftover:
            n = len(leftover)
            assert f"note: removed {n} temporary file{'s' if n > 1 else ''}" in p.stdout
        assert not self.temporaries()

    def temporaries(self) -> list:
        return [q for q in self.ckpts.rglob("*") if TEMPORARY.match(q.name)]

    def newest_step(self) -> int:
        found = list_checkpoints(self.ckpts) if self.ckpts.is_dir() else []
        return found[-1][0] if found else 0


def arrays_and_header(path: Path):
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    header = json.loads(arrays.pop(META_KEY).tobytes().decode("utf-8"))
    if header.get("train_state"):
        header["train_state"].pop("seconds")  # wall time
    return arrays, header


def records(run: Path) -> list:
    recs = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not timing(k)} for r in recs]


def timing(key: str) -> bool:
    """A wall-time field of a metrics record (differs from run to run)."""
    return key in ("tokens_per_s", "elapsed") or key.endswith("_seconds")


def assert_same_run(killed: Path, reference: Path) -> None:
    """Bit-identical checkpoints (parameters, Adam's m, v and t, the data position and
    the window of the next record), averaged and final models, file list and metrics
    records."""

    def files(run):
        return sorted(str(p.relative_to(run)) for p in run.rglob("*"))

    assert files(killed) == files(reference)
    names = [p.name for p in sorted((reference / "checkpoints").iterdir())]
    kept = {"averaged.npz", "final.npz", "best.npz"}
    assert kept <= set(names) and len(names) == 7  # 4 checkpoints kept + 3
    for name in names:
        a, ha = arrays_and_header(killed / "checkpoints" / name)
        b, hb = arrays_and_header(reference / "checkpoints" / name)
        assert sorted(a) == sorted(b), name
        for k in b:
            assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), f"{name}: {k}"
        assert ha == hb, name
        if name not in ("averaged.npz", "final.npz", "best.npz"):
            assert any(k.startswith("optim/m/") for k in b) and hb["optimizer"]["t"] > 0
    ours, theirs = records(killed), records(reference)
    assert [r for r in ours if r["kind"] == "train"] == [r for r in theirs if r["kind"] == "train"]
    assert ours == theirs


#: task, steps, random kills (of which from the start), kills inside checkpoint saves
#: per point, kills inside the averaged and the final model's saves per point (then also
#: one after the last checkpoint is renamed into place, before the old ones are pruned)
PLANS = [
    pytest.param("reverse", 2000, 15, 3, 2, 1, id="reverse-28-kills"),
    pytest.param("lm", 400, 3, 1, 1, 1, id="lm-13-kills"),
    pytest.param("classify", 400, 3, 1, 1, 1, id="classify-13-kills"),
]
POINTS = ("before-write", "after-write", "after-replace")


@pytest.mark.parametrize("task, steps, n_random, n_start, per_point, per_avg_point", PLANS)
def test_kill_9_anywhere_then_resume_ends_as_an_uninterrupted_run(
    tmp_path, task, steps, n_random, n_start, per_point, per_avg_point
):
    t0 = time.monotonic()
    config = write_config(tmp_path, task, steps)
    ref = tmp_path / "reference"
    ref.mkdir()
    cmd = [sys.executable, "-m", "scratchformer", "train", "--config", str(config)]
    done = subprocess.run([*cmd, "--no-progress"], cwd=ref, env=ENV, capture_output=True)
    assert done.returncode == 0, done.stderr

    rng = random.Random(f"kill -9 {task}")
    plan = [("random", i < n_start, "") for i in range(n_random)]
    plan += [("save", point, "") for point in POINTS for _ in range(per_point)]
    rng.shuffle(plan)
    if per_avg_point:  # the last checkpoint in place, the older ones not yet pruned
        plan.append(("save", "after-replace", f"checkpoint_{steps}.npz"))
    plan += [
        ("save", point, name)
        for name in ("averaged.npz", "final.npz")
        for point in POINTS
        for _ in range(per_avg_point)
    ]
    run = KilledRun(tmp_path / "killed", config)
    for kind, arg, name in plan:
        orphans = run.temporaries()
        if kind == "random":
            run.random_kill(rng, from_start=arg)
        else:  # by default two checkpoints on: one normal save first
            run.save_kill(arg, name or f"checkpoint_{run.newest_step() + 2 * EVERY}.npz")
        run.check_after_kill()
        out = run.text("out.txt")
        if orphans and re.search(r"^(training|resuming) ", out, re.M):  # it got going
            assert "temporary file" in out and not set(orphans) & set(run.temporaries())
    run.finish()
    assert_same_run(run.run, ref / "run")

    kills = sum(run.kills.values())
    assert kills == len(plan)
    summary = ", ".join(f"{n} {what}" for what, n in sorted(run.kills.items()))
    print(f"\n{task}: {kills} kills ({summary}) in {time.monotonic() - t0:.0f} s")
