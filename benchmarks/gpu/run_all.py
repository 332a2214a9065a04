"""Everything a first GPU run must prove, in two planned calls of the device machine,
each writing one log tarball and ``summary.json`` into OUT as every stage ends:

    benchmarks/gpu/run_all.sh OUT --call 1       # ~5.5 min: the proof and the speed rows
    benchmarks/gpu/run_all.sh OUT --call 2       # ~4 min: the rest
    benchmarks/gpu/run_all.sh OUT --stages a,b   # hand-picked, in the order given

Call 1 (``--budget`` 330 s by default):

    smoke       the device, CuPy and its CUDA; the kernels' first compile (an empty
                cache: the first training step against the second, and each of the
                package's CUDA sources); a training step and a decode on CuPy
    parity      NumPy and CuPy on the same weights and batch, ``CUPY_TF32`` unset:
                float64 to 1e-12 on the harness metric, float32 CuPy within 2x NumPy
                float32's error against float64, dropout on (the counter-based masks);
                every op's implementation against its reference (kernels --check)
    host_reads  training and decoding steps with CuPy's synchronisation forbidden
                (cupyx.allow_synchronize(False)): none may read back
    speed       ours against PyTorch eager on the same GPU, ``small`` and
                ``base`` at 25,000 tokens, fp32 and TF32 (benchmarks/gpu/speed.py)
    tests       the CuPy tests that matter most, most important first, in groups (a
                cut keeps the groups before it): dispatch, device, ops, optim; the
                trainer, decoding, the command line; nn

Call 2 (``--budget`` 230 s by default):

    decode      beam-4 and greedy decoding of ``base``, sentences/s
    train       the default ``scratchformer train`` on CuPy, then a resume
    oom         a run out of GPU memory (CuPy's pool capped): one line naming the
                setting to lower
    tests_rest  the rest of the tests: models; variants; gradcheck, translation, staging
    bible       ``bible-gpu-short`` on data/bible (carried; ``--data``) for as long as
                the budget leaves, then a resume: the steps reached and the rate

Asked for by name only: ``speed_small`` (the 4,096-token rows).

The tests run every test on CuPy (``SCRATCHFORMER_BACKEND=cupy``) and only the CuPy copy
of the numeric tests (benchmarks/gpu/cupy_only.py: their NumPy copies run in CI).

OUT gets exactly two files: ``logs.tar.gz`` (every stage's log and JSON, rewritten
atomically as each stage ends and every 30 s inside a long one) and ``summary.json``
(rewritten as each stage ends: the plan, each stage's status and results, the elapsed
time, the device, the kernels' first compile). The CuPy kernel cache, the run folders
and the logs themselves live in a work folder outside OUT (``--work``, default a new
temporary folder). The run stops itself within ``--budget`` seconds: a stage that would
start with too little time left is skipped (with why, in summary.json), and one still
running at the budget is interrupted (Ctrl-C first, so pytest prints its summary and a
training run saves, then killed). A stage that reaches its own limit is cut the same way.
At the end the script checks that OUT holds those two files and the tarball one log per
stage, and fails otherwise.

``--quick`` runs the same stages on NumPy with tiny sizes (CI does, so that this script
cannot rot before a GPU is at hand). Runs offline from a source checkout
(``PYTHONPATH=.``) in an existing environment; installs nothing.
"""

from __future__ import annotations

import argparse
import datetime
import io
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PY = sys.executable

#: what each call runs, in order, and its default budget in seconds (the device command's
#: timeout_s should leave 30 s or more beyond it)
CALLS = {
    1: (("smoke", "parity", "host_reads", "speed", "tests"), 330),
    2: (("decode", "train", "oom", "tests_rest", "bible"), 230),
}
#: seconds kept at the end of the budget: a stage still running then is interrupted
#: (Ctrl-C), given CUT_WAIT seconds to write its summary, then killed
GRACE = 8
CUT_WAIT = 5
#: seconds between refreshes of the tarball while a stage runs
REFRESH = 30
#: the only files OUT may hold
OUT_FILES = {"logs.tar.gz", "summary.json"}


def _python(code: str) -> list[str]:
    return [PY, "-c", code]


SMOKE = r"""
import json, os, time
import numpy as np
from scratchformer.engine import backend, device
from scratchformer.engine.models import Transformer, TransformerConfig
from scratchformer.engine.optim import Adam
from scratchformer.engine.decode import greedy_decode
info = {"backend": backend.backend_name(), "numpy": np.__version__}
on_gpu = backend.backend_name() == "cupy"
compile_ = {}
if on_gpu:
    cp = backend.xp
    t = time.perf_counter(); cp.zeros(1); cp.cuda.Device().synchronize()
    compile_["cuda_context_s"] = round(time.perf_counter() - t, 3)
    props = cp.cuda.runtime.getDeviceProperties(0)
    name = props["name"]
    info.update(cupy=cp.__version__, device=name.decode() if isinstance(name, bytes) else name,
                memory_gib=round(props["totalGlobalMem"] / 2**30, 1),
                compute_capability=f"{props['major']}.{props['minor']}",
                cuda_runtime=cp.cuda.runtime.runtimeGetVersion(),
                driver=cp.cuda.runtime.driverGetVersion(),
                cupy_tf32=os.environ.get("CUPY_TF32"))
m = Transformer(TransformerConfig.preset("tiny", vocab_size=20))
opt = Adam(m.flatten())
src = np.array([[5, 6, 7, 0], [8, 9, 10, 11]]); tgt = np.array([[1, 12, 13], [1, 14, 0]])
losses, seconds = [], []
for s in range(20):
    t = time.perf_counter()
    m.zero_grad()
    loss, c = m.loss_forward(src, tgt, tgt, rng=device.generator(s))
    m.loss_backward(c); opt.step(3e-3); losses.append(float(loss))  # float(): synchronises
    seconds.append(time.perf_counter() - t)
info["losses"] = [round(l, 4) for l in losses[::5]]
t = time.perf_counter()
info["decoded"] = greedy_decode(m, src, max_len_b=5)
decode_s = time.perf_counter() - t
if on_gpu:  # the cache was empty: the first step compiled every kernel it launches
    compile_.update(first_step_s=round(seconds[0], 3), second_step_s=round(seconds[1], 3),
                    median_step_s=round(float(np.median(seconds[2:])), 4),
                    first_decode_s=round(decode_s, 3))
    from scratchformer.engine.device import cupy_kernels
    raw = {}
    for name in cupy_kernels.sources():
        t = time.perf_counter()
        try:
            cupy_kernels.module(name).compile()
            raw[name] = round(time.perf_counter() - t, 3)
        except Exception as e:
            raw[name] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    compile_["cuda_sources_s"] = raw
    cache = os.environ.get("CUPY_CACHE_DIR", "")
    compile_["cache_files"] = sum(len(f) for _, _, f in os.walk(cache)) if cache else None
    info["first_compile"] = compile_
assert np.isfinite(losses).all() and losses[-1] < losses[0], losses
print(json.dumps(info))
"""

PARITY = r"""
import json, sys
import numpy as np
from scratchformer.engine import backend, device
from scratchformer.engine.parity import relative_error
from scratchformer.engine.models import Transformer, TransformerConfig
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
from scratchformer.engine import backend
from scratchformer.engine.models import Transformer, TransformerConfig
from scratchformer.engine.optim import Adam
from scratchformer.engine import device
if backend.backend_name() != "cupy":
    print(json.dumps({"skipped": "not on CuPy: the stand-in device counts them (tests/perf)"}))
    sys.exit(0)
import cupyx
m = Transformer(TransformerConfig.preset("small", vocab_size=8000))
opt = Adam(m.flatten())
r = np.random.default_rng(0)
src, tgt_in, tgt_out = (r.integers(4, 8000, (32, 30)) for _ in range(3))
from scratchformer.engine.optim import clip_grad_norm
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

OOM = r"""
import json, os, subprocess, sys
run_dir, on_gpu = sys.argv[1], sys.argv[2] == "cupy"
env = dict(os.environ)
cmd = [sys.executable, "-m", "scratchformer", "train", "--run-dir", run_dir, "--no-progress",
       "--no-test", "--steps", "3"]
if on_gpu:  # CuPy's pool capped at 64 MiB: a micro-batch of 100,000 tokens cannot fit
    env["CUPY_GPU_MEMORY_LIMIT"] = str(64 * 2**20)
    cmd += ["--max-tokens", "100000"]
else:  # NumPy: the estimate made before anything is allocated refuses the run
    cmd += ["--max-tokens", "1000000000"]
print("$ " + " ".join(cmd[1:]) + ("  (CUPY_GPU_MEMORY_LIMIT=64 MiB)" if on_gpu else ""), flush=True)
p = subprocess.run(cmd, capture_output=True, text=True, env=env)
print(p.stdout[-3000:]); print(p.stderr[-3000:], flush=True)
lines = [l for l in p.stderr.splitlines() if l.strip()]
last = lines[-1] if lines else ""
ok = (p.returncode == 2 and "Traceback" not in p.stderr and "max_tokens" in last
      and ("out of GPU memory" in last if on_gpu else "memory" in last))
print(json.dumps({"rc": p.returncode, "stderr_lines": len(lines), "message": last,
                  "passed": ok}))
sys.exit(0 if ok else 1)
"""

#: the tests by call, in groups, most important first (one pytest run each: a stage cut
#: at its limit keeps the groups before)
TESTS = [
    ["tests/test_dispatch.py", "tests/device", "tests/ops", "tests/optim"],
    ["tests/train", "tests/decode", "tests/test_cli.py"],
    ["tests/nn"],
]
TESTS_REST = [
    ["tests/models"],
    ["tests/variants"],
    ["tests/test_gradcheck.py", "tests/translation", "tests/distributed/test_staging.py"],
]
QUICK_TESTS = [["tests/device"], ["tests/test_dispatch.py"]]
QUICK_TESTS_REST = [["tests/optim/test_clip.py"]]


@dataclass
class Stage:
    """A stage: its commands (a list, or a function of the seconds left in the stage
    that returns one), its time limit and the fewest seconds worth starting it with."""

    commands: list
    limit: int
    least: int = 5
    env: dict = field(default_factory=dict)
    why_not: str = ""  # why it cannot run here: skipped, with this reason


def _pytest(groups: list[list[str]]) -> list[list[str]]:
    # -p cupy_only: the numeric tests' CuPy copy alone (their NumPy copy runs in CI)
    # (-q comes from the project's addopts: a second one would hide the counts)
    head = [
        PY,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-p",
        "cupy_only",
        "-rfEs",
        "--durations=8",
    ]
    return [head + g for g in groups]


def _quick_pairs(folder: Path) -> Path:
    """A tiny translation data set (a made-up language: each word spelt backwards), for
    the bible stage of --quick."""
    import random

    r = random.Random(0)
    words = ["".join(r.choice("abcdefghij") for _ in range(r.randint(2, 6))) for _ in range(60)]
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", 400), ("dev", 30), ("test", 30)):
        with (folder / f"{split}.tsv").open("w") as f:
            for i in range(n):
                sent = [r.choice(words) for _ in range(r.randint(2, 8))]
                f.write(f"{' '.join(w[::-1] for w in sent)}\t{' '.join(sent)}\t{split}.{i}\n")
    return folder


def stages(quick: bool, work: Path, data: Path) -> dict[str, Stage]:
    cupy = {} if quick else {"SCRATCHFORMER_BACKEND": "cupy"}
    other = "numpy" if quick else "cupy"
    logs = work / "logs"
    sf = [PY, "-m", "scratchformer"]

    def speed(tokens: str, json_name: str) -> list:
        size = (
            "--configs tiny --tokens 256 --repeats 2 --warmup 1 --no-tf32 --no-torch"
            if quick
            else f"--configs small base --tokens {tokens} --warmup 2 --repeats 6"
        ).split()
        return [[PY, str(HERE / "speed.py"), *size, "--json", str(logs / json_name)]]

    steps = 20 if quick else 300
    train = [*sf, "train", "--run-dir", str(work / "runs"), "--no-progress", "--steps"]
    decode = (
        ["--preset", "tiny", "--batch", "4", "--repeats", "1"]
        if quick
        else ["--preset", "base", "--batch", "64", "--repeats", "3"]
    )

    # bible: the first run trains for what the stage has left less a reserve (two starts,
    # the final evaluation and the resume), then a resume of a few steps
    if quick:
        data = _quick_pairs(work / "quick-pairs")
        small = (
            "--max-tokens 300 --accum-steps 1 --set task.vocab_size=0 --set model.N=1 "
            "--set model.d_model=32 --set model.d_ff=64 --set model.h=2"
        ).split()
        first_steps, more = ["--steps", "4"], ["--steps", "6"]
        reserve, resume_s = 30, 20
    else:
        small, first_steps, more, reserve, resume_s = [], [], [], 70, 10
    bible = [
        *sf,
        "train",
        "--config",
        "bible-gpu-short",
        "--data-dir",
        str(data),
        "--run-dir",
        str(work / "runs-bible"),
        "--no-progress",
        "--no-test",
        *small,
    ]
    have_data = all((data / f"{s}.tsv").is_file() for s in ("train", "dev", "test"))

    return {
        "smoke": Stage([_python(SMOKE)], 45, env=cupy),
        "parity": Stage([_python(PARITY) + [other], [*sf, "kernels", "--check"]], 60, env=cupy),
        "host_reads": Stage([_python(HOST_READS)], 35, env=cupy),
        "speed": Stage(speed("25000", "speed-rows.json"), 130, least=30, env=cupy),
        "tests": Stage(_pytest(QUICK_TESTS if quick else TESTS), 150, least=20, env=cupy),
        "decode": Stage(
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
            35,
            env=cupy,
        ),
        "train": Stage(
            [
                train + [str(steps), "--no-test"],
                train + [str(steps + (10 if quick else 60)), "--resume"],
            ],
            60,
            least=20,
            env=cupy,
        ),
        "oom": Stage([_python(OOM) + [str(work / "runs-oom"), other]], 30, env=cupy),
        "tests_rest": Stage(
            _pytest(QUICK_TESTS_REST if quick else TESTS_REST), 90, least=20, env=cupy
        ),
        "bible": Stage(
            [
                lambda left: (
                    bible + first_steps + ["--time-limit", str(max(10, int(left - reserve)))]
                ),
                bible + more + ["--resume", "--time-limit", str(resume_s)],
            ],
            590,
            least=45,
            env=cupy,
            why_not=""
            if have_data
            else f"no {data}/{{train,dev,test}}.tsv: build it with "
            "`scratchformer data bible` on a machine with network, and carry it",
        ),
        "speed_small": Stage(speed("4096", "speed-small-rows.json"), 120, least=30, env=cupy),
    }


# ---------------------------------------------------------------------------- the results


def _json_lines(text: str) -> list[dict]:
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return rows


_PYTEST_END = re.compile(r"^=*\s*((?:\d+ [a-z]+(?:, )?)+) in ([\d.]+)s")
_DONE = re.compile(r"done: step (\d+), (\d+) steps in (\d+):(\d\d):(\d\d) \(([\d,]+) tokens/s\)")


def results(name: str, text: str, logs: Path) -> dict:
    """What a stage's log says, as numbers."""
    out: dict = {}
    if name in ("smoke", "parity", "host_reads", "oom"):
        rows = _json_lines(text)
        if rows:
            out = rows[-1]
    if name in ("tests", "tests_rest"):
        groups = []
        for line in text.splitlines():
            m = _PYTEST_END.match(line.strip())
            if m:
                counts = {k: int(n) for n, k in (c.split(" ") for c in m.group(1).split(", "))}
                groups.append({**counts, "seconds": float(m.group(2))})
        total: dict = {}
        for g in groups:
            for k, v in g.items():
                total[k] = round(total.get(k, 0) + v, 2)
        out = {"groups": groups, "total": total, "interrupted": "KeyboardInterrupt" in text}
        runs = sum(1 for line in text.splitlines() if line.startswith("$ "))
        if runs > len(groups):  # the last run was killed before its counts: its progress
            last = text.rsplit("\n$ ", 1)[-1]
            marks = "".join(
                m.group(1) for m in re.finditer(r"^([.FEsxX]+)\s*(?:\[\s*\d+%\])?$", last, re.M)
            )
            names = {
                ".": "passed",
                "F": "failed",
                "E": "error",
                "s": "skipped",
                "x": "xfailed",
                "X": "xpassed",
            }
            out["cut_run_progress"] = {v: marks.count(k) for k, v in names.items() if k in marks}
    if name == "decode":  # "  beam 4, kv cache    60.6 ms/sentence  (0.242 s for 4)"
        for m in re.finditer(r"^  (\S.*?)\s+([\d.]+) ms/sentence", text, re.M):
            out[m.group(1)] = {
                "ms_per_sentence": float(m.group(2)),
                "sentences_per_s": round(1e3 / float(m.group(2)), 1),
            }
    if name.startswith("speed"):
        path = logs / ("speed-rows.json" if name == "speed" else "speed-small-rows.json")
        if path.is_file():
            out = {"rows": json.loads(path.read_text())}
    if name in ("train", "bible"):
        runs = []
        for m in _DONE.finditer(text):
            seconds = 3600 * int(m.group(3)) + 60 * int(m.group(4)) + int(m.group(5))
            steps = int(m.group(2))
            runs.append(
                {
                    "step": int(m.group(1)),
                    "steps": steps,
                    "train_seconds": seconds,
                    "seconds_per_step": round(seconds / steps, 3) if steps and seconds else None,
                    "tokens_per_s": int(m.group(6).replace(",", "")),
                }
            )
        out = {"runs": runs, "divergence_stop": bool(re.search(r"diverg", text, re.I))}
    return out


# ------------------------------------------------------------------------------- the run


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".part")
    tmp.write_bytes(data)
    os.replace(tmp, path)


class Run:
    """One call: its plan, its clock, its work folder and OUT."""

    def __init__(self, out: Path, work: Path, plan: list[str], budget: float, call, quick):
        self.out, self.work, self.logs = out, work, work / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.plan, self.budget, self.t0 = plan, budget, time.perf_counter()
        self.summary = {
            "call": call,
            "quick": quick,
            "plan": plan,
            "budget_s": budget,
            "started_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(
                timespec="seconds"
            ),
            "work": str(work),
            "elapsed_s": 0.0,
            "finished": False,
            "stages": [],
        }

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def refresh(self) -> None:
        """Rewrite logs.tar.gz (every file of the logs folder) and summary.json, each
        through a temporary file renamed over the old one."""
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            for f in sorted(self.logs.iterdir()):
                if f.is_file():
                    tar.add(f, arcname=f"logs/{f.name}")
        _write_atomic(self.out / "logs.tar.gz", buf.getvalue())
        self.summary["elapsed_s"] = round(self.elapsed(), 1)
        _write_atomic(self.out / "summary.json", json.dumps(self.summary, indent=1).encode())

    def record(self, result: dict) -> None:
        (self.logs / f"{result['stage']}.json").write_text(json.dumps(result, indent=1))
        self.summary["stages"].append(result)
        r = result.get("results") or {}
        if result["stage"] == "smoke":
            for key in (
                "device",
                "memory_gib",
                "compute_capability",
                "cupy",
                "cuda_runtime",
                "driver",
                "numpy",
                "backend",
            ):
                if key in r:
                    self.summary.setdefault("device", {})[key] = r[key]
            if "first_compile" in r:
                self.summary["first_compile"] = r["first_compile"]
        self.refresh()

    def skip(self, name: str, why: str) -> dict:
        (self.logs / f"{name}.log").write_text(f"(skipped: {why})\n")
        return {
            "stage": name,
            "status": "skipped",
            "why": why,
            "rc": None,
            "seconds": 0.0,
            "log": f"{name}.log",
        }

    def run_stage(self, name: str, stage: Stage) -> dict:
        left = self.budget - GRACE - self.elapsed()
        if stage.why_not:
            return self.skip(name, stage.why_not)
        if left < stage.least:
            return self.skip(
                name,
                f"the budget of {self.budget:g} s: {max(left, 0):.0f} s "
                f"left before its end, the stage needs {stage.least} s or more",
            )
        t0 = time.perf_counter()
        deadline = t0 + min(stage.limit, left)
        by_budget = stage.limit > left
        env = {**os.environ, **stage.env, "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE)])}
        env.pop("CUPY_TF32", None)  # TF32 off unless a stage asks (speed.py's rows do)
        log = self.logs / f"{name}.log"
        rc, cut = 0, ""
        with log.open("w") as f:
            for cmd in stage.commands:
                if callable(cmd):
                    cmd = cmd(deadline - time.perf_counter())
                shown = "python -c <the stage's script>" if cmd[1] == "-c" else " ".join(cmd)
                f.write(f"$ {shown}\n")
                f.flush()
                p = subprocess.Popen(
                    cmd,
                    stdout=f,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=ROOT,
                    start_new_session=True,
                )
                said = time.perf_counter()
                while p.poll() is None:
                    now = time.perf_counter()
                    if now >= deadline:
                        cut = (
                            f"the call's budget of {self.budget:g} s"
                            if by_budget
                            else f"the stage's limit of {stage.limit} s"
                        )
                        _stop(p)
                        f.write(
                            f"\n(stopped at {cut}: Ctrl-C, a kill {CUT_WAIT} s later if needed)\n"
                        )
                        break
                    if now - said >= REFRESH:
                        f.flush()
                        self.refresh()
                        said = now
                    time.sleep(0.2)
                _kill_group(p)  # anything it left running
                rc = rc or p.returncode
                if cut:
                    rc = 124
                    break
        seconds = round(time.perf_counter() - t0, 1)
        status = "cut" if cut else ("passed" if rc == 0 else "failed")
        result = {
            "stage": name,
            "status": status,
            "rc": rc,
            "seconds": seconds,
            "log": log.name,
            "results": results(name, log.read_text(errors="replace"), self.logs),
        }
        if cut:
            result["why"] = f"stopped at {cut}"
        return result

    def check_out(self) -> str:
        """'' when OUT holds exactly logs.tar.gz and summary.json, and the tarball one
        log per planned stage; else what is wrong."""
        found = sorted(str(p.relative_to(self.out)) for p in self.out.rglob("*"))
        problems = []
        if set(found) != OUT_FILES:
            problems.append(f"OUT holds {found}, not exactly {sorted(OUT_FILES)}")
        if (self.out / "logs.tar.gz").is_file():
            with tarfile.open(self.out / "logs.tar.gz") as tar:
                names = [n for n in tar.getnames() if n.endswith(".log")]
            want = sorted(f"logs/{s}.log" for s in self.plan)
            if sorted(names) != want:
                problems.append(f"the tarball's logs are {sorted(names)}, not {want}")
        return "; ".join(problems)


def _stop(p: subprocess.Popen) -> None:
    """Ctrl-C to the command itself (pytest prints its counts so far, a training run
    saves; its own children are left alone, so that a test's subprocess is not failed by
    it), then a kill of its whole process group if it is still running after CUT_WAIT
    seconds (a test may hold Ctrl-C for a training run of its own)."""
    try:
        os.kill(p.pid, signal.SIGINT)
        p.wait(CUT_WAIT)
    except subprocess.TimeoutExpired:
        _kill_group(p)
        p.wait()
    except ProcessLookupError:
        pass


def _kill_group(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _nvidia_smi() -> str | None:
    """The GPUs as nvidia-smi names them (name, driver, memory), without starting CuPy;
    None where there is no nvidia-smi."""
    try:
        p = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p.stdout.strip() or p.stderr.strip()[-200:] or None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--out",
        type=Path,
        required=True,
        help="where logs.tar.gz and summary.json go (nothing else)",
    )
    p.add_argument("--call", type=int, choices=sorted(CALLS), help="a planned call's stages")
    p.add_argument("--stages", default=None, help="comma-separated, in the order given")
    p.add_argument(
        "--budget",
        type=float,
        default=None,
        help="seconds for the whole run (default: the call's; --stages: 330)",
    )
    p.add_argument(
        "--work",
        type=Path,
        default=None,
        help="the kernel cache, run folders and logs (default: a new temporary "
        "folder); never inside OUT",
    )
    p.add_argument(
        "--data",
        type=Path,
        default=ROOT / "data/bible",
        help="the bible stage's data (default data/bible)",
    )
    p.add_argument("--quick", action="store_true", help="NumPy, tiny sizes (CI)")
    args = p.parse_args(argv)
    if args.stages is not None:
        plan, budget = args.stages.split(","), CALLS[1][1]
    elif args.call is not None:
        plan, budget = list(CALLS[args.call][0]), CALLS[args.call][1]
    else:
        p.error("choose --call 1, --call 2 or --stages a,b,...")
    budget = args.budget if args.budget is not None else budget
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.work or Path(tempfile.mkdtemp(prefix="scratchformer-gpu-"))
    work.mkdir(parents=True, exist_ok=True)
    out, work = args.out.resolve(), work.resolve()
    if work == out or out in work.parents:
        p.error(f"--work {work} is inside OUT: only two files may be in OUT")
    os.environ["CUPY_CACHE_DIR"] = str(work / "cupy-cache")  # one cache for every stage
    plans = stages(args.quick, work, args.data.resolve())
    unknown = [s for s in plan if s not in plans]
    if unknown:
        p.error(f"unknown stages {unknown}: choose from {', '.join(plans)}")
    run = Run(out, work, plan, budget, args.call, args.quick)
    run.summary["nvidia_smi"] = _nvidia_smi()
    print(f"plan: {', '.join(plan)} within {budget:g} s; work folder {work}", flush=True)
    run.refresh()
    for name in plan:
        print(f"== {name}", flush=True)
        r = run.run_stage(name, plans[name])
        run.record(r)
        print(
            f"   {r['status']}"
            + (f" ({r['why']})" if r.get("why") else "")
            + f", rc {r['rc']}, {r['seconds']} s; {run.elapsed():.0f} s in all",
            flush=True,
        )
    run.summary["finished"] = True
    run.refresh()
    problem = run.check_out()
    run.summary["out_check"] = problem or "ok: OUT holds logs.tar.gz and summary.json alone"
    run.refresh()
    done = run.summary["stages"]
    failed = [r["stage"] for r in done if r["status"] in ("failed", "cut")]
    skipped = [r["stage"] for r in done if r["status"] == "skipped"]
    print(
        f"{len(done) - len(failed) - len(skipped)} of {len(done)} stages passed"
        + (f"; failed or cut: {', '.join(failed)}" if failed else "")
        + (f"; skipped: {', '.join(skipped)}" if skipped else "")
        + f"; {run.elapsed():.0f} s of {budget:g}"
    )
    print(f"OUT check: {run.summary['out_check']}")
    files = sorted(str(f.relative_to(out)) for f in out.rglob("*"))
    print(f"OUT: {', '.join(files)}")
    return 1 if failed or problem else 0


if __name__ == "__main__":
    sys.exit(main())
