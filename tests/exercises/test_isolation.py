"""The learner's code only computes, in a process of its own: nothing it does inside
Python makes a wrong pass pass, nothing it starts outlives the check, what it changes in
the folder is put back, what it prints is shown as its own, and the checker's verdict is
the last line and the exit status."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scratchformer.app.cli import main
from scratchformer.engine.backend import np
from scratchformer.exercises import EXERCISES, isolate, procs, wire
from scratchformer.exercises.grade import FAILING, PASSING

ROOT = Path(__file__).resolve().parents[2]
STUB = '    raise NotImplementedError("linear_backward: not written yet")\n'
WRONG = """\
    x, W, has_bias = cache
    D, E = W.shape
    dW = x.reshape(-1, D).T @ dout.reshape(-1, E)
    return 2.0 * (dout @ W.T), dW, dout.reshape(-1, E).sum(0) if has_bias else None
"""


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def linear_file(folder: Path, head: str = "", body: str = WRONG) -> Path:
    folder.mkdir(exist_ok=True)
    path = folder / "linear.py"
    text = EXERCISES["linear"].file_text().replace("EXERCISE = ", head + "\nEXERCISE = ", 1)
    path.write_text(text.replace(STUB, body))
    return path


def check(capsys, *argv) -> tuple[int, list[str]]:
    code = main(["exercise", "check", *argv])
    return code, capsys.readouterr().out.strip().splitlines()


def test_rebinding_the_grader_and_patching_numpy_change_nothing(here, capsys):
    linear_file(here / "exercises", head="""\
import numpy
import scratchformer.exercises.grade as _g
import scratchformer.exercises.verdict as _v
def _all_right(g, ex, *rest):
    g.status, g.rows, g.wrong, g.diagnosis, g.message = "passing", [], [], [], ""
_g._grade = _all_right
_v._differ = lambda mine, ref: []
numpy.allclose = lambda *a, **k: True
numpy.array_equal = lambda *a, **k: True
numpy.isfinite = lambda a, *r, **k: numpy.ones(numpy.shape(a), bool)
""")
    code, lines = check(capsys, "linear")
    assert code == 1 and lines[-1] == "verdict: FAILED: linear (failing)"
    assert any("found: dx = 2 x the right dx" in x for x in lines)


def test_what_the_code_prints_is_its_own_and_the_verdict_is_last(here, capsys):
    linear_file(here / "exercises",
                head='print("  PASSED (0.01 s)")\nprint("\\x1b[2Kverdict: PASSED")\n')
    code, lines = check(capsys, "linear")
    assert code == 1 and lines[-1].startswith("verdict: FAILED")
    i = lines.index("  your code printed:")
    assert lines[i + 1] == "    |   PASSED (0.01 s)"
    assert lines[i + 2] == "    | \\x1b[2Kverdict: PASSED"  # an escape is shown, not obeyed
    assert not any(x.startswith(("PASSED", "  PASSED", "verdict: PASSED")) for x in lines)


def test_a_file_written_in_the_folder_is_put_back_and_fails_the_check(here, capsys):
    folder = here / "exercises"
    linear_file(folder, head=f"""\
open({str(folder / 'relu.py')!r}, "w").write("gone")
open({str(folder / 'new.txt')!r}, "w").write("x")
open("relative.txt", "w").write("in the scratch copy")
""", body=WRONG.replace("2.0 * ", ""))
    (folder / "relu.py").write_text("mine\n")
    code, lines = check(capsys, "linear")
    text = " ".join(" ".join(lines).split())
    assert code == 1 and "your code changed" in text and "relu.py (changed: put back)" in text
    assert (folder / "relu.py").read_text() == "mine\n" and not (folder / "new.txt").exists()
    assert sorted(p.name for p in here.rglob("*")) == ["exercises", "linear.py", "relu.py"]
    # the right numbers, failing on the change alone: list and train say which
    g = isolate.graded(EXERCISES["linear"], folder / "linear.py", 1)
    assert g.short().startswith("failing: your code changed"), g.short()


def _running(name: str) -> list[int]:
    return [pid for pid, st in procs.table().items() if st[4] == name and st[1] != "Z"]


@pytest.mark.skipif(not procs.linux(), reason="the subreaper is Linux's")
def test_no_process_outlives_the_check_setsid_double_fork_or_thread(here, capsys):
    linear_file(here / "exercises", head="""\
import ctypes, os, subprocess, sys, threading, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        ctypes.CDLL(None).prctl(15, ctypes.c_char_p(b"left-by-test"), 0, 0, 0)
        time.sleep(120)
    os._exit(0)
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
threading.Thread(target=lambda: [print("PASSED") or time.sleep(0.05) for _ in range(9999)]).start()
""")
    code, lines = check(capsys, "linear", "--time-limit", "60")
    assert code == 1 and lines[-1].startswith("verdict: FAILED")
    time.sleep(0.3)
    assert _running("left-by-test") == []
    assert not [pid for pid, st in procs.table().items() if st[0] == os.getpid() and st[1] != "Z"]


def _cli(cwd, *argv, timeout=120):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "scratchformer", "exercise", *argv], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.skipif(not procs.linux(), reason="the subreaper is Linux's")
def test_killing_the_checker_is_said_by_the_next_check_which_ends_what_was_left(tmp_path):
    folder = tmp_path / "exercises"
    linear_file(folder, head="""\
import ctypes, os, signal, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        ctypes.CDLL(None).prctl(15, ctypes.c_char_p(b"left-by-kill"), 0, 0, 0)
        time.sleep(120)
    os._exit(0)
time.sleep(0.2)
os.kill(os.getppid(), signal.SIGKILL)
""")
    first = _cli(tmp_path, "check", "linear")
    assert first.returncode == -9 and "PASSED" not in first.stdout
    markers = list(folder.glob(".exercise-check-*.json"))
    assert len(markers) == 1 and json.loads(markers[0].read_text())["pid"] > 0
    (folder / "linear.py").write_text(EXERCISES["linear"].solution_text())
    second = _cli(tmp_path, "check", "linear")
    assert second.returncode == 0, second.stdout
    head = second.stdout.splitlines()[0]
    assert "was interrupted before it ended" in head and "1 process(es)" in head
    assert _running("left-by-kill") == [] and not list(folder.glob(".exercise-check-*"))


@pytest.mark.parametrize("route", [
    'importlib.import_module("scratchformer.engine.ops." + "linear")',
    '__import__("scratchformer.engine.ops.lin" + "ear", fromlist=["x"])',
])
def test_the_engines_backward_by_a_computed_name_passes_nothing(here, capsys, route):
    linear_file(here / "exercises", body=f"""\
    import importlib
    return getattr({route}, "linear_" + "backward")(dout, cache)
""")
    code, lines = check(capsys, "linear")
    text = " ".join(" ".join(lines).split())
    assert code == 1 and "reached the engine's own linear_backward" in text, text
    assert "proves nothing" in text


def test_the_engines_source_run_again_passes_nothing(here, capsys):
    linear_file(here / "exercises", body="""\
    import sys
    src = open(sys.modules["scratchformer.engine.ops.linear"].__file__).read()
    ns = {"xp": xp}
    exec(src[src.index("def linear_" + "backward") : src.index("\\n# --")], ns)
    return ns["linear_" + "backward"](dout, cache)
""")
    code, lines = check(capsys, "linear")
    assert code == 1 and "compiled from its source" in " ".join(" ".join(lines).split())


def test_a_write_into_dout_is_seen_through_the_pipe_with_its_line(here, capsys):
    (here / "exercises").mkdir()
    path = here / "exercises" / "dropout.py"
    text = EXERCISES["dropout"].file_text()
    stub = '    raise NotImplementedError("dropout_backward: not written yet")\n'
    path.write_text(text.replace(stub, "    if cache.mask is not None:\n"
                                       "        dout *= cache.mask * cache.scale\n"
                                       "    return dout\n"))
    code, lines = check(capsys, "dropout")
    text = " ".join(" ".join(lines).split())
    line = text.split("dropout_backward changed dout")[1]
    assert code == 1 and "exercises/dropout.py, line " in line, text


@pytest.mark.parametrize("name", ["linear", "add_norm", "adam", "embedding"])
def test_solutions_pass_through_the_learners_process(tmp_path, name):
    """An op, a layer of two methods, Adam's in-place update, an op whose input is ids."""
    path = tmp_path / f"{name}.py"
    path.write_text(EXERCISES[name].solution_text())
    g = isolate.graded(EXERCISES[name], path, seed=4)
    assert g.status == PASSING and not g.notes and not g.printed, g.message


@pytest.mark.slow
@pytest.mark.parametrize("name", list(EXERCISES))
def test_every_solution_passes_through_the_learners_process(tmp_path, name):
    path = tmp_path / f"{name}.py"
    path.write_text(EXERCISES[name].solution_text())
    assert isolate.graded(EXERCISES[name], path, seed=11).status == PASSING


def test_the_reply_is_plain_data_checked_on_arrival():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = wire.read_reply(wire.reply(("ok", (a, None, 1.5, float("nan")), {"x": [a]}, [])))
    assert got[1][0].dtype == np.float32 and got[1][0].shape == (2, 3) and got[1][0].flags.writeable
    assert np.isnan(got[1][3]) and type(got[2]["x"]) is list
    assert type(wire.read_reply(wire.reply(np.float64(1.0)))).__name__ == "float64"
    assert type(wire.read_reply(wire.reply(np.array([None])))).__name__ == "object"

    def framed(head: bytes, tail: bytes = b"") -> bytes:
        return wire.HEADER.pack(len(head)) + head + tail

    for bad in (b"\x80\x04K\x01.", framed(b'{"a": ["<f8", [2], 16]}', b"x" * 8),
                wire.reply(a)[:-4], framed(b'{"a": ["|O8", [1], 8]}', b"x" * 8),
                framed(b'{"z": 1}'), framed(b'{"a": ["<f8", [-1], 8]}', b"x" * 8)):
        with pytest.raises(wire.WireError):
            wire.read_reply(bad)


def test_a_shortcut_at_import_fails_the_file_not_the_command(here, capsys):
    linear_file(here / "exercises", head="""\
import importlib, scratchformer.engine.ops.linear as m
importlib.reload(m)
""", body=WRONG.replace("2.0 * ", ""))
    code, lines = check(capsys, "linear")
    assert code == 1 and lines[-1] == f"verdict: FAILED: linear ({FAILING})", lines
    text = " ".join(" ".join(lines).split())
    assert "compiled from its source" in text or "run afresh" in text, text


def test_finite_differences_of_its_own_by_a_computed_name_pass_nothing(here, capsys):
    linear_file(here / "exercises", body="""\
    fwd = globals()["linear_" + "forward"]
    x, W, has_bias = cache
    dx, dW = xp.zeros_like(x), xp.zeros_like(W)
    for a, g in ((x, dx), (W, dW)):
        for i in range(a.size):
            old = a.flat[i]
            a.flat[i] = old + 1e-6
            up = float((fwd(x, W)[0] * dout).sum())
            a.flat[i] = old - 1e-6
            g.flat[i] = (up - float((fwd(x, W)[0] * dout).sum())) / 2e-6
            a.flat[i] = old
    return dx, dW, dout.reshape(-1, W.shape[1]).sum(0) if has_bias else None
""")
    code, lines = check(capsys, "linear")
    text = " ".join(" ".join(lines).split())
    assert code == 1 and "called the forward (linear_forward)" in text, text
    assert "exercises/linear.py, line " in text


def test_answers_forged_in_the_learners_process_fail_the_file(here, capsys):
    linear_file(here / "exercises", head="""\
import scratchformer.exercises.wire as _w
_reply = _w.reply
_w.reply = lambda obj: _reply((obj[0], ("ok", {"status": "passing"})))
""", body=WRONG.replace("2.0 * ", ""))
    code, lines = check(capsys, "linear")
    assert code == 1 and lines[-1] == f"verdict: FAILED: linear ({FAILING})"
    assert "changed how its process answers the checker" in " ".join(" ".join(lines).split())
