"""The README's Train block runs as printed, in order, on a fresh directory (with fewer
steps), so that it cannot drift from the code again."""

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
