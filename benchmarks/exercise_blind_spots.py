"""The grader's blind spots of issue "Exercises, second pass", run as a learner runs them:
each wrong pass written into a learner's folder and ``scratchformer exercise check NAME``
run in a fresh process with the package of the tree given, its output and exit status
kept as printed (a hang is stopped after ``--wall`` seconds).

    python benchmarks/exercise_blind_spots.py /path/to/tree > blind_spots.txt

The passes are the rows of exercise_wrong_passes.py with these labels. A benchmark, not
a test: nothing here asserts.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from exercise_wrong_passes import WRONG, file_for  # noqa: E402

SPOTS = [
    ("dropout", "in place: dout *= mask"),
    ("linear", "zeroes cache.x after use"),
    ("encoder_layer", "dx += into exit_backward's result"),
    ("linear", "a shape written in: reshape(6, ...)"),
    ("relu", "calls exit()"),
    ("gelu", "an endless loop"),
    ("linear", "imports the engine's linear_backward"),
]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("tree", help="the repository whose scratchformer is run")
    p.add_argument("--wall", type=float, default=30.0, help="seconds before a check is stopped")
    args = p.parse_args()
    env = {**os.environ, "PYTHONPATH": str(Path(args.tree).resolve()), "OPENBLAS_NUM_THREADS": "1"}
    sys.path.insert(0, str(Path(args.tree).resolve()))
    from scratchformer.exercises import EXERCISES

    rows = {(name, label): code for name, label, _, code in WRONG}
    for name, label in SPOTS:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "exercises"
            folder.mkdir()
            (folder / f"{name}.py").write_text(file_for(EXERCISES[name], rows[(name, label)]))
            commands = [["check", name]]
            if label == "calls exit()":  # list is ended by it too, before
                (folder / "layernorm.py").write_text(EXERCISES["layernorm"].file_text())
                commands = [["check"], ["list"]]
            for command in commands:
                argv = [sys.executable, "-m", "scratchformer", "exercise", *command]
                print(f"## {name}: {label}\n\n$ scratchformer exercise {' '.join(command)}")
                try:
                    done = subprocess.run(argv, cwd=tmp, env=env, capture_output=True, text=True,
                                          timeout=args.wall)
                    out, rc = done.stdout + done.stderr, done.returncode
                except subprocess.TimeoutExpired as e:
                    out = (
                        (e.stdout or b"").decode()
                        if isinstance(e.stdout, bytes)
                        else (e.stdout or "")
                    )
                    out += f"\n[still running after {args.wall:g} s: stopped by this script]"
                    rc = "none (hung)"
                print(f"{out.rstrip()}\n[exit status: {rc}]\n")


if __name__ == "__main__":
    main()
