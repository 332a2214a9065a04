"""Long stages are never silent: the ticker prints while the work is stuck on one slow
piece, the bar redraws itself, and both stop when closed. A bar is drawn only on a
terminal (a log file gets lines), every command takes --no-progress, and a result is
never written on the bar's line."""

import argparse
import io
import os
import subprocess
import sys
import time

import pytest
from task_data import TINY_RUN
from timing import untimed

from scratchformer.app.progress import Ticker, clock, progress_bar


def test_the_ticker_prints_while_a_slow_piece_runs(monkeypatch):
    """Lines come from the ticker's own thread while nothing updates it (one slow batch),
    and stop with close(). The clock is held still, so the lines say the same however
    busy the machine is; only their coming is waited for."""
    monkeypatch.setattr(time, "perf_counter", lambda: 100.0)
    lines = []
    t = Ticker(10, "decoding", lines.append, every=0.01)
    _wait_for(lambda: len(lines) >= 2)
    t.update(4)
    _wait_for(lambda: lines[-1].startswith("  decoding: 4/10"))
    t.close()
    n = len(lines)
    time.sleep(0.05)
    assert len(lines) == n  # stopped with close()
    assert lines[0] == "  decoding: 0/10 (0:00:00)"
    assert lines[-1] == "  decoding: 4/10 (0:00:00, about 0:00:00 left)"


def _wait_for(condition, seconds: float = 120.0) -> None:
    """Until ``condition()`` holds (a thread's work: as long as the machine needs)."""
    end = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < end, "the ticker's thread never wrote"
        time.sleep(0.005)


def test_the_ticker_says_the_time_left_at_the_rate_so_far(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(time, "perf_counter", lambda: now[0])
    lines = []
    t = Ticker(10, "decoding", lines.append, every=3600)
    t.update(4)
    now[0] += 80  # 4 of 10 in 80 s: 6 more take 120 s
    t._line()
    t.close()
    assert lines == ["  decoding: 4/10 (0:01:20, about 0:02:00 left)"]
    u = Ticker(None, "reading", lines.append, every=3600)
    u.update(3)
    u._line()
    u.close()
    assert lines[-1] == "  reading: 3 (0:00:00)"  # no total: no time left


def test_the_bar_redraws_while_nothing_finishes():
    out = io.StringIO()
    bar = progress_bar(3, "decoding", "sentence", file=out)
    bar._repeat.stop()  # restart its redraw faster, for the test
    from scratchformer.app.progress import _Repeater  # noqa: PLC0415

    bar._repeat = _Repeater(bar.refresh, 0.05)
    time.sleep(0.3)
    drawn = out.getvalue().count("decoding")
    bar.close()
    assert drawn >= 4


def test_clock():
    assert clock(0) == "0:00:00" and clock(3725.9) == "1:02:05"


# -- where progress goes: a terminal gets a bar, a log gets lines, results their own lines --
def test_every_command_takes_no_progress():
    from scratchformer.app.cli import _leaves, build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    leaves = _leaves(sub)
    assert {p.prog for p in leaves} >= {
        "scratchformer train",
        "scratchformer gradcheck",
        "scratchformer translate",
        "scratchformer plot schedule",
        "scratchformer data pairs",
    }
    lacking = [p.prog for p in leaves if "--no-progress" not in p._option_string_actions]
    assert not lacking


def test_a_stage_draws_a_bar_only_on_a_terminal(monkeypatch):
    from scratchformer.app import progress

    shown = []
    for on_terminal, bar in ((False, True), (True, False), (True, True)):
        monkeypatch.setattr(progress, "terminal", lambda stream=None, t=on_terminal: t)
        show = progress.stage(3, "x", "y", bar=bar)
        shown.append(type(show))
        show.close()
    assert shown[:2] == [Ticker, Ticker] and shown[2] is not Ticker


def test_a_log_file_gets_lines_and_no_bar(tmp_path):
    """A run whose stderr and stdout are files: log lines, no carriage return anywhere."""
    argv = [sys.executable, "-m", "scratchformer", "train", *TINY_RUN, "--steps", "4"]
    argv += ["--run-dir", str(tmp_path / "run"), "--set", "train.log_every=2"]
    p = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "\r" not in p.stdout + p.stderr
    assert "step 2/4 | loss " in p.stdout and "step 4/4 | dev | " in p.stdout
    # the loss trained is label-smoothed: the plain NLL beside it, and the header says so
    assert "loss: label-smoothed cross-entropy (eps_ls 0.1), the objective trained; nll: " in (
        p.stdout
    )
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("step ")]
    assert lines and all(" | nll " in ln for ln in lines)


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    """A two-step reverse run's checkpoint."""
    from scratchformer.app.cli import main

    run = tmp_path_factory.mktemp("tiny") / "run"
    assert main(["train", *TINY_RUN, "--run-dir", str(run), "--steps", "2", "--no-test"]) == 0
    return run / "checkpoints" / "checkpoint_2.npz"


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal (POSIX)")
def test_on_a_terminal_a_translation_never_shares_the_bar_s_line(tiny_checkpoint, tmp_path):
    """translate with stdout and stderr on one terminal: after the carriage returns of the
    bar, the translation is a line of its own, and the bar is gone at the end."""
    import fcntl
    import struct
    import termios

    src = tmp_path / "src.txt"
    src.write_text("abcdef\n", encoding="utf-8")
    primary, secondary = os.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))  # 80 columns
    argv = [sys.executable, "-m", "scratchformer", "translate", "--checkpoint"]
    argv += [str(tiny_checkpoint), "--input", str(src), "--greedy"]
    p = subprocess.Popen(argv, stdout=secondary, stderr=secondary, cwd=tmp_path)
    os.close(secondary)
    chunks = []
    while True:
        try:
            data = os.read(primary, 4096)
        except OSError:  # the other side closed
            break
        if not data:
            break
        chunks.append(data)
    assert p.wait(timeout=120) == 0
    os.close(primary)
    text = b"".join(chunks).decode()
    shown = [line.split("\r")[-1].strip() for line in text.replace("\r\n", "\n").split("\n")]
    translated = [s for s in shown if s and not s.startswith("translated ")]
    assert len(translated) == 1, text  # the translation, alone on its line
    assert "translating" not in translated[0], text
    assert shown[-2].startswith("translated 1 sentence in "), text


def test_a_reader_that_leaves_ends_the_command_quietly():
    """``scratchformer gradcheck | head -1``: when the reader closes the pipe, the command
    stops with the shell's SIGPIPE code (141) and writes no error (a busy machine may add
    progress lines and a note about the estimate, which are not errors: ``untimed``)."""
    argv = [sys.executable, "-m", "scratchformer", "gradcheck", "--samples", "2"]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = p.stdout.readline()
    p.stdout.close()  # the reader leaves after one line
    err = p.stderr.read()
    assert p.wait(timeout=120) == 141, err
    assert first.startswith("estimated time") and untimed(err) == "", err
