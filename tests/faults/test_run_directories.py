"""Faults around the run directory: one run writes it at a time, and a run killed while
holding it does not lock it forever.

A second training on a directory in use is refused in one line naming the holder; a
holder killed with ``kill -9`` leaves its name in ``.lock`` but not the lock (the
operating system drops it), and the next run takes over, saying whose it was.
"""

import os
import signal
import subprocess
import sys
import time

import pytest
from task_data import TINY_RUN

from scratchformer.cli import main as cli_main
from scratchformer.train.rundir import LOCK_NAME, RunLock

HOLD = (
    "import sys, time\n"
    "from scratchformer.train.rundir import RunLock\n"
    "lock = RunLock(sys.argv[1]).acquire()\n"
    "print('held', flush=True)\n"
    "time.sleep(60)\n"
)


def _holder(run_dir):
    """A process that takes the run directory's lock and keeps it (until killed)."""
    p = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(run_dir)], stdout=subprocess.PIPE, text=True
    )
    assert p.stdout.readline().strip() == "held"
    return p


def _train(run_dir, *extra):
    return cli_main(["train", *TINY_RUN, "--run-dir", str(run_dir), "--steps", "2", *extra])


def test_a_second_run_on_a_directory_in_use_is_refused(tmp_path, capsys):
    run = tmp_path / "run"
    holder = _holder(run)
    try:
        assert _train(run) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1, err
        assert "in use by another training run" in err[0]
        assert f"pid {holder.pid}" in err[0]
        assert sorted(p.name for p in run.iterdir()) == [LOCK_NAME]  # nothing written
    finally:
        holder.kill()
        holder.wait()


def test_a_lock_left_by_a_killed_run_is_taken_over_naming_it(tmp_path, capsys):
    run = tmp_path / "run"
    holder = _holder(run)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    assert f"pid {holder.pid}" in (run / LOCK_NAME).read_text()  # its name stayed
    assert _train(run, "--no-test") == 0
    out = capsys.readouterr().out
    assert "ended without releasing it" in out and f"pid {holder.pid}" in out
    assert (run / LOCK_NAME).read_text() == ""  # released at the end of the run


def test_two_real_trainings_on_one_directory(tmp_path):
    """A training process holds the directory while it trains; a second one started
    meanwhile is refused and writes nothing; the first finishes untouched."""
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "scratchformer", "train", *TINY_RUN, "--run-dir", str(run)]
    first = subprocess.Popen(
        [*cmd, "--steps", "400", "--checkpoint-every", "100", "--no-test"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (run / LOCK_NAME).exists() or not (run / LOCK_NAME).read_text():
            assert first.poll() is None and time.monotonic() < deadline, "first run never started"
            time.sleep(0.05)
        second = subprocess.run([*cmd, "--steps", "2"], capture_output=True, text=True)
        assert second.returncode == 2
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1 and f"in use by another training run (pid {first.pid}" in lines[0]
        assert "Traceback" not in second.stderr
        out, err = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 0, err
    assert "done: step 400" in out


def test_release_is_idempotent_and_frees_the_directory(tmp_path):
    lock = RunLock(tmp_path).acquire()
    with pytest.raises(Exception, match="in use by another training run"):
        RunLock(tmp_path).acquire()
    lock.release()
    lock.release()
    RunLock(tmp_path).acquire().release()
