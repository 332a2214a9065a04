"""Run ``scratchformer exercise check`` on every wrong pass of the set and classify it.

    PYTHONPATH=$PWD python benchmarks/results/2026-11-28/exercises-names/run_wrong_passes.py \
        --out before [--pause 1] [--only 27,30]

For each file of wrong_passes/ (listed in wrong_passes/manifest.json), one check in a
fresh process (``--seed 1 --no-progress``, the same drawn shapes every run), then:

- rejected: the verdict line says FAILED and the status is not 0;
- named: the diagnosis (the ``found:``, ``recognised:``, ``broken:`` lines and the
  one-line messages of the output, not the hints, not the tables; the file's name and
  the inputs' labels taken out) matches one of the manifest's
  ``named`` patterns: it says what the mistake is;
- pointed: not named, but the diagnosis matches one of the ``pointed`` patterns: it
  names the wrong term, input, gradient or line without saying what is wrong there;
- unnamed: rejected with no diagnosis that names or points ("not a mistake we know").

Writes <out>.json (each pass: status, class, diagnosis, the whole output) and <out>.md
(the table), beside this script.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SET = HERE / "wrong_passes"
ROOT = HERE.parents[3]
LABEL = re.compile(r"^  ([A-Za-z][\w '-]*): ")
NOT_DIAGNOSIS = ("hint", "look for", "not a mistake we know")


def diagnosis(output: str) -> str:
    """The lines of the output that say what was found (``found:``, ``recognised:``,
    ``broken:``, a one-line message), with their continuations: not the table of
    gradients, not the entries, not the hints."""
    keep, on = [], False
    for line in output.splitlines():
        if line.startswith("  ") and not line.startswith("   "):
            text = line.strip()
            m = LABEL.match(line)
            label = m.group(1).strip().lower() if m else ""
            on = not (
                label in NOT_DIAGNOSIS
                or text.startswith(("checked on ", "FAILED (", "PASSED (", "your code printed"))
                or re.match(r"^\S+ is wrong at \d+ of \d+ entries", text)
            )
            if on:
                keep.append(text)
            continue
        if on and line.startswith("        "):
            keep.append(line.strip())
        else:
            on = False
    return "\n".join(keep)


_LABELS: dict = {}


def labels(exercise: str) -> list[str]:
    """The exercise's input labels (seed 1), longest first: words in them ("dropout
    0.25", "eps 0.1") say which input, not what is wrong."""
    if exercise not in _LABELS:
        from scratchformer.exercises import EXERCISES
        from scratchformer.exercises.spec import drawing

        with drawing(1):
            found = EXERCISES[exercise].case_labels()
        _LABELS[exercise] = sorted(found, key=len, reverse=True)
    return _LABELS[exercise]


def classify(entry: dict, rc: int, output: str) -> tuple[str, str]:
    diag = diagnosis(output)
    rejected = rc != 0 and "verdict: FAILED" in output
    if not rejected:
        return "accepted", diag
    flat = " ".join(diag.split())
    # the file's name and the inputs' labels are not the diagnosis's words
    flat = flat.replace(f"wrong_passes/{entry['file']}", "<file>")
    for label in labels(entry["exercise"]):
        flat = flat.replace(" ".join(label.split()), "<input>")
    if any(re.search(p, flat, re.I) for p in entry["named"]):
        return "named", diag
    if any(re.search(p, flat, re.I) for p in entry["pointed"]):
        return "pointed", diag
    return "unnamed", diag


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, help="name of the result files (before, after)")
    ap.add_argument("--pause", type=float, default=0.0, help="seconds between checks")
    ap.add_argument("--only", default="", help="comma-separated numbers of passes")
    ap.add_argument("--reclassify", action="store_true",
                    help="classify the outputs stored in <out>.json again (no check is run)")
    args = ap.parse_args()
    if args.reclassify:
        stored = json.loads((HERE / f"{args.out}.json").read_text())["results"]
        results = []
        for r in stored:
            cls, diag = classify(r, r["rc"], r["output"])
            results.append({**r, "class": cls, "diagnosis": diag})
        write(args.out, results)
        return
    manifest = json.loads((SET / "manifest.json").read_text())
    only = {int(n) for n in args.only.split(",") if n}
    env = dict(os.environ, PYTHONPATH=str(ROOT), OPENBLAS_NUM_THREADS="1")
    results = []
    for i, entry in enumerate(manifest, 1):
        if only and i not in only:
            continue
        cmd = [sys.executable, "-m", "scratchformer", "exercise", "check",
               str(SET / entry["file"]), "--seed", "1", "--no-progress"]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=HERE,
                              timeout=300)
        wall = time.perf_counter() - t0
        output = proc.stdout + proc.stderr
        cls, diag = classify(entry, proc.returncode, output)
        results.append({**entry, "rc": proc.returncode, "class": cls, "diagnosis": diag,
                        "seconds": round(wall, 2), "output": output})
        print(f"{i:3d} {cls:8s} {entry['file']}", flush=True)
        if args.pause:
            time.sleep(args.pause)
    write(args.out, results)


def write(out: str, results: list) -> None:
    counts = {c: sum(r["class"] == c for r in results)
              for c in ("named", "pointed", "unnamed", "accepted")}
    n = len(results)
    (HERE / f"{out}.json").write_text(
        json.dumps({"counts": counts, "n": n, "results": results}, indent=1) + "\n")
    lines = [f"# {out}: {n} wrong passes", "",
             f"rejected {n - counts['accepted']}/{n} "
             f"({100 * (n - counts['accepted']) / max(n, 1):.0f}%), "
             f"named {counts['named']} ({100 * counts['named'] / max(n, 1):.0f}%), "
             f"pointed {counts['pointed']}, unnamed {counts['unnamed']}, "
             f"accepted {counts['accepted']}", "",
             "| # | file | intended mistake | class | diagnosis (first line) |",
             "|---|---|---|---|---|"]
    for r in results:
        first = (r["diagnosis"].splitlines() or [""])[0].replace("|", "\\|")[:160]
        lines.append(f"| {r['file'][:2]} | `{r['file']}` | {r['mistake']} | {r['class']} "
                     f"| {first} |")
    (HERE / f"{out}.md").write_text("\n".join(lines) + "\n")
    print(lines[2])


if __name__ == "__main__":
    main()
