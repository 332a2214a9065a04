"""The command-line interface: ``scratchformer gradcheck`` and error reporting."""

import re
import subprocess
import sys

from scratchformer.app.cli import main


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


def test_bare_scratchformer_shows_its_help(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: scratchformer") and "translate" in out


def test_version_and_plain_help(capsys):
    """`--version`; help texts read as plain text (no reStructuredText marks) and their
    examples are whole commands (no line continuation swallowed)."""
    import pytest  # noqa: PLC0415

    from scratchformer import __version__  # noqa: PLC0415
    from scratchformer.app.cli import COMMANDS  # noqa: PLC0415

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"scratchformer {__version__}"
    for module in COMMANDS:
        name = module.rsplit(".", 1)[1]
        with pytest.raises(SystemExit):
            main([name, "--help"])
        text = capsys.readouterr().out
        assert "``" not in text, name
        description = text.split("options:")[0]
        assert not re.search(r"\d {4,}--\w", description), name  # a "\\" lost at a line end
    with pytest.raises(SystemExit):
        main(["data", "--help"])
    text = capsys.readouterr().out
    assert "scratchformer data bible" in text and "scratchformer data pairs my.tsv" in text


def test_the_package_version_is_written_once():
    """pyproject.toml takes the version from scratchformer.__version__."""
    from pathlib import Path  # noqa: PLC0415

    pyproject = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject and "version = {attr" in pyproject
