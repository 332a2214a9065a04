"""Every script in examples/ runs, exits 0 and prints what it shows (so none of them rots)."""

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.py"))

#: a line each example must print: the claim it demonstrates
EXPECTED = {
    "02_attention_head.py": "every gradient PROVEN",
    "03_why_scale_by_sqrt_dk.py": "[ok] scaling gives at least 5x more gradient",
    "04_masked_softmax.py": "[ok] softmax_forward: fully masked rows are exactly 0",
    "05_copy_task.py": "[ok] held-out exact-sequence accuracy above 80%",
}


def test_the_study_examples_exist():
    names = {p.name for p in EXAMPLES}
    assert set(EXPECTED) <= names


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(script, tmp_path):
    r = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert r.returncode == 0, f"{script.name} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    assert "FAILED" not in r.stdout
    if script.name in EXPECTED:
        assert EXPECTED[script.name] in r.stdout
    assert not list(tmp_path.iterdir()), f"{script.name} left files in its working directory"
