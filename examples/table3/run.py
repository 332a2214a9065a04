"""The paper's Table 3 (model variations) in the small, on the Bible corpus.

Every row is the bible-cpu model (3+3 post-LN layers, d_model 256, h 4, d_ff 1024,
dropout 0.1, label smoothing 0.1, sinusoidal positions) with one change, trained for the
same 400 steps of 4,096-token batches on one core, two rows at a time. As in the paper's
Table 3 the test set is decoded from the last checkpoint, with no checkpoint averaging,
but greedily: at 400 steps the models still loop to the length limit, where beam 4 took
over 6 minutes a row on a shared core (greedy: about a minute). The dev perplexity is the
trainer's validation at the last step (per BPE token, as the paper's is per wordpiece).

    pip install -e '.[data,bpe,bleu,plot]'
    scratchformer data bible
    python examples/table3/run.py train        # ~1h45 on 2 cores: runs/t3-*/
    python examples/table3/run.py report       # the table (Markdown) and the plot

``report`` tests every row against the baseline with sacreBLEU's paired bootstrap
(1,000 resamples of the test verses). Rows already trained are skipped by ``train``.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

STEPS = 400
BASE = [  # every row: the same steps, schedule and batches; the paper's schedule with
    # warmup 200 and its peak scaled to bible-cpu's (2.65e-3 at d_model 256)
    "--config", "bible-cpu", "--steps", str(STEPS), "--warmup", "200", "--lr-factor", "0.6",
    "--checkpoint-every", str(STEPS), "--eval-every", "0", "--log-every", "50",
    "--threads", "1", "--no-test", "--no-progress", "--overwrite",
    "--set", "train.average_last=0",
]

#: (run, Table 3 row, what changes, seed, --set overrides); longest runs first, so the
#: two queues end together.
ROWS = [
    ("t3-h32", "A", "h 32, d_k = d_v = 8", 1, {"model.h": 32}),
    ("t3-h16", "A", "h 16, d_k = d_v = 16", 1, {"model.h": 16}),
    ("t3-base", "base", "h 4, d_k = d_v = 64", 1, {}),
    ("t3-base-s2", "base", "h 4, d_k = d_v = 64 (seed 2)", 2, {}),
    ("t3-h1", "A", "h 1, d_k = d_v = 256", 1, {"model.h": 1}),
    ("t3-h1-s2", "A", "h 1, d_k = d_v = 256 (seed 2)", 2, {"model.h": 1}),
    ("t3-dk32", "B", "d_k 32 (d_v 64)", 1, {"model.d_k": 32, "model.d_v": 64}),
    ("t3-drop0", "D", "P_drop 0", 1, {"model.P_drop": 0.0}),
    ("t3-ls0", "D", "eps_ls 0", 1, {"model.eps_ls": 0.0}),
    ("t3-learned", "E", "learned positions", 1, {"model.positions": "learned"}),
    ("t3-N2", "C", "N 2", 1, {"model.N": 2}),
    ("t3-d128", "C", "d_model 128, d_ff 512", 1, {"model.d_model": 128, "model.d_ff": 512}),
]
BASELINE = "t3-base"


def run_one(row, runs: Path) -> str:
    """Train one row, then decode its test set; times and scores go to table3.json."""
    name, _, _, seed, sets = row
    out = runs / name
    if (out / "table3.json").is_file():
        return f"{name}: done before"
    cmd = ["scratchformer", "train", *BASE, "--name", name, "--run-dir", str(out)]
    cmd += ["--seed", str(seed)]
    for k, v in sets.items():
        cmd += ["--set", f"{k}={v}"]
    ckpt = out / "checkpoints" / f"checkpoint_{STEPS}.npz"
    if not ckpt.is_file():  # trained before, not yet decoded: decode only
        with open(runs / f"{name}.log", "w") as log:
            subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=True)
    t1 = time.time()
    dec = ["scratchformer", "evaluate", "--checkpoint", str(ckpt), "--split", "test"]
    dec += ["--greedy", "--output", str(out / "test.hyp"), "--json"]
    scores = subprocess.run(dec, capture_output=True, text=True, check=True).stdout
    t2 = time.time()
    valid = [json.loads(line) for line in open(out / "metrics.jsonl")]
    valid = [m for m in valid if m.get("kind") == "valid"][-1]
    done = re.search(
        r"^done: step \d+, \d+ steps in ([\d:]+)", (runs / f"{name}.log").read_text(), re.M
    )
    result = {
        "train_s": sum(int(x) * 60**i for i, x in enumerate(reversed(done.group(1).split(":")))),
        "decode_s": round(t2 - t1, 1),
        "dev": valid,
        "test": json.loads(scores.strip().splitlines()[-1]),
        "command": " ".join(cmd),
    }
    (out / "table3.json").write_text(json.dumps(result, indent=1))
    return f"{name}: {result['train_s']} s training, {t2 - t1:.0f} s decoding"


def train(runs: Path, jobs: int) -> None:
    runs.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(jobs) as pool:
        for line in pool.map(lambda r: run_one(r, runs), ROWS):
            print(line, flush=True)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=["train", "report"])
    p.add_argument("--runs", default="runs", help="where the runs go (default runs/)")
    p.add_argument("--jobs", type=int, default=2, help="rows trained at a time")
    p.add_argument("--plot", default="docs/images/table3.png")
    p.add_argument("--data-dir", default="data/bible", help="the test set's references")
    a = p.parse_args(argv)
    if a.what == "train":
        train(Path(a.runs), a.jobs)
    else:
        from report import report  # the sibling file: table, bootstrap and plot

        report(ROWS, BASELINE, Path(a.runs), Path(a.plot), Path(a.data_dir))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()
