"""Fine-tuning an imported Marian on sentence pairs of one's own: ``scratchformer data
pairs`` makes the set, ``train --task translate --init-from marian.npz`` reads it with
Marian's tokenizer (``</s>`` after every source), 200 steps, the loss falling; killed
with SIGKILL after a checkpoint and resumed, it ends bit for bit as the run never
stopped; the result exported loads in transformers and translates the set's test
sentences greedily token for token as we do; translate, evaluate, average, plot
attention and gradcheck --checkpoint take it. Slow: a few hundred training steps twice.
"""

from __future__ import annotations

import copy
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
from gpt2_folders import need
from marian_folders import transformers_marian

from scratchformer.app.checkpoint import load_with_tokenizer
from scratchformer.app.cli import main
from scratchformer.app.export import export_marian
from scratchformer.app.hf_import import import_folder
from scratchformer.engine.backend import xp
from scratchformer.engine.decode import DecodeOptions
from scratchformer.engine.decode.greedy import greedy_decode

pytestmark = pytest.mark.slow

ENV = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
STEPS = 200
WORDS = ["ka", "to", "ri", "men", "sa", "lo", "ver", "gen", "da", "ni", "por", "que"]


def write_pairs(path: Path, seed: int = 0) -> Path:
    """A TSV of pairs: a few made-up words and the same words reversed."""
    r = random.Random(seed)
    lines = []
    for _ in range(500):
        w = [r.choice(WORDS) for _ in range(r.randint(2, 5))]
        lines.append(f"{' '.join(w)}\t{' '.join(reversed(w))}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    need("torch")
    root = tmp_path_factory.mktemp("marian-finetune")
    transformers_marian(root / "random-marian", seed=2)
    ckpt = import_folder(root / "random-marian", root / "marian.npz")
    tsv = write_pairs(root / "mine.tsv")
    assert main(["data", "pairs", str(tsv), "--out", str(root / "data")]) == 0
    return root, ckpt, root / "data"


def command(ckpt: Path, data: Path) -> list:
    return [
        sys.executable, "-m", "scratchformer", "train", "--task", "translate",
        "--init-from", str(ckpt), "--data-dir", str(data), "--run-dir", "run",
        "--steps", str(STEPS), "--no-progress", "--set", 'optim.schedule="constant"',
        "--set", "optim.lr=1e-3", "--warmup", "20", "--log-every", "10",
        "--eval-every", "100", "--checkpoint-every", "20", "--max-tokens", "256",
        "--set", "train.keep_checkpoints=0", "--set", 'task.decode="greedy"',
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


@pytest.fixture(scope="module")
def finetuned(setup):
    """The uninterrupted run's folder, after 200 steps; the loss checked to fall."""
    root, ckpt, data = setup
    ref = root / "reference"
    ref.mkdir()
    done = subprocess.run(command(ckpt, data), cwd=ref, env=ENV, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    return ref / "run", done.stdout


def test_fine_tuning_200_steps_the_loss_falls_and_kill_9_resumes_bit_for_bit(setup, finetuned):
    root, ckpt, data = setup
    run, _ = finetuned
    train = [r for r in records(run) if r["kind"] == "train"]
    assert train[-1]["step"] == STEPS
    first, last = train[0]["loss"], train[-1]["loss"]
    assert last < 0.6 * first, (first, last)
    print(f"\nfine-tuning: loss {first:.3f} at step {train[0]['step']} -> {last:.3f} at {STEPS}")

    killed = root / "killed"
    killed.mkdir()
    p = subprocess.Popen(command(ckpt, data), cwd=killed, env=ENV, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    target = killed / "run" / "checkpoints" / "checkpoint_100.npz"
    t0 = time.monotonic()
    while not target.exists() and p.poll() is None and time.monotonic() - t0 < 300:
        time.sleep(0.01)
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert p.returncode == -signal.SIGKILL, "the run ended before it was killed"
    resumed = subprocess.run([*command(ckpt, data), "--resume"], cwd=killed, env=ENV,
                             capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr
    assert "resuming" in resumed.stdout
    for name in (f"checkpoint_{STEPS}.npz", "final.npz"):
        a, ha = arrays(killed / "run" / "checkpoints" / name)
        b, hb = arrays(run / "checkpoints" / name)
        assert sorted(a) == sorted(b)
        for k in b:
            assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), f"{name}: {k}"
        assert ha == hb, name
    assert [r for r in records(killed / "run") if r["kind"] == "train"] == train
    print(f"killed at step 100+ (SIGKILL), resumed: checkpoint_{STEPS}.npz and final.npz bit "
          "for bit those of the uninterrupted run")


def test_exported_transformers_greedy_identical_on_the_test_sentences(setup, finetuned):
    """final.npz exported; transformers' MarianTokenizer and generate (float64) against
    our tokenizer and greedy search (float64) on every test sentence of the set."""
    torch, transformers = need("torch"), need("transformers")
    root, _, data = setup
    run, _ = finetuned
    export_marian(run / "checkpoints" / "final.npz", root / "exported")
    theirs = transformers.MarianMTModel.from_pretrained(str(root / "exported")).double().eval()
    tok_t = transformers.AutoTokenizer.from_pretrained(str(root / "exported"))
    ckpt, tok = load_with_tokenizer(run / "checkpoints" / "final.npz")
    ours = copy.deepcopy(ckpt.model).astype(xp.float64)
    cfg = ours.config
    options = DecodeOptions(search="greedy", max_len_a=0.0, max_len_b=20)
    tests = [line.split("\t")[0] for line in (data / "test.tsv").read_text().splitlines()]
    right = 0
    for s in tests:
        ids = tok_t(s)["input_ids"]
        assert ids == tok.encode(s) + [cfg.source_end_id], s
        got = [int(i) for i in greedy_decode(ours, np.array([ids]), options)[0]]
        with torch.no_grad():
            out = theirs.generate(torch.tensor([ids]), do_sample=False, num_beams=1,
                                  max_length=22, bad_words_ids=[[cfg.pad_id]])[0, 1:].tolist()
        want = out[:-1] if out and out[-1] == cfg.eos_id else out
        assert got == want, s
        right += tok.decode(got) == " ".join(reversed(s.split()))
    print(f"\n{len(tests)} test sentences: greedy identical in transformers ({right} of them "
          "the right reversal)")


def test_the_commands_take_the_fine_tuned_model(setup, finetuned, tmp_path, capsys):
    root, _, data = setup
    run, _ = finetuned
    final = str(run / "checkpoints" / "final.npz")
    (tmp_path / "src.txt").write_text("ka to ri\nmen sa lo ver\n", encoding="utf-8")
    assert main(["translate", "--checkpoint", final, "--greedy", "--input",
                 str(tmp_path / "src.txt"), "--output", str(tmp_path / "out.txt")]) == 0
    assert len((tmp_path / "out.txt").read_text().splitlines()) == 2
    assert main(["evaluate", "--checkpoint", final, "--data-dir", str(data), "--greedy",
                 "--limit", "5", "--no-progress"]) == 0
    assert main(["average", str(run / "checkpoints"), "--last", "3",
                 "-o", str(tmp_path / "avg.npz")]) == 0
    if need("matplotlib"):
        assert main(["plot", "attention", final, "ka to ri", "-o", str(tmp_path / "plots")]) == 0
    assert main(["gradcheck", "--checkpoint", final, "--directions", "1"]) == 0
    out = capsys.readouterr().out
    assert "passed, 0 failed" in out
