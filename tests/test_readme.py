"""The README's Train block runs as printed, in order, on a fresh directory (with fewer
steps), and so does its Python training snippet (also shown on the API page), so that
neither can drift from the code again."""

import ast
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def block_after(heading: str) -> list[str]:
    """The commands of the first ```bash block after ``heading``, comments dropped."""
    text = README.read_text(encoding="utf-8")
    start = text.index(heading)
    block = re.search(r"```bash\n(.*?)```", text[start:], re.S).group(1)
    return [line.split(" # ")[0].strip() for line in block.splitlines() if line.strip()]


def shortened(command: str) -> str:
    """A train command with a hundredth of its steps (30 if it names none), a checkpoint
    every 5 steps and no test decoding; everything else as printed."""
    if not command.startswith("scratchformer train"):
        return command
    steps = re.search(r"--steps (\d+)", command)
    n = int(steps.group(1)) // 100 if steps else 30
    command = re.sub(r"--steps \d+", "", command)
    return f"{command} --steps {n} --checkpoint-every 5 --no-test --no-progress"


@pytest.mark.slow
def test_the_train_block_runs_in_order(tmp_path):
    """After the quick start's `scratchformer train`, which the block builds on."""
    commands = ["scratchformer train", *block_after("## Train, average, translate")]
    assert commands[1].startswith("scratchformer train") and len(commands) >= 5
    scratchformer = f"{shlex.quote(sys.executable)} -m scratchformer"
    for command in commands:
        run = shortened(command).replace("scratchformer ", f"{scratchformer} ", 1)
        run = run.replace("| scratchformer ", f"| {scratchformer} ")
        done = subprocess.run(run, shell=True, cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    assert (tmp_path / "runs/reverse/avg5.npz").is_file()


# -- Train from Python: the README's snippet, as printed ----------------------------------------
def python_block_after(heading: str) -> str:
    """The code of the first ```python block after ``heading``."""
    text = README.read_text(encoding="utf-8")
    start = text.index(heading)
    return re.search(r"```python\n(.*?)```", text[start:], re.S).group(1)


SNIPPET_HEADING = "## Train from Python"


def run_snippet(code: str, cwd: Path) -> list[str]:
    """The lines ``code`` prints, run by this Python in ``cwd`` (where it writes runs/)."""
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True,
                          text=True, timeout=1800)
    assert done.returncode == 0, f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return [line for line in done.stdout.splitlines() if line.strip()]


def test_the_api_page_shows_the_readme_s_training_snippet():
    snippet = python_block_after(SNIPPET_HEADING)
    api = (README.parent / "docs" / "api" / "train.md").read_text(encoding="utf-8")
    assert f"```python\n{snippet}```" in api


def test_the_readme_s_training_snippet_runs_with_fewer_steps(tmp_path):
    """As printed but for 20 steps and fewer strings (the slow test below runs all of
    it): it trains with the shipped config and the overrides, prints the final model's
    test accuracy, and translates with its checkpoint."""
    snippet = python_block_after(SNIPPET_HEADING)
    overrides = '"train": {"steps": 600}'
    assert overrides in snippet
    fewer = '"train": {"steps": 20}, "task": {"train_size": 500, "valid_size": 20, "test_size": 20}'
    printed = run_snippet(snippet.replace(overrides, fewer), tmp_path)
    assert 0.0 <= float(printed[-2]) <= 1.0
    outputs = ast.literal_eval(printed[-1])
    assert isinstance(outputs, list) and len(outputs) == 2
    assert (tmp_path / "runs/copy-py/checkpoints/final.npz").is_file()


@pytest.mark.slow
def test_the_readme_s_training_snippet_prints_what_its_comments_say(tmp_path):
    snippet = python_block_after(SNIPPET_HEADING)
    printed = run_snippet(snippet, tmp_path)
    assert float(printed[-2]) >= 0.85  # most of the copy task in its 600 steps (0.918 seen)
    promised = snippet.strip().splitlines()[-1].split("# ")[-1]
    assert printed[-1] == promised
