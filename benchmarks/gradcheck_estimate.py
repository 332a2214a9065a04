"""The gradient checker's time estimates against its actual times, for the README's three
``scratchformer gradcheck`` lines.

    python benchmarks/gradcheck_estimate.py              # as the machine is
    python benchmarks/gradcheck_estimate.py --beside     # with a training run beside it

Each line runs as its own process (``--no-progress``), on the command's default of one
BLAS thread, as a user would run it; each check (one per norm) prints its estimate before it
starts and its time beside the estimate when it ends, and both are read from its output.
``--beside`` starts ``scratchformer train`` (the default task, one BLAS thread, in a
temporary folder) first and stops it at the end: another job on the machine. Prints one
row per check: estimate, actual, actual / estimate. A benchmark, not a test: no ratio
fails anything.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import tempfile
import time

LINES = [
    [],
    ["--explain", "decoder.layers.0.cross_attn.W_k"],
    ["--preset", "small", "--directions", "1"],
]
UNITS = {"ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0}
#: the end of a check: "(6.4 s; estimated 4.1 s)", "step h = 1e-07 ..., 26 s; estimated
#: 31 s", "time: 0.17 s; estimated 0.11 s" (a check that shared its cores adds "; 14 s of
#: CPU time")
TOOK = re.compile(r"([\d.e+-]+) (ms|s|min|h); estimated ([\d.e+-]+) (ms|s|min|h)")


def seconds(value: str, unit: str) -> float:
    return float(value) * UNITS[unit]


def run_line(args: list[str]) -> list[tuple[float, float]]:
    """``[(estimate, actual)]`` of each check the line runs, in seconds."""
    cmd = [sys.executable, "-m", "scratchformer", "gradcheck", *args, "--no-progress"]
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return [(seconds(m[3], m[4]), seconds(m[1], m[2])) for m in TOOK.finditer(p.stdout + p.stderr)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--beside", action="store_true", help="a training run beside the checks")
    args = ap.parse_args()
    job = None
    folder = tempfile.TemporaryDirectory()
    if args.beside:
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
        cmd = [sys.executable, "-m", "scratchformer", "train", "--steps", "1000000", "--no-test"]
        job = subprocess.Popen(
            [*cmd, "--no-progress"], cwd=folder.name, env=env, stdout=subprocess.DEVNULL
        )
        time.sleep(5)  # under way
    load = os.getloadavg()[0]
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load {load:.2f}")
    print("beside: " + ("a training run (one BLAS thread)" if job else "nothing of ours"))
    print(f"{'scratchformer gradcheck':<58} {'estimate':>9} {'actual':>9} {'ratio':>6}")
    try:
        for line in LINES:
            for i, (estimate, actual) in enumerate(run_line(line)):
                name = (" ".join(line) or "(no options)") + (f", check {i + 1}" if i else "")
                print(f"{name:<58} {estimate:>8.2f}s {actual:>8.2f}s {actual / estimate:>6.2f}")
    finally:
        if job is not None:
            job.kill()
            job.wait()
        folder.cleanup()
    print(f"load at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
