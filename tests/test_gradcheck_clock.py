"""``scratchformer gradcheck`` runs as ``train`` does (one BLAS thread unless told), says
before the wait when the machine is busy, says when ``--tol`` is below what central
differences can resolve, and a step-size sweep passes when one of its steps does.
No test here depends on how busy the machine is: the load and the timed passes are
replaced where a test needs them."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

from scratchformer.app.cli import main
from scratchformer.app.commands import gradcheck_clock as clock
from scratchformer.app.train.config import TrainConfig
from scratchformer.engine import backend
from scratchformer.engine.gradcheck import rounding_floor

QUICK = ["gradcheck", "--norm", "post", "--samples", "3", "--no-progress"]


@pytest.fixture
def threads_asked(monkeypatch):
    """The thread counts ``backend.blas_threads`` was asked for."""
    asked = []

    def record(n):
        asked.append(n)
        return contextlib.nullcontext()

    monkeypatch.setattr(backend, "blas_threads", record)
    return asked


@pytest.fixture
def quiet(monkeypatch):
    """A quiet machine: no load, and every timed pass had its core."""
    monkeypatch.setattr(clock, "load_average", lambda: 0.0)
    real = clock.probe

    def full_core(*a, **k):
        found = real(*a, **k)
        found.share = 1.0
        return found

    monkeypatch.setattr(clock, "probe", full_core)


def test_gradcheck_runs_on_train_s_threads_unless_told(threads_asked, quiet, capsys):
    assert main(QUICK) == 0
    assert main([*QUICK, "--threads", "2"]) == 0
    assert threads_asked == [TrainConfig.default().train.threads, 2] == [1, 2]


def test_the_training_loop_sets_its_threads_the_same_way(threads_asked, tmp_path):
    from task_data import TINY_RUN

    argv = ["train", *TINY_RUN, "--steps", "2", "--no-test", "--run-dir", str(tmp_path / "r")]
    assert main([*argv, "--threads", "3"]) == 0
    assert threads_asked == [3]


def test_a_busy_core_is_said_before_the_check_with_what_to_expect(monkeypatch, capsys):
    real = clock.probe

    def half_a_core(*a, **k):
        found = real(*a, **k)
        found.share = 0.5
        return found

    monkeypatch.setattr(clock, "probe", half_a_core)
    assert main(QUICK) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("estimated time: about ")
    assert lines[1].startswith("note: the cores are busy") and "50% of a core" in lines[1]
    assert "may take about" in lines[1]


def test_several_threads_on_a_loaded_machine_are_advised_one_before_the_check(monkeypatch, capsys):
    monkeypatch.setattr(clock, "load_average", lambda: 2.0)
    monkeypatch.setattr(clock, "cores", lambda: 2)
    assert main([*QUICK, "--threads", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("note: the cores are busy (load 2.0 on 2 cores)")
    assert "--threads 1" in lines[1]


def test_the_busy_note_is_said_only_when_the_cores_are_busy(monkeypatch):
    monkeypatch.setattr(clock, "load_average", lambda: 0.3)
    monkeypatch.setattr(clock, "cores", lambda: 2)
    quiet = clock.Probe(0.1, 0.01, 0.02, share=0.97)
    assert clock.busy(quiet, 1, 10.0) == ("", 10.0)
    assert clock.busy(quiet, 2, 10.0) == ("", 10.0)
    shared = clock.Probe(0.1, 0.01, 0.02, share=0.4)
    note, expected = clock.busy(shared, 1, 10.0)
    assert expected == pytest.approx(25.0) and "40% of a core" in note
    monkeypatch.setattr(clock, "load_average", lambda: 1.2)  # another job beside it
    assert clock.busy(quiet, 1, 10.0)[0] == ""  # one thread: a core of its own
    assert "--threads 1" in clock.busy(quiet, 2, 10.0)[0]
    assert "--threads 1" in clock.busy(quiet, 0, 10.0)[0]  # the BLAS's own threads


def test_the_rounding_floor_is_eps_times_the_loss_over_the_step():
    eps64, eps32 = np.finfo(np.float64).eps, np.finfo(np.float32).eps
    assert rounding_floor(3.0, 0.5, 1e-6) == pytest.approx(eps64 * 3.0 / 1e-6 / 1.0)
    assert rounding_floor(3.0, 0.5, 1e-3) == pytest.approx(rounding_floor(3.0, 0.5, 1e-6) / 1e3)
    assert rounding_floor(3.0, 0.5, 1e-6, "float32") == pytest.approx(eps32 * 3.0 / 1e-6)
    assert rounding_floor(3.0, 0.0, 1e-6) == pytest.approx(eps64 * 3.0 / 1e-6 / 1e-8)


def test_a_tolerance_below_the_rounding_floor_is_said_in_one_line_before_the_check(quiet, capsys):
    main([*QUICK, "--tol", "1e-12"])
    out = capsys.readouterr().out.splitlines()
    notes = [line for line in out if line.startswith("note: --tol 1e-12 is below")]
    assert len(notes) == 1 and out.index(notes[0]) == 1  # right after the estimate
    assert "float64" in notes[0] and "eps*|L|/h" in notes[0] and "h = 1e-06" in notes[0]
    assert main(QUICK) == 0
    assert "note: --tol" not in capsys.readouterr().out  # the default is far above it


def test_explain_s_floor_is_that_of_its_tensor(quiet, capsys):
    main(["gradcheck", "--explain", "embed.E", "--samples", "2", "--tol", "1e-13"])
    assert "note: --tol 1e-13 is below" in capsys.readouterr().out


SWEEP = ["gradcheck", "--directions", "1", "--norm", "post", "--dtype", "float32"]
SWEEP += ["--activation", "gelu", "--no-progress", "--h", "1e-1", "1e-2", "1e-3"]


def test_a_sweep_passes_when_some_step_meets_the_tolerance_and_marks_the_best(quiet, capsys):
    assert main([*SWEEP, "--tol", "0.5"]) == 0
    out = capsys.readouterr().out
    rows = [
        line for line in out.splitlines() if line.strip().startswith(("1e-01", "1e-02", "1e-03"))
    ]
    assert len(rows) == 3 and sum(line.endswith("<- best") for line in rows) == 1
    assert "best step: h = " in out and out.rstrip().endswith("gradcheck: PASSED")


def test_a_sweep_no_step_of_which_passes_says_why_in_one_line(quiet, capsys):
    assert main(SWEEP) == 1
    out = capsys.readouterr().out
    why = [line for line in out.splitlines() if "cannot resolve" in line]
    assert len(why) == 1 and why[0].startswith("float32 cannot resolve these gradients")
    assert "--tol 1e-06" in why[0] and "float64" in why[0]
    assert "note: --tol 1e-06 is below what central differences in float32" in out
