"""``scratchformer exercise``: the learner's folder and what each action prints.

Every test runs in a temporary current folder: the learner's files go to its
``exercises/`` (or ``--dir``), and nothing may appear anywhere else.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from scratchformer.app.cli import main
from scratchformer.exercises import EXERCISES

WRONG_LAYERNORM = """\
    xhat, rstd, gamma = cache
    D = xhat.shape[-1]
    dxhat = dout * gamma
    dx = rstd * (dxhat - dxhat.mean(axis=-1, keepdims=True))
    return dx, (dout * xhat).reshape(-1, D).sum(0), dout.reshape(-1, D).sum(0)
"""
SUMS = "dout.reshape(-1, dout.shape[-1]).sum(0)"  # dgamma, dbeta of the right shape
STUB = '    raise NotImplementedError("layernorm_backward: not written yet")\n'


@pytest.fixture
def here(tmp_path, monkeypatch):
    """A fresh current folder."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def every_file(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main(["exercise", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def fill(path: Path, body: str) -> None:
    text = path.read_text()
    assert STUB in text
    path.write_text(text.replace(STUB, body))


def test_start_check_fix_pass_and_list(here, capsys):
    """The learner's path through one exercise, and nothing written outside their folder."""
    code, out, _ = run(capsys, "start", "layernorm")
    assert code == 0 and "wrote exercises/layernorm.py" in out
    path = here / "exercises" / "layernorm.py"
    text = path.read_text()
    assert "def layernorm_forward(x, gamma, beta" in text  # the forward, as the engine has it
    assert "def layernorm_backward(dout, cache):" in text and "cache.rstd   (..., 1)" in text
    assert "docs/derivations.md#layer-norm" in text and "derivations.html#layer-norm" in text

    code, out, _ = run(capsys, "check", "layernorm")
    assert code == 1 and "not written yet" in out

    fill(path, WRONG_LAYERNORM)
    code, out, _ = run(capsys, "check", "layernorm")
    assert code == 1 and "dx                3" in out.replace("e-01", "") or "WRONG" in out
    assert "recognised: layer norm without its variance term" in out
    assert "hint: var depends on x too" in out and "FAILED" in out
    assert "dx is wrong at" in out and "numeric" in out  # the entries, --explain style

    path.write_text(path.read_text().replace(
        "    dx = rstd * (dxhat - dxhat.mean(axis=-1, keepdims=True))\n",
        "    dx = rstd * (dxhat - dxhat.mean(axis=-1, keepdims=True)"
        " - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True))\n",
    ))
    code, out, _ = run(capsys, "check", "layernorm")
    assert code == 0 and "PASSED" in out and "recognised" not in out

    code, out, _ = run(capsys, "list")
    assert code == 0
    line = next(x for x in out.splitlines() if " layernorm " in x)
    assert "passing" in line
    assert (
        f"1 of {len(EXERCISES)} exercises passing. Next: scratchformer exercise start linear" in out
    )
    run(capsys, "start", "relu")  # started, not written: it comes before a new one
    code, out, _ = run(capsys, "list")
    assert "Next: scratchformer exercise check relu" in out
    (here / "exercises" / "relu.py").unlink()
    assert every_file(here) == {"exercises/layernorm.py"}


def test_start_never_overwrites(here, capsys):
    run(capsys, "start", "relu")
    path = here / "exercises" / "relu.py"
    path.write_text("mine\n")
    code, out, err = run(capsys, "start", "relu")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "exists: it is not overwritten" in err
    assert path.read_text() == "mine\n"


@pytest.mark.parametrize(
    "body, expected",
    [
        ("    return dout +* 2\n", "exercises/layernorm.py, line "),
        ("    raise KeyError('boom')\n", "in layernorm_backward: KeyError: 'boom'"),
        (f"    return dout[..., :2], {SUMS}, {SUMS}\n", "dx has shape (2, 3, 2); expected"),
        (f"    return dout / 0.0, {SUMS}, {SUMS}\n", "dx holds NaN or inf"),
        ("    return dout\n", "returned 1 value(s); expected 3: (dx, dgamma, dbeta)"),
        (f"    return dout.astype('float32'), {SUMS}, {SUMS}\n", "dx has dtype float32; expected"),
    ],
    ids=["syntax error", "raises", "wrong shape", "NaN", "too few", "wrong dtype"],
)
def test_a_broken_file_gets_one_line(here, capsys, body, expected):
    run(capsys, "start", "layernorm")
    fill(here / "exercises" / "layernorm.py", body)
    code, out, err = run(capsys, "check", "layernorm")
    assert code == 1 and err == ""
    assert "Traceback" not in out
    report, _, seed = out.strip().rpartition("\n\n")
    assert seed.startswith("shapes drawn with seed ")  # the last line: how to replay them
    lines = report.splitlines()
    assert lines[0] == "layernorm: layer norm (exercises/layernorm.py)"
    assert expected in lines[1], out
    assert len(lines) <= 3, out  # the problem, and FAILED for a result of the wrong kind


def test_an_error_while_the_file_loads_is_one_line(here, capsys):
    run(capsys, "start", "relu")
    path = here / "exercises" / "relu.py"
    path.write_text(path.read_text() + "\nimport no_such_module_here\n")
    code, out, _ = run(capsys, "check")
    assert code == 1
    assert out.strip().splitlines()[1].startswith("  broken: exercises/relu.py, line ")
    assert "ModuleNotFoundError" in out and "Traceback" not in out


def test_check_a_file_by_its_path_and_unknown_names(here, capsys):
    run(capsys, "start", "dropout", "--dir", "mine")
    moved = here / "elsewhere.py"
    (here / "mine" / "dropout.py").rename(moved)
    code, out, _ = run(capsys, "check", "elsewhere.py")
    assert code == 1 and out.startswith("dropout: inverted dropout (elsewhere.py)")
    code, _, err = run(capsys, "start", "layer_norm")
    assert code == 2 and "no exercise named 'layer_norm'; did you mean layernorm?" in err
    code, _, err = run(capsys, "check", "attention")
    assert code == 2 and "exercises/attention.py does not exist" in err
    assert every_file(here) == {"elsewhere.py"}


def test_hints_come_one_at_a_time_and_are_kept_in_the_folder(here, capsys):
    ex = EXERCISES["softmax"]
    for n in range(1, len(ex.hints) + 1):
        if n == len(ex.hints):  # the last gives the formula away: only when asked
            code, out, _ = run(capsys, "hint", "softmax")
            assert code == 0 and "gives the formula away" in out and "--spoil" in out
            code, out, _ = run(capsys, "hint", "softmax", "--spoil")
        else:
            code, out, _ = run(capsys, "hint", "softmax")
        assert code == 0 and f"hint {n} of {len(ex.hints)} for softmax" in out
        assert ex.hints[n - 1][:40] in " ".join(out.split())
    code, out, _ = run(capsys, "hint", "softmax")
    assert "all 3 hints of softmax are shown" in out
    text = (here / "exercises" / "softmax.hints.md").read_text()
    assert text.count("## Hint ") == len(ex.hints)
    assert every_file(here) == {"exercises/softmax.hints.md"}


def test_solution_shows_the_engines_code_and_derivation(here, capsys):
    code, out, _ = run(capsys, "solution", "layernorm")
    assert code == 1 and "not printed" in out and "--yes" in out  # asked; nobody answered
    code, out, _ = run(capsys, "solution", "layernorm", "--yes")
    assert code == 0
    assert "dx = rstd * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat)" in out  # the engine's
    assert "## Layer norm" in out and "the chain rule through" in out
    assert every_file(here) == set()


def test_nothing_is_written_without_a_folder_and_check_says_so(here, capsys):
    code, out, _ = run(capsys, "check")
    assert code == 1 and "no exercise started in exercises/" in out
    code, _, _ = run(capsys, "list", "--dir", "elsewhere")
    assert code == 0
    assert every_file(here) == set() and not os.listdir(here)


def test_check_from_inside_the_folder_finds_the_files(here, capsys):
    run(capsys, "start", "relu")
    os.chdir(here / "exercises")
    code, out, err = run(capsys, "check", "relu")
    assert code == 1 and "relu: ReLU (relu.py)" in out and "not written yet" in out, out + err
    assert "exercise start" not in out + err


def test_a_list_returned_and_a_not_implemented_elsewhere_say_what_they_are(here, capsys):
    run(capsys, "start", "layernorm")
    path = here / "exercises" / "layernorm.py"
    fill(path, f"    return [dout, {SUMS}, {SUMS}]\n")
    code, out, _ = run(capsys, "check", "layernorm")
    assert code == 1 and "returned a list: return an array, or a tuple of them" in out
    helper = here / "helper.py"
    helper.write_text("def step(x):\n    raise NotImplementedError('half done')\n")
    text = path.read_text().replace(
        "EXERCISE = ", f"import sys\nsys.path.insert(0, {str(here)!r})\nEXERCISE = ", 1
    )
    path.write_text(
        text.replace(
            f"    return [dout, {SUMS}, {SUMS}]\n",
            "    import helper\n    return helper.step(dout)\n",
        )
    )
    code, out, _ = run(capsys, "check", "layernorm")
    assert (
        code == 1 and "not written" not in out and "NotImplementedError in helper.py, line 2" in out
    ), out
