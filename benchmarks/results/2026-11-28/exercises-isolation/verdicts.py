"""The verdicts of two runs of benchmarks/exercise_wrong_passes.py compared pass by pass,
and ``exercise check`` of every exercise's solution.

    python verdicts.py compare BEFORE.json AFTER.json     # per pass: the same status?
    PYTHONPATH=<tree> python verdicts.py solutions         # check, every file the solution

``compare`` prints the statuses' counts of each run, the passes whose status (passing,
failing, broken) differs, and those whose named / pointed / unknown class (and, for the
fresh set, the verdict: named, pointed, unnamed, passed) differs.
``solutions`` writes each exercise's solution into a temporary folder and runs
``scratchformer exercise check`` there (with a fixed seed), printing its output and
exit status. Nothing here asserts.
"""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def compare(before: str, after: str) -> None:
    a, b = (json.loads(Path(p).read_text()) for p in (before, after))
    print(f"before: {before} ({len(a)} passes); after: {after} ({len(b)} passes)")
    for label, rows in (("before", a), ("after", b)):
        print(f"  {label} statuses: {dict(collections.Counter(r['status'] for r in rows))}")
    keys = ("named", "pointed", "unknown") + (("verdict",) if "verdict" in a[0] else ())
    status = [(i, x, y) for i, (x, y) in enumerate(zip(a, b)) if x["status"] != y["status"]]
    kind = [(i, x, y) for i, (x, y) in enumerate(zip(a, b))
            if str([x.get(k) for k in keys]) != str([y.get(k) for k in keys])]
    print(f"  same status: {len(a) - len(status)} of {len(a)}; "
          f"same {'/'.join(keys)}: {len(a) - len(kind)} of {len(a)}")
    for i, x, y in status:
        print(f"  status differs, #{i + 1} {x['exercise']}: {x['pass']}: "
              f"{x['status']} -> {y['status']} ({y['says'][:120]})")
    for i, x, y in kind:
        print(f"  class differs, #{i + 1} {x['exercise']}: {x['pass']}: "
              f"{[x.get(k) for k in keys]} -> {[y.get(k) for k in keys]}\n"
              f"    before: {x['says'][:150]}\n    after:  {y['says'][:150]}")


WRITE = """\
import pathlib, sys
from scratchformer.exercises import EXERCISES
for n, ex in EXERCISES.items():
    pathlib.Path(sys.argv[1], n + ".py").write_text(ex.solution_text())
"""


def solutions() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "exercises"
        folder.mkdir()
        subprocess.run([sys.executable, "-c", WRITE, str(folder)], check=True)
        p = subprocess.run([sys.executable, "-m", "scratchformer", "exercise", "check",
                            "--seed", "12345", "--time-limit", "60"], cwd=tmp,
                           capture_output=True, text=True)
        print(p.stdout.replace(tmp, "<tmp>").rstrip())
        if p.stderr.strip():
            print("[stderr]\n" + p.stderr.rstrip())
        print(f"[exit status {p.returncode}]")


if __name__ == "__main__":
    if sys.argv[1:2] == ["compare"]:
        compare(sys.argv[2], sys.argv[3])
    elif sys.argv[1:2] == ["solutions"]:
        solutions()
    else:
        sys.exit(__doc__)
