"""``scratchformer exercise check NAME`` wall time from a fresh process, per exercise, the
engine's solution as the learner's file, median of 3, two trees interleaved (each
exercise: tree A, tree B, three times), the load average before each exercise.

    python check_time.py TREE_A TREE_B [NAME ...] > check_time.txt

Every exercise unless NAMEs are given. Nothing here asserts; the machine's load is
printed beside every row.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WRITE = """\
import pathlib, sys
from scratchformer.exercises import EXERCISES
for n, ex in EXERCISES.items():
    pathlib.Path(sys.argv[1], n + ".py").write_text(ex.solution_text())
    print(n)
"""


def main(trees: list[str], only: list[str]) -> None:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "exercises"
        folder.mkdir()
        names = subprocess.run(
            [sys.executable, "-c", WRITE, str(folder)], env={**env, "PYTHONPATH": trees[-1]},
            capture_output=True, text=True, check=True,
        ).stdout.split()
        unknown = sorted(set(only) - set(names))
        if unknown:
            sys.exit(f"check_time.py: no exercise {', '.join(unknown)}")
        print(f"trees: A {trees[0]}, B {trees[1]}; python {sys.version.split()[0]}; "
              f"{os.cpu_count()} cores")
        print(f"{'exercise':<22} {'A median':>9} {'B median':>9}   "
              "A runs / B runs (s), verdict line of B, load")
        for name in only or names:
            load = os.getloadavg()[0]
            times: dict = {0: [], 1: []}
            last = ""
            for _ in range(3):
                for i, tree in enumerate(trees):
                    t0 = time.perf_counter()
                    p = subprocess.run(
                        [sys.executable, "-m", "scratchformer", "exercise", "check", name],
                        cwd=tmp, env={**env, "PYTHONPATH": tree}, capture_output=True,
                        text=True,
                    )
                    times[i].append(time.perf_counter() - t0)
                    if i == 1:
                        last = (p.stdout.strip().splitlines() or [f"status {p.returncode}"])[-1]
            a, b = (statistics.median(times[i]) for i in (0, 1))
            runs = " / ".join(" ".join(f"{x:.2f}" for x in times[i]) for i in (0, 1))
            print(f"{name:<22} {a:>8.2f}s {b:>8.2f}s   {runs}   {last}   load {load:.1f}",
                  flush=True)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main([str(Path(t).resolve()) for t in sys.argv[1:3]], sys.argv[3:])
