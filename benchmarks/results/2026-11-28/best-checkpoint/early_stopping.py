"""Early stopping, and kill -9 with --resume changing nothing of it.

Two runs of the same command, each in a folder of its own (so that the configuration
they store is the same, ``runs/early``):

    scratchformer train --config copy --name early --eval-every 50 --patience 3 \
        --tensorboard --no-progress

``reference/`` runs it once; ``killed/`` is killed with SIGKILL right after the
validations of steps 500 and 800 have been logged (before their next checkpoint, so that
a best.npz of steps the resumed run takes again may be on disk) and continued each
time with ``scratchformer train --name early --resume --no-progress``. Printed: the
stopping lines, the final-model lines, the SHA-256 of best.npz and final.npz of each,
and the early-stopping state of each last checkpoint.

    python benchmarks/results/2026-11-28/best-checkpoint/early_stopping.py WORKDIR
"""

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

TRAIN = ["train", "--config", "copy", "--name", "early", "--eval-every", "50", "--patience", "3"]
TRAIN += ["--tensorboard", "--no-progress"]
RESUME = ["train", "--name", "early", "--resume", "--no-progress"]
KILL_AFTER = [500, 800]  # the steps whose validation, once logged, triggers a kill -9


def command(args):
    return [sys.executable, "-m", "scratchformer", *args]


def validated(run: Path) -> list:
    path = run / "metrics.jsonl"
    if not path.exists():
        return []
    steps = []
    for line in path.read_text().splitlines():
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        if r.get("kind") == "valid":
            steps.append(r["step"])
    return steps


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def state(ckpt: Path) -> dict:
    with np.load(ckpt, allow_pickle=False) as z:
        header = json.loads(z["__meta__"].tobytes().decode())
    return header["train_state"]["best"]


def summary(folder: Path, log: str) -> dict:
    ckpts = folder / "runs/early/checkpoints"
    last = max(ckpts.glob("checkpoint_*.npz"), key=lambda p: int(p.stem.split("_")[1]))
    lines = log.splitlines()
    return {
        "stopped": [x for x in lines if x.startswith("stopped early")],
        "final": [x for x in lines if x.startswith("final model:")],
        "best.npz sha256": sha(ckpts / "best.npz"),
        "final.npz sha256": sha(ckpts / "final.npz"),
        "last checkpoint": last.name,
        "its early-stopping state": state(last),
    }


def main(work: Path) -> int:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    ref, killed = work / "reference", work / "killed"
    for d in (ref, killed):
        d.mkdir(parents=True, exist_ok=False)
    t0 = time.time()
    a = subprocess.run(command(TRAIN), cwd=ref, env=env, capture_output=True, text=True)
    print(f"reference: exit {a.returncode}, {time.time() - t0:.0f} s")
    (ref / "log.txt").write_text(a.stdout + a.stderr)
    logs = []
    args = TRAIN
    for step in KILL_AFTER:
        out = open(killed / f"log_{len(logs)}.txt", "w")
        p = subprocess.Popen(command(args), cwd=killed, env=env, stdout=out, stderr=out)
        while step not in validated(killed / "runs/early") and p.poll() is None:
            time.sleep(0.05)
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait()
            ckpts = sorted(
                int(q.stem.split("_")[1])
                for q in (killed / "runs/early/checkpoints").glob("checkpoint_*.npz")
            )
            print(f"killed (SIGKILL) after the validation of step {step} was logged; "
                  f"newest checkpoint then: step {ckpts[-1]}")
        else:
            print(f"the run ended before step {step}'s validation: no kill")
        out.close()
        logs.append((killed / f"log_{len(logs)}.txt").read_text())
        args = RESUME
    b = subprocess.run(command(RESUME), cwd=killed, env=env, capture_output=True, text=True)
    print(f"killed run, last resume: exit {b.returncode}")
    (killed / "log_last.txt").write_text(b.stdout + b.stderr)
    one, two = summary(ref, a.stdout), summary(killed, b.stdout)
    for name, s in (("reference", one), ("killed twice and resumed", two)):
        print(f"\n== {name}")
        for k, v in s.items():
            print(f"{k}: {json.dumps(v) if isinstance(v, dict) else v}")
    same = {k: one[k] == two[k] for k in one}
    print(f"\nthe same: {same}")
    return 0 if all(same.values()) else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
