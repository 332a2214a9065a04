"""The verdict of ``exercise train`` with every exercise's solution, and the most seconds
each exercise's code took in one whole-model gradient (its time limit applies to that):

    PYTHONPATH=TREE python verdict_seconds.py

The layer exercises call the learner's op passes inside the learner's process: their
seconds are the layers'.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from scratchformer.app.train.config import build
from scratchformer.exercises import EXERCISES, files, training, verdict


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp) / "exercises"
        where.mkdir()
        for ex in EXERCISES.values():
            (where / f"{ex.name}.py").write_text(ex.solution_text())
        texts = {ex.name: (where / f"{ex.name}.py", files.read(where / f"{ex.name}.py"))
                 for ex in EXERCISES.values()}
        cfg = build([({"name": "x", "run_dir": str(where / "runs" / "x")}, "t")])
        b, model, _ = verdict.batch_and_model(cfg)
        t0 = time.perf_counter()
        v = training.judged(where, texts, b, model, {}, 10.0)
        wall = time.perf_counter() - t0
    print(verdict.lines(v)[0])
    print(f"the verdict's wall time: {wall:.1f} s")
    print("the most seconds of each exercise's code in one whole-model gradient (limit 10 s):")
    for name, seconds in sorted(v["spent"].items(), key=lambda kv: -kv[1]):
        print(f"  {name or '(loading the files)':<22} {seconds:6.2f}")


if __name__ == "__main__":
    main()
