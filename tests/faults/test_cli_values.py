"""The command line's last line of defence, and a backend that cannot start.

Every error a user can cause has its own one-line message; anything else that reaches
the top is reported in one line too ("internal error: ..., run with --debug for the
traceback"), with a non-zero exit, and ``--debug`` (before or after the command) shows
the traceback instead. ``SCRATCHFORMER_BACKEND`` naming a backend that cannot start is
refused by the command line in one line, while the tests still run (on NumPy).
"""

import os
import subprocess
import sys

import pytest

from scratchformer import backend as B
from scratchformer import cli
from scratchformer.commands import gradcheck


@pytest.fixture
def broken_command(monkeypatch):
    """``scratchformer gradcheck`` made to fail the way a bug of ours would."""

    def boom(args):
        raise ValueError("operands could not be broadcast together\nsecond line")

    real = gradcheck.add_parser

    def add_parser(sub):
        real(sub)
        sub.choices["gradcheck"].set_defaults(func=boom)

    monkeypatch.setattr(gradcheck, "add_parser", add_parser)


def test_an_unexpected_error_is_one_line_with_a_way_to_the_traceback(broken_command, capsys):
    assert cli.main(["gradcheck"]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "scratchformer gradcheck: internal error: ValueError: operands could not be "
        "broadcast together (run with --debug for the traceback)"
    ]


@pytest.mark.parametrize("argv", [["--debug", "gradcheck"], ["gradcheck", "--debug"]])
def test_debug_shows_the_traceback(broken_command, argv):
    with pytest.raises(ValueError, match="broadcast"):
        cli.main(argv)


def test_out_of_memory_is_one_line(monkeypatch, capsys):
    real = gradcheck.add_parser

    def add_parser(sub):
        real(sub)
        sub.choices["gradcheck"].set_defaults(func=lambda args: (_ for _ in ()).throw(MemoryError))

    monkeypatch.setattr(gradcheck, "add_parser", add_parser)
    assert cli.main(["gradcheck"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "out of memory" in err[0]


def _run(args, env_backend):
    env = {**os.environ, "SCRATCHFORMER_BACKEND": env_backend}
    return subprocess.run(
        [sys.executable, "-m", "scratchformer", *args], capture_output=True, text=True, env=env
    )


@pytest.mark.skipif(B.cupy_available(), reason="CuPy with a GPU is available here")
def test_a_backend_that_cannot_start_is_refused_in_one_line():
    r = _run(["gradcheck"], "cupy")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("scratchformer gradcheck: error: SCRATCHFORMER_BACKEND=cupy:")
    assert "pip install 'scratchformer[gpu]'" in lines[0]
    assert _run(["--backend", "numpy", "--version"], "cupy").returncode == 0  # named: fine


def test_an_unknown_backend_name_is_refused_in_one_line():
    r = _run(["gradcheck"], "tpu")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown backend 'tpu'" in lines[0]


@pytest.mark.skipif(B.cupy_available(), reason="CuPy with a GPU is available here")
def test_the_tests_still_run_with_an_unusable_backend_named(tmp_path):
    """pytest collects and runs (on NumPy), reporting the CuPy copies as skipped."""
    test = tmp_path / "test_one.py"
    test.write_text(
        "from scratchformer import backend as B\n"
        "def test_numpy_is_active():\n"
        "    assert B.backend_name() == 'numpy'\n"
        "    assert 'SCRATCHFORMER_BACKEND=cupy' in str(B.env_error)\n"
    )
    env = {**os.environ, "SCRATCHFORMER_BACKEND": "cupy"}
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 passed" in r.stdout
