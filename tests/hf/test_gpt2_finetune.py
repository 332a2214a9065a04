"""Fine-tuning an imported GPT-2 on a text of one's own: ``train --task lm --init-from
gpt2.npz``, 200 steps, the loss falling; killed with SIGKILL after a checkpoint and
resumed, it ends bit for bit as the run that was never stopped (parameters, Adam's
moments, the data position, the metrics). Slow: a few hundred training steps twice.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from gpt2_folders import need, numpy_gpt2

from scratchformer.app.hf_import import import_folder

pytestmark = pytest.mark.slow

ENV = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
STEPS = 200
SUBJECTS = ["the cat", "a dog", "my friend", "the old man", "our teacher", "the bird"]
VERBS = ["sees", "likes", "finds", "follows", "paints", "greets"]
OBJECTS = ["the river", "a red ball", "the small house", "the garden", "a quiet street"]


def write_text(d: Path, seed: int = 0) -> Path:
    """{train,dev,test}.txt of simple sentences, one per line (the lm task's layout)."""
    r = random.Random(seed)
    d.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", 400), ("dev", 40), ("test", 40)):
        lines = [f"{r.choice(SUBJECTS)} {r.choice(VERBS)} {r.choice(OBJECTS)}." for _ in range(n)]
        (d / f"{split}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return d


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    need("tokenizers")
    need("safetensors")
    root = tmp_path_factory.mktemp("finetune")
    ckpt = import_folder(numpy_gpt2(root / "tiny-gpt2"), root / "gpt2.npz")
    return root, ckpt, write_text(root / "text")


def command(ckpt: Path, text: Path) -> list:
    return [
        sys.executable, "-m", "scratchformer", "train", "--task", "lm", "--init-from", str(ckpt),
        "--data-dir", str(text), "--run-dir", "run", "--steps", str(STEPS), "--no-progress",
        "--set", 'optim.schedule="constant"', "--set", "optim.lr=1e-3", "--warmup", "20",
        "--log-every", "10", "--eval-every", "100", "--checkpoint-every", "20",
        "--max-tokens", "256", "--set", "train.keep_checkpoints=0",
        "--set", "task.sample_len=20",
    ]


def records(run: Path) -> list:
    recs = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    timing = ("tokens_per_s", "elapsed")
    return [{k: v for k, v in r.items() if k not in timing and not k.endswith("_seconds")}
            for r in recs]


def arrays(path: Path) -> dict:
    with np.load(path, allow_pickle=False) as z:
        out = {k: z[k] for k in z.files}
    header = json.loads(out.pop("__meta__").tobytes().decode("utf-8"))
    (header.get("train_state") or {}).pop("seconds", None)
    return out, header


def test_fine_tuning_200_steps_the_loss_falls_and_kill_9_resumes_bit_for_bit(setup):
    root, ckpt, text = setup
    ref = root / "reference"
    ref.mkdir()
    done = subprocess.run(command(ckpt, text), cwd=ref, env=ENV, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    train = [r for r in records(ref / "run") if r["kind"] == "train"]
    assert train[-1]["step"] == STEPS
    first, last = train[0]["loss"], train[-1]["loss"]
    assert last < 0.6 * first, (first, last)
    print(f"\nfine-tuning: loss {first:.3f} at step {train[0]['step']} -> {last:.3f} at {STEPS}")

    killed = root / "killed"
    killed.mkdir()
    p = subprocess.Popen(command(ckpt, text), cwd=killed, env=ENV, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    target = killed / "run" / "checkpoints" / "checkpoint_100.npz"
    t0 = time.monotonic()
    while not target.exists() and p.poll() is None and time.monotonic() - t0 < 300:
        time.sleep(0.01)
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert p.returncode == -signal.SIGKILL, "the run ended before it was killed"
    resumed = subprocess.run([*command(ckpt, text), "--resume"], cwd=killed, env=ENV,
                             capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr
    assert "resuming" in resumed.stdout

    for name in (f"checkpoint_{STEPS}.npz", "final.npz"):
        a, ha = arrays(killed / "run" / "checkpoints" / name)
        b, hb = arrays(ref / "run" / "checkpoints" / name)
        assert sorted(a) == sorted(b)
        for k in b:
            assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), f"{name}: {k}"
        assert ha == hb, name
    assert [r for r in records(killed / "run") if r["kind"] == "train"] == train
    print(f"killed at step {100}+ (SIGKILL), resumed: checkpoint_{STEPS}.npz and final.npz "
          "bit for bit those of the uninterrupted run")
