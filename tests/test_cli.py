"""The command-line interface: ``scratchformer gradcheck`` and error reporting."""

import subprocess
import sys

from scratchformer.cli import main


def test_gradcheck_cli_passes_and_prints_a_table(capsys):
    code = main(["gradcheck", "--norm", "pre", "--samples", "5"])
    out = capsys.readouterr().out
    assert code == 0
    assert "pre-LN" in out
    for name in ["embed.E", "decoder.layers.1.cross_attn.W_k", "encoder.norm.gamma"]:
        assert name in out
    assert "gradcheck: PASSED" in out


def test_gradcheck_cli_fails_on_an_impossible_tolerance(capsys):
    code = main(["gradcheck", "--norm", "post", "--samples", "3", "--tol", "1e-14"])
    out = capsys.readouterr().out
    assert code == 1
    assert "FAIL" in out and "gradcheck: FAILED" in out


def test_cli_module_entry_point_shows_help():
    r = subprocess.run(
        [sys.executable, "-m", "scratchformer", "--help"], capture_output=True, text=True
    )
    assert r.returncode == 0
    assert "gradcheck" in r.stdout
