"""How long ``scratchformer exercise check NAME`` takes, per exercise, and how far the
grader's tolerance sits from a right and from a wrong backward pass.

    OPENBLAS_NUM_THREADS=1 python benchmarks/exercise_check.py             # every exercise
    OPENBLAS_NUM_THREADS=1 python benchmarks/exercise_check.py --repeats 5 layernorm attention

For each exercise, the engine's own code is written into a temporary folder as a
learner's file (the reference solution) and checked as ``exercise check`` does: in a
child process, on the designed inputs and two of shapes drawn from a new seed each time
(read the file, run it, compare the inputs after each call, every catalogued mistake,
the generic diagnoses, the finite-difference check): the median and the fastest of
``--repeats`` checks; and the wall time of the whole command, ``scratchformer exercise
check NAME`` in a fresh process (Python's start and the imports included). Then the
margins of the tolerance: the largest relative error of the solution (a right backward:
rounding and truncation only), and the smallest "largest relative error" of the
catalogued mistakes (the subtlest wrong backward). A benchmark, not a test: nothing here
asserts on a timing.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from threadpoolctl import threadpool_limits

from scratchformer.engine import backend
from scratchformer.exercises import EXERCISES, files, isolate
from scratchformer.exercises.grade import grade
from scratchformer.exercises.spec import TOL, new_seed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", help="exercises (default: all)")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    names = args.names or list(EXERCISES)
    print(
        f"# {platform.processor() or platform.machine()}, Python {platform.python_version()}, "
        f"NumPy {backend.np.__version__}, OPENBLAS_NUM_THREADS="
        f"{os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}, {time.strftime('%Y-%m-%d')}"
    )
    print(
        f"{'exercise':<22} {'kind':<9} {'check, median':>13} {'fastest':>8} {'command':>8}  "
        f"{'solution err':>12}  {'subtlest mistake':>16}  tolerance {TOL:.0e}"
    )
    with tempfile.TemporaryDirectory() as tmp, threadpool_limits(1, user_api="blas"):
        where = Path(tmp)
        for name in names:
            ex = EXERCISES[name]
            path = files.exercise_file(where, ex)
            path.write_text(ex.solution_text())
            seconds = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                g = isolate.graded(ex, path, new_seed())
                seconds.append(time.perf_counter() - t0)
            assert g.passed, name
            t0 = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "scratchformer", "exercise", "check", name, "--dir", tmp],
                check=True, capture_output=True,
            )
            command = time.perf_counter() - t0
            right = max(err for _, err, _ in g.rows)
            wrong = min(_mistake_errors(ex, files.load(path, ex)), default=float("nan"))
            print(
                f"{name:<22} {ex.kind:<9} {statistics.median(seconds):>11.3f} s "
                f"{min(seconds):>6.3f} s {command:>6.2f} s  {right:>12.1e}  {wrong:>16.1e}"
            )


def _mistake_errors(ex, code: dict) -> list[float]:
    """Each catalogued mistake's largest relative error in the finite-difference check
    (left out: a mistake of the wrong shape, and a layer's overwritten gradients, which
    the accumulation check catches, not the finite differences)."""
    found = []
    for m in ex.mistakes:
        g = grade(ex, {**code, **m.code})
        if g.rows and not all(ok for _, _, ok in g.rows):
            found.append(max(err for _, err, _ in g.rows))
    return found


if __name__ == "__main__":
    main()
