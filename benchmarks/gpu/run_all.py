"""Everything a first GPU run must prove, in stages by priority, each writing its log and
results as it finishes: ``benchmarks/gpu/run_all.sh OUT [--stages a,b] [--quick]``.

    smoke       the device, CuPy and its CUDA; a training step and a decode on CuPy
    parity      NumPy and CuPy on the same weights and batch: float64 to 1e-12 on the
                harness metric, float32 CuPy within 2x NumPy float32's error against
                float64, dropout on (the counter-based masks, equal on both); every
                kernel of the seam against its reference on the GPU (kernels --check)
    host_reads  training steps and decoding steps with CuPy's synchronisation forbidden
                (cupyx.allow_synchronize(False)): none may read back
    tests       the test suite's CuPy copies and the trainer, decoding, kernels and
                command line tests, every one on CuPy (SCRATCHFORMER_BACKEND=cupy)
    speed       ours against PyTorch eager on the same GPU: small and base, 25,000 and
                4,096 tokens, fp32 and TF32 (benchmarks/gpu/speed.py)
    decode      beam-4 decoding, sentences/s
    train       the default ``scratchformer train`` on CuPy, then a resume
    bible       (asked for alone: ``--stages bible``) the bible-gpu-short config on
                data/bible, within 8 minutes, then its test BLEU; needs the data
                carried there (``scratchformer data bible`` on a machine with network)

The default stages' limits add up to 10 minutes (a stage that reaches its limit is cut,
its log says so, and the next one runs).

``--quick`` runs the same stages on NumPy with tiny sizes (CI does, so that this script
cannot rot before a GPU is at hand). Runs offline from a source checkout
(``PYTHONPATH=.``) in an existing environment; installs nothing. One kernel cache for
all (``CUPY_CACHE_DIR`` inside OUT).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable


def _python(code: str) -> list[str]:
    return [PY, "-c", code]


SMOKE = r"""
import json, sys
import numpy as np
from scratchformer import backend, device
from scratchformer.models import Transformer, TransformerConfig
from scratchformer.optim import Adam
from scratchformer.decode import greedy_decode
info = {"backend": backend.backend_name(), "numpy": np.__version__}
if backend.backend_name() == "cupy":
    cp = backend.xp
    props = cp.cuda.runtime.getDeviceProperties(0)
    info.update(cupy=cp.__version__, device=props["name"].decode(),
                memory_gib=round(props["totalGlobalMem"] / 2**30, 1),
                cuda_runtime=cp.cuda.runtime.runtimeGetVersion(),
                driver=cp.cuda.runtime.driverGetVersion())
m = Transformer(TransformerConfig.preset("tiny", vocab_size=20))
opt = Adam(m.flatten())
src = np.array([[5, 6, 7, 0], [8, 9, 10, 11]]); tgt = np.array([[1, 12, 13], [1, 14, 0]])
losses = []
for s in range(20):
    m.zero_grad()
    loss, c = m.loss_forward(src, tgt, tgt, rng=device.generator(s))
    m.loss_backward(c); opt.step(3e-3); losses.append(float(loss))
info["losses"] = [round(l, 4) for l in losses[::5]]
info["decoded"] = greedy_decode(m, src, max_len_b=5)
assert np.isfinite(losses).all() and losses[-1] < losses[0], losses
print(json.dumps(info))
"""

PARITY = r"""
import json, sys
import numpy as np
from scratchformer import backend, device
from scratchformer.kernels.parity import relative_error
from scratchformer.models import Transformer, TransformerConfig
other = sys.argv[1]                 # the backend compared with NumPy
r = np.random.default_rng(0)
src = r.integers(3, 50, (6, 13)); src[2, 9:] = 0
tgt_in = r.integers(3, 50, (6, 11)); tgt_out = r.integers(3, 50, (6, 11)); tgt_out[1, 7:] = 0
def run(name, dtype):
    backend.set_backend(name)
    with backend.precision(dtype):
        cfg = TransformerConfig.preset("tiny", vocab_size=50, N=2, P_drop=0.1, P_drop_attn=0.1)
        m = Transformer(cfg)
        loss, c = m.loss_forward(src, tgt_in, tgt_out, rng=device.generator(7, counter=True))
        m.zero_grad(); m.loss_backward(c)
        out = {"loss": np.asarray(float(loss))}
        out.update({k: backend.asnumpy(g).astype(np.float64) for k, g in m.gradients().items()})
    backend.set_backend("numpy")
    return out
ref = run("numpy", "float64")
rows, ok = {}, True
np32 = run("numpy", "float32")
for dtype in ("float64", "float32"):
    got = run(other, dtype)
    worst = max(relative_error(got[k], ref[k]) for k in ref)
    if dtype == "float64":
        rows[dtype] = {"largest": worst, "limit": 1e-12}
        ok &= worst <= 1e-12
    else:
        base = max(relative_error(np32[k], ref[k]) for k in ref)
        rows[dtype] = {"largest": worst, "numpy_float32": base, "limit": 2 * base}
        ok &= worst <= 2 * base
print(json.dumps({"compared": other, "rows": rows, "passed": bool(ok)}))
sys.exit(0 if ok else 1)
"""

HOST_READS = r"""
import json, sys
import numpy as np
from scratchformer import backend
from scratchformer.models import Transformer, TransformerConfig
from scratchformer.optim import Adam
from scratchformer import device
if backend.backend_name() != "cupy":
    print(json.dumps({"skipped": "not on CuPy: the stand-in device counts them (tests/perf)"}))
    sys.exit(0)
import cupyx
m = Transformer(TransformerConfig.preset("small", vocab_size=8000))
opt = Adam(m.flatten())
r = np.random.default_rng(0)
src, tgt_in, tgt_out = (r.integers(4, 8000, (32, 30)) for _ in range(3))
from scratchformer.optim import clip_grad_norm
def step(s):
    m.zero_grad()
    loss, c = m.loss_forward(src, tgt_in, tgt_out, rng=device.generator(s))
    m.loss_backward(c); clip_grad_norm(m.flat.grads, 1.0); opt.step(1e-4)
    return loss
step(0)  # warm-up: kernels compiled, pool grown
with cupyx.allow_synchronize(False):
    losses = [step(s) for s in range(1, 6)]
kv = m.init_kv(*m.encode_infer(src[:4]), beams=1, capacity=10)
tokens = np.full((4, 1), 1)
with cupyx.allow_synchronize(False):
    for _ in range(5):
        logits = m.decode_step(tokens, kv)
print(json.dumps({"training_steps_without_a_sync": 5, "decode_steps_without_a_sync": 5,
                  "last_loss": float(losses[-1])}))
"""

TEST_DIRS = [
    "tests/ops", "tests/nn", "tests/models", "tests/kernels", "tests/device", "tests/variants",
    "tests/decode", "tests/train", "tests/optim", "tests/test_gradcheck.py", "tests/test_cli.py",
    "tests/translation", "tests/distributed/test_staging.py",
]  # fmt: skip


def stages(quick: bool, out: Path) -> dict:
    """Each stage: (command, environment additions, time limit in seconds)."""
    cupy = {} if quick else {"SCRATCHFORMER_BACKEND": "cupy"}
    other = "numpy" if quick else "cupy"
    speed = ["--configs", "tiny", "--tokens", "256", "--repeats", "2", "--warmup", "1",
             "--no-tf32", "--no-torch"] if quick else []  # fmt: skip
    tests = ["tests/device", "tests/kernels/test_seam.py"] if quick else TEST_DIRS
    steps = ["--steps", "20"] if quick else ["--steps", "600"]
    run_dir = str(out / "runs")
    train = [PY, "-m", "scratchformer", "train", "--run-dir", run_dir, "--no-progress", *steps]
    resume = [*train[:-1], str(int(steps[-1]) + (10 if quick else 200)), "--resume"]
    decode = ["--preset", "tiny", "--batch", "4", "--repeats", "1"] if quick else [
        "--preset", "base", "--batch", "64", "--repeats", "3"]  # fmt: skip
    bible = [PY, "-m", "scratchformer", "train", "--config", "bible-gpu-short", "--run-dir",
             str(out / "runs-bible"), "--no-progress", "--time-limit", "480"]  # fmt: skip
    if quick:
        bible += ["--steps", "4", "--set", "task.vocab_size=300"]
    return {
        "smoke": ([_python(SMOKE)], cupy, 45),
        "parity": (
            [_python(PARITY) + [other], [PY, "-m", "scratchformer", "kernels", "--check"]],
            cupy,
            75,
        ),  # fmt: skip
        "host_reads": ([_python(HOST_READS)], cupy, 45),
        "tests": ([[PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests]], cupy, 180),
        "speed": (
            [
                [
                    PY,
                    str(ROOT / "benchmarks/gpu/speed.py"),
                    *speed,
                    "--json",
                    str(out / "speed.json"),
                ]
            ],
            cupy,
            135,
        ),  # fmt: skip
        "decode": (
            [
                [
                    PY,
                    str(ROOT / "benchmarks/decode_speed.py"),
                    *decode,
                    "--backend",
                    other,
                    "--skip-forward",
                ]
            ],
            cupy,
            40,
        ),  # fmt: skip
        "train": ([train, resume], cupy, 80),
        "bible": ([bible], cupy, 590),
    }


#: what runs when --stages is not given (bible needs its data, and a run of its own)
DEFAULT = ("smoke", "parity", "host_reads", "tests", "speed", "decode", "train")


def run_stage(name: str, commands, env_add: dict, limit: int, out: Path) -> dict:
    env = {**os.environ, **env_add, "PYTHONPATH": str(ROOT)}
    log = out / f"{name}.log"
    t0 = time.perf_counter()
    rc = 0
    with log.open("w") as f:
        for cmd in commands:
            shown = "python -c <the stage's script>" if cmd[1] == "-c" else " ".join(cmd)
            f.write(f"$ {shown}\n")
            f.flush()
            left = limit - (time.perf_counter() - t0)
            try:
                p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env,
                                   cwd=ROOT, timeout=max(left, 1))  # fmt: skip
                rc = rc or p.returncode
            except subprocess.TimeoutExpired:
                f.write(f"\n(stopped at the stage's limit of {limit} s)\n")
                rc = 124
                break
    result = {"stage": name, "rc": rc, "seconds": round(time.perf_counter() - t0, 1),
              "log": log.name}  # fmt: skip
    (out / f"{name}.json").write_text(json.dumps(result))
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="a folder for logs and results")
    p.add_argument("--stages", default=None, help="comma-separated, in any order (default: all)")
    p.add_argument("--quick", action="store_true", help="NumPy, tiny sizes (CI)")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("CUPY_CACHE_DIR", str(args.out / "cupy-cache"))
    plan = stages(args.quick, args.out)
    chosen = list(DEFAULT) if args.stages is None else args.stages.split(",")
    unknown = [s for s in chosen if s not in plan]
    if unknown:
        p.error(f"unknown stages {unknown}: choose from {', '.join(plan)}")
    results = []
    for name in chosen:
        print(f"== {name}", flush=True)
        results.append(run_stage(name, *plan[name], args.out))
        print(f"   rc {results[-1]['rc']}, {results[-1]['seconds']} s, "
              f"log {args.out / results[-1]['log']}", flush=True)  # fmt: skip
        (args.out / "summary.json").write_text(json.dumps(results, indent=1))
    failed = [r["stage"] for r in results if r["rc"]]
    print(f"{len(results) - len(failed)} of {len(results)} stages passed"
          + (f"; failed: {', '.join(failed)}" if failed else ""))  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
