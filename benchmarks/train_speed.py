"""Training-step speed and memory, scratchformer (NumPy) against PyTorch eager, side by side.

    python benchmarks/train_speed.py                          # d256, tiny, base at 1 and 2 threads
    python benchmarks/train_speed.py --threads 1 --configs d256 --repeats 9
    python benchmarks/train_speed.py --no-torch               # only our figures
    python benchmarks/train_speed.py --no-memory              # skip the peak-memory runs
    python benchmarks/train_speed.py --blas-coretype SkylakeX # OpenBLAS's AVX-512 kernels
    python benchmarks/train_speed.py --configs d256 --threads 2   # + the scale-out rows
    python benchmarks/train_speed.py --no-scale-out           # only the single-process rows
    python benchmarks/train_speed.py --against ../old          # this tree and another's

One training step = zero the gradients, forward, backward, Adam (no clipping), on a batch
of ``--batch`` sentences x ``--length`` tokens (source and target), float32, dropout 0.1,
label smoothing 0.1. Configurations (vocabulary ``--vocab``, 8000 by default):

    d256   a mid-size model: N=3+3, d_model=256, h=4, d_ff=1024 (= the ``small`` preset)
    tiny   the ``tiny`` preset (N=2, d_model=16, h=2, d_ff=32)
    base   the paper's base model (N=6, d_model=512, h=8, d_ff=2048)

Threads: the harness re-launches itself once per thread count with OMP_NUM_THREADS,
OPENBLAS_NUM_THREADS and MKL_NUM_THREADS set before NumPy or torch is imported (and
``torch.set_num_threads``), so both frameworks get the same number of cores. Within a
launch, our steps and torch's alternate (which goes first alternates too), so noise from
other processes hits both; we report the median (and best) step and the ratio of our
target tokens/s to torch's.

Rounds (``--rounds``, 3 by default): every launch (each thread count's single-process
run, then the scale-out run) is made once per round, in turn, and a row's steps are
pooled over the rounds (``--repeats`` steps per row in all). The rows of a ratio are
then never taken in separate stretches of time, so load on the machine cannot fake it.

The ceiling: each launch measures the machine's float32 GEMM rate at its thread count
(1024 x 1024 products, before and after its steps); every row reports its step's matrix
products (``step_flops``: 3x the forward's; 47.3 GFLOP for d256) per second as a
fraction of the median ceiling at its core count (%ceil).

Peak memory of a step: in a fresh process per framework, two warm-up steps (torch
allocates its Adam moments lazily), ``malloc_trim``, reset the peak RSS
(``/proc/self/clear_refs``), one step, then peak RSS minus the RSS before it. The same
method for both; for ours also tracemalloc's peak of NumPy allocations during the step.

Scale-out rows (``--scale-out``; on by default when ``--threads`` includes ``--ranks``,
2 by default; ``--no-scale-out`` turns them off), per config, at ``--ranks`` cores:

    (a) ours, ``mpiexec -n 2``, 1 BLAS thread per rank: each rank takes the sentences
        ``rank, rank + 2, ...`` of the same batch (``distributed.share``) and runs what
        the trainer's step runs: ``accumulate_gradients`` (forward, backward, one
        Allreduce of the flat gradient over the ranks), then the flat Adam
    (b) ours, one process, 2 threads: the single-process row above
    (c) PyTorch eager, one process, 2 threads: the single-process row above
    (d) PyTorch DDP over gloo, 2 ranks x 1 thread, each rank its share of the batch:
        the distributed peer of (a)

(a) and (d) run in the same 2 processes (started by mpiexec; torch's process group over
tcp://127.0.0.1 on a free port), their steps interleaved as above, after a barrier; a
step's time is its slowest rank's. Tokens/s counts the whole batch's target tokens. The
table gives each row's median, fastest and slowest step and the ratio of (a)'s tokens/s
to (b)'s, (c)'s and (d)'s; ``benchmarks/scale_out.py`` has the details. Without
mpiexec or mpi4py, (a) is skipped (and (d) runs in plain processes); without torch or
its gloo backend, (d) is; each with the reason printed.

Before and after a change (``--against TREE``, a source tree of the package such as a
``git worktree`` of the commit before): every single-process launch is made twice per
round, once with this tree's package and once with TREE's (``PYTHONPATH``), each timing
its steps and torch's; the rows say which tree, and a last table gives this tree's
tokens/s over TREE's per row (and the same ratio for torch, which changed nothing: the
launches' noise). The scale-out rows run this tree only.

Without torch installed only our figures are printed. A benchmark, not a test: nothing
here asserts on a timing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import scale_out  # beside this file (benchmarks/ is the script's folder on sys.path)

CONFIGS = {
    "d256": dict(preset="small"),
    "tiny": dict(preset="tiny"),
    "base": dict(preset="base"),
}
_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def _torch_available() -> bool:
    try:
        import importlib.util

        return importlib.util.find_spec("torch") is not None
    except Exception:
        return False


def step_flops(cfg, batch: int, length: int) -> float:
    """Floating-point operations of one training step's matrix products: 3x the forward's
    (the backward of ``Y = X W`` is two products of the same size, ``dX = dY W^T`` and
    ``dW = X^T dY``). Forward, n = batch * length tokens per side, d = d_model:
    encoder layer 8 n d^2 (Q, K, V, output) + 4 n length d (``Q K^T`` and ``A V``) +
    4 n d d_ff (the FFN); decoder layer the same plus cross-attention's 8 n d^2 +
    4 n length d; the output projection 2 n d V. Elementwise work (softmax, layer norm,
    Adam) is left out: it is not what a GEMM ceiling measures."""
    n, d, L = batch * length, cfg.d_model, length
    attn = 8 * n * d * d + 4 * n * L * d
    ffn = 4 * n * d * cfg.d_ff
    forward = cfg.N * (attn + ffn) + cfg.N * (2 * attn + ffn) + 2 * n * d * cfg.vocab_size
    return 3.0 * forward


def gemm_gflops(size: int = 1024, repeats: int = 5) -> float:
    """The machine's float32 GEMM rate at the thread count set for this process: the
    median of ``repeats`` products of two (size, size) matrices, after two warm-ups, in
    GFLOP/s (2 size^3 operations each). The ceiling a training step's products can reach."""
    import numpy

    r = numpy.random.default_rng(0)
    a, b = (r.standard_normal((size, size)).astype(numpy.float32) for _ in "ab")
    out = numpy.empty_like(a)
    times = []
    for i in range(repeats + 2):
        t0 = time.perf_counter()
        numpy.matmul(a, b, out=out)
        if i >= 2:
            times.append(time.perf_counter() - t0)
    return 2 * size**3 / statistics.median(times) / 1e9


# -- child side -----------------------------------------------------------------------------
def _engine(name: str):
    """The engine's module ``name`` ("models"), in either layout (benchmarks/layout.py:
    the tree of --against may be one from before the engine had a folder)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import layout

    return layout.engine(name)


def _config(name, args):
    TransformerConfig = _engine("models").TransformerConfig

    overrides = dict(vocab_size=args.vocab, max_len=max(64, args.length))
    if args.attention_block:
        overrides["attention_block"] = args.attention_block
    return TransformerConfig.preset(CONFIGS[name]["preset"], **overrides)


def _batch(args):
    """The host batch (src, tgt_in, tgt_out), int64 (batch, length), no padding."""
    backend = _engine("backend")

    np = backend.np
    data = np.random.default_rng(0)
    shape = (args.batch, args.length)
    return tuple(data.integers(4, args.vocab, shape).astype(np.int64) for _ in "abc")


def _ours(cfg):
    """Our model, flattened, and the flat Adam."""
    model = _engine("models").Transformer(cfg)
    return model, _engine("optim").Adam(model.flatten(), 0.9, 0.98, 1e-9)


def _torch_reference():
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import torch_reference

    return torch_reference


def _setup(name, args):
    """Our model, optimizer and step closure, and the host batch."""
    backend, device = _engine("backend"), _engine("device")

    cfg = _config(name, args)
    src, tgt_in, tgt_out = _batch(args)
    model, opt = _ours(cfg)
    drop = device.generator(1)
    s, ti, to = (backend.asarray(a) for a in (src, tgt_in, tgt_out))

    def step():
        model.zero_grad()
        loss, cache = model.loss_forward(s, ti, to, rng=drop)
        model.loss_backward(cache)
        opt.step(1e-4)
        return float(loss)

    return cfg, model, step, (src, tgt_in, tgt_out)


def _torch_step(cfg, batch, threads):
    import torch

    torch_reference = _torch_reference()
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model, opt = torch_reference.build(cfg)
    return torch_reference.make_step(model, opt, *batch, cfg.eps_ls), torch.__version__


def _child_speed(args):
    out = []
    ceiling = [gemm_gflops()]  # before and after the configs' steps: the machine's state
    for name in args.configs:
        cfg, model, ours, batch = _setup(name, args)
        steps = {"ours": ours}
        info = {"config": name, "threads": args.threads[0], "params": model.num_parameters()}
        if args.torch:
            steps["torch"], info["torch_version"] = _torch_step(cfg, batch, args.threads[0])
        for f in steps.values():  # warm-up: first-touch allocations, BLAS thread start
            for _ in range(2):
                f()
        times = {k: [] for k in steps}
        cpu = {k: [] for k in steps}
        order = list(steps)
        for r in range(args.repeats):
            for k in order if r % 2 == 0 else order[::-1]:
                c0, t0 = time.process_time(), time.perf_counter()
                steps[k]()
                times[k].append(time.perf_counter() - t0)
                cpu[k].append(time.process_time() - c0)
        info["flops"] = step_flops(cfg, args.batch, args.length)
        for k in steps:  # raw: the parent pools the rounds (cpu: all threads' CPU time)
            info[k] = dict(times=times[k], cpu=cpu[k])
        out.append(info)
    ceiling.append(gemm_gflops())
    for info in out:
        info["ceiling"] = ceiling
        print(json.dumps(info), flush=True)
    return out


def _child_ceiling(args):
    print(json.dumps(dict(threads=args.threads[0], ceiling=[gemm_gflops()])), flush=True)


def _rss_kib(field):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _child_memory(args):
    import ctypes

    name, fw = args.configs[0], args.memory
    cfg, _, ours, batch = _setup(name, args)
    step = ours if fw == "ours" else _torch_step(cfg, batch, args.threads[0])[0]
    for _ in range(2):
        step()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass
    try:
        Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
        reset = True
    except OSError:
        reset = False
    before = _rss_kib("VmRSS")
    step()
    peak = _rss_kib("VmHWM")
    info = dict(
        config=name,
        framework=fw,
        rss_before_mib=before / 1024,
        step_peak_rss_mib=(peak - before) / 1024 if reset else None,
    )
    if fw == "ours":
        import tracemalloc

        tracemalloc.start()
        step()
        info["step_peak_tracemalloc_mib"] = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    print(json.dumps(info), flush=True)


def _child_scale_out(args):
    return scale_out.child(args, _config, _batch, _ours, _torch_reference)


# -- parent side ----------------------------------------------------------------------------
def _child(args, threads, repeats=None, tree=None):
    """The child's command line and environment (thread counts set before any import);
    ``repeats`` timed steps per framework (default ``--repeats``); ``tree``: the source
    tree whose package the child imports (None: this one)."""
    env = dict(os.environ)
    if tree:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (tree, env.get("PYTHONPATH")) if p)
    for v in _THREAD_VARS:
        env[v] = str(threads)
    if args.blas_coretype:
        env["OPENBLAS_CORETYPE"] = args.blas_coretype
    cmd = [sys.executable, __file__, "--child", "--threads", str(threads), "--configs"]
    cmd += args.configs + ["--batch", str(args.batch), "--length", str(args.length)]
    cmd += ["--vocab", str(args.vocab), "--repeats", str(repeats or args.repeats)]
    if args.attention_block:
        cmd += ["--attention-block", str(args.attention_block)]
    if not args.torch:
        cmd.append("--no-torch")
    return cmd, env


def _launch(args, threads, extra, repeats=None, tree=None):
    cmd, env = _child(args, threads, repeats, tree)
    res = subprocess.run(cmd + extra, env=env, capture_output=True, text=True)
    if res.returncode:
        sys.stderr.write(res.stderr)
        raise SystemExit(f"child failed: {' '.join(cmd + extra)}")
    return [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]


def _blas() -> str:
    backend = _engine("backend")

    try:
        cfg = backend.np.show_config(mode="dicts")
        b = cfg["Build Dependencies"]["blas"]
        return f"{b['name']} {b.get('version', '')}"
    except Exception:
        return "unknown BLAS"


def main(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--configs", nargs="+", default=["d256", "tiny", "base"], choices=CONFIGS)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--length", type=int, default=32, help="source and target length")
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument(
        "--repeats", type=int, default=9, help="timed steps per row, over all the rounds"
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="launch every row this many times in turn (single-process and scale-out "
        "alternating), pooling their steps",
    )
    p.add_argument("--attention-block", type=int, default=None, help="memory-efficient attn")
    p.add_argument(
        "--blas-coretype",
        help="set OPENBLAS_CORETYPE in the runs (e.g. SkylakeX: AVX-512 kernels); default: "
        "inherit the environment's",
    )
    p.add_argument("--no-torch", dest="torch", action="store_false")
    p.add_argument("--no-memory", dest="memory_runs", action="store_false")
    p.add_argument(
        "--scale-out",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the scale-out rows (a)-(d) at --ranks cores; default: on when --threads "
        "includes --ranks",
    )
    p.add_argument("--ranks", type=int, default=2, help="processes of the scale-out rows")
    p.add_argument(
        "--runs",
        type=int,
        default=1,
        help="make the whole measurement N times; a last table gives each row's median "
        "and spread over the runs",
    )
    p.add_argument("--json", help="also write the results to this file")
    p.add_argument(
        "--against",
        metavar="TREE",
        help="also time the package of this source tree in the same rounds (before/after)",
    )
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--memory", choices=["ours", "torch"], help=argparse.SUPPRESS)
    p.add_argument("--scale-out-child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--ceiling", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--world-size", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--ours-skipped", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        if args.scale_out_child:
            return _child_scale_out(args)
        if args.ceiling:
            return _child_ceiling(args)
        return _child_memory(args) if args.memory else _child_speed(args)
    if args.torch and not _torch_available():
        print("torch is not installed: printing only scratchformer's figures")
        args.torch = False

    import numpy  # only for the version line (the package itself imports it in backend)

    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, NumPy {numpy.__version__} ({_blas()})"
    )
    core = args.blas_coretype or os.environ.get("OPENBLAS_CORETYPE")
    print(f"OPENBLAS_CORETYPE={core or '(unset: OpenBLAS detects the CPU)'}")
    print(
        f"batch {args.batch} x {args.length} tokens, vocabulary {args.vocab}, float32, "
        f"dropout 0.1, label smoothing 0.1, Adam; ours and torch's steps interleaved, "
        f"{math.ceil(args.repeats / args.rounds)} each per launch, {args.rounds} rounds"
    )
    results = []
    for k in range(args.runs):
        if args.runs > 1:
            print(f"== run {k + 1} of {args.runs}")
        speed, scale, ceiling = _rounds(args)
        _print_tables(speed, scale, ceiling, args)
        results.append(dict(speed=speed, scale_out=scale, ceiling_gflops=ceiling))
    if args.runs > 1:
        _print_runs(results, args)
        if args.against:
            _print_against_runs(results, args)
    memory = []
    if args.memory_runs:
        saved = args.configs
        for name in saved:
            args.configs = [name]
            for fw in ["ours"] + (["torch"] if args.torch else []):
                memory += _launch(args, args.threads[0], ["--memory", fw])
        args.configs = saved
        print(f"peak memory of one training step ({args.threads[0]} thread), MiB above the RSS")
        print(
            f"{'config':<6} {'framework':<9} {'RSS before':>10} {'step peak':>9} "
            f"{'tracemalloc':>11}"
        )
        for m in memory:
            tm = m.get("step_peak_tracemalloc_mib")
            sp = m["step_peak_rss_mib"]
            print(
                f"{m['config']:<6} {m['framework']:<9} {m['rss_before_mib']:>10.0f} "
                f"{'n/a' if sp is None else f'{sp:.0f}':>9} "
                f"{'' if tm is None else f'{tm:.0f}':>11}"
            )
    if args.json:
        result = dict(results[-1], memory=memory, runs=results)
        Path(args.json).write_text(json.dumps(result, indent=1))
    if any("error" in r for res in results for r in res["scale_out"]):
        raise SystemExit("the scale-out run failed (above)")


def _print_tables(speed, scale, ceiling, args) -> None:
    """One run's tables: the ceiling, the single-process rows, before/after, scale-out."""
    _print_ceiling(ceiling, speed)
    hdr = f"{'config':<6} {'thr':>3} {'tree':<7} {'params':>7} {'ours ms':>8} {'(cpu)':>6}"
    hdr += f" {'ours tok/s':>10}"
    hdr += f" {'%ceil':>5}"
    if args.torch:
        hdr += f" {'torch ms':>8} {'(cpu)':>6} {'torch tok/s':>11} {'%ceil':>5}"
        hdr += f" {'ratio':>6} {'best':>6}"
    print(hdr)
    for r in speed:
        o = r["ours"]
        line = (
            f"{r['config']:<6} {r['threads']:>3} {r['tree']:<7} {r['params'] / 1e6:>6.1f}M "
            f"{o['median_ms']:>8.0f} {o['cpu_ms']:>6.0f} {o['tokens_per_s']:>10.0f}"
            f" {o['of_ceiling']:>5.0%}"
        )
        if args.torch:
            t = r["torch"]
            ratio = o["tokens_per_s"] / t["tokens_per_s"]
            best = o["best_tokens_per_s"] / t["best_tokens_per_s"]
            line += (
                f" {t['median_ms']:>8.0f} {t['cpu_ms']:>6.0f} {t['tokens_per_s']:>11.0f}"
                f" {t['of_ceiling']:>5.0%} {ratio:>5.2f}x {best:>5.2f}x"
            )
        print(line)
    print(
        f"ms: median wall-clock step of {args.rounds} rounds; (cpu): median CPU time of the "
        "step, all threads;\n%ceil: the step's matrix-product GFLOP/s over the GEMM ceiling "
        "at its core count"
    )
    if args.torch:
        print(
            f"torch {speed[0].get('torch_version')}; ratio = our tokens/s / torch's "
            "(medians); best = the same from each side's fastest step"
        )
    if args.against:
        _print_against(speed, args)
    if scale:
        this = [r for r in speed if r["tree"] == "this"]
        scale_out.print_rows([r for r in scale if "config" in r], this, args.ranks)


def _scale_out_plan(args) -> tuple[bool, str | None]:
    """Whether the scale-out rows run, and why ours cannot run over MPI (or None)."""
    n = args.ranks
    on = args.scale_out if args.scale_out is not None else n in args.threads
    if not on:
        return False, None
    if not 2 <= n <= args.batch:
        print(f"scale-out rows: skipped: --ranks {n} must be 2 to --batch ({args.batch})")
        return False, None
    missing = scale_out.mpi_missing()
    if missing:
        print(f"scale-out (a), ours over MPI: skipped: {missing}")
    if missing and not args.torch:
        print("scale-out (d), torch DDP: skipped: --no-torch or torch not installed")
        return False, missing
    return True, missing


def _scale_out_round(args, repeats: int, mpi_missing):
    """One scale-out launch: (a) and (d) interleaved in ``--ranks`` processes. Returns
    rank 0's rows; raises SystemExit (with the child's error) if it failed."""
    cmd, env = _child(args, 1, repeats)
    cmd += ["--scale-out-child", "--port", str(scale_out.free_port())]
    if mpi_missing:
        cmd += ["--ours-skipped", mpi_missing]
    rows, error = scale_out.launch(cmd, env, args.ranks, use_mpi=mpi_missing is None)
    if error:
        raise SystemExit(f"the scale-out run failed: {error}")
    return rows


def _pooled(infos: list[dict], keys, tokens: int, flops: float, ceiling: float) -> dict:
    """The rounds' infos of one row merged: each framework's step times pooled, then
    median, best, slowest, CPU, tokens/s and the fraction of the GEMM ceiling."""
    out = {k: v for k, v in infos[0].items() if k not in keys}
    for k in keys:
        if k not in infos[0]:
            continue
        times = [t for info in infos for t in info[k]["times"]]
        cpu = [c for info in infos for c in info[k]["cpu"]]
        st = scale_out.stats(times, cpu, tokens)
        st["of_ceiling"] = flops / (st["median_ms"] / 1e3) / (ceiling * 1e9)
        out[k] = st | dict(times_ms=[t * 1e3 for t in times])
    return out


def _rounds(args):
    """``--rounds`` rounds, each: every thread count's single-process child, then the
    scale-out launch, so that load on the machine falls on every row alike (the rows
    of a ratio are never taken in separate stretches of time). ``--repeats`` timed
    steps per row in all, shared out over the rounds. Returns (single-process rows,
    scale-out rows, {threads: [GEMM GFLOP/s measured]})."""
    per_round = max(1, math.ceil(args.repeats / args.rounds))
    scale_on, mpi_missing = _scale_out_plan(args)
    raw, raw_scale = defaultdict(list), defaultdict(list)
    ceiling = defaultdict(list)
    trees = [None] + ([str(Path(args.against).resolve())] if args.against else [])
    for i in range(args.rounds):
        for n in args.threads:
            for tree in trees if i % 2 == 0 else trees[::-1]:
                infos = _launch(args, n, [], per_round, tree)
                ceiling[n] += infos[0]["ceiling"]
                for info in infos:
                    info["tree"] = "against" if tree else "this"
                    raw[(info["config"], n, info["tree"])].append(info)
        if scale_on:
            if args.ranks not in args.threads:
                ceiling[args.ranks] += _launch(args, args.ranks, ["--ceiling"])[0]["ceiling"]
            for row in _scale_out_round(args, per_round, mpi_missing):
                raw_scale[row["config"]].append(row)
    top = {n: statistics.median(c) for n, c in ceiling.items()}
    tokens = args.batch * args.length
    speed = [
        _pooled(infos, ("ours", "torch"), tokens, infos[0]["flops"], top[n])
        for (_, n, _), infos in raw.items()
    ]
    flops = {r["config"]: r["flops"] for r in speed}
    scale = [
        _pooled(infos, ("ours", "ddp"), tokens, flops[c], top[args.ranks])
        for c, infos in raw_scale.items()
    ]
    for r in scale:
        r["ceiling_gflops"] = top[args.ranks]
    return speed, scale, ceiling


def _print_runs(results: list[dict], args) -> None:
    """Each row over the runs: its %ceil in every run, their median and spread (max - min,
    in points), and the median step time with its spread: one good run cannot stand for
    the figure."""
    rows = defaultdict(lambda: defaultdict(list))
    for res in results:
        for r in res["speed"]:
            label = f"{r['config']}, {r['threads']} thread{'s' if r['threads'] > 1 else ''}"
            label += f" ({r['tree']})" if args.against else ""
            for fw in ("ours", "torch"):
                if r.get(fw):
                    rows[(label, fw)]["ceil"].append(r[fw]["of_ceiling"])
                    rows[(label, fw)]["ms"].append(r[fw]["median_ms"])
        for r in res["scale_out"]:
            for fw, name in (("ours", "ours"), ("ddp", "torch DDP")):
                if r.get(fw):
                    label = f"{r['config']}, {args.ranks} ranks"
                    rows[(label, name)]["ceil"].append(r[fw]["of_ceiling"])
                    rows[(label, name)]["ms"].append(r[fw]["median_ms"])
    n = len(results)
    print(f"over the {n} runs: each row's %ceil per run, median and spread (max - min)")
    head = " ".join(f"{'run ' + str(i + 1):>6}" for i in range(n))
    print(f"{'row':<26} {'who':<9} {head} {'median':>6} {'spread':>6} {'ms median (min-max)':>20}")
    for (label, fw), v in rows.items():
        c, ms = v["ceil"], v["ms"]
        runs = " ".join(f"{x:>6.0%}" for x in c)
        spread = f"{(max(c) - min(c)) * 100:.0f} pt"
        print(
            f"{label:<26} {fw:<9} {runs} {statistics.median(c):>6.0%} {spread:>6} "
            f"{statistics.median(ms):>8.0f} ({min(ms):.0f}-{max(ms):.0f})"
        )


def _print_against_runs(results: list[dict], args) -> None:
    """This tree's tokens/s over the other tree's in every run, their median and spread
    ((max - min) / median): a ratio is taken as measured only where the runs agree."""
    ratios = defaultdict(list)
    for res in results:
        rows = {(r["config"], r["threads"], r["tree"]): r for r in res["speed"]}
        for (config, n, tree), a in rows.items():
            b = rows.get((config, n, "against"))
            if tree == "this" and b:
                ratios[(config, n)].append(a["ours"]["tokens_per_s"] / b["ours"]["tokens_per_s"])
    print(f"this tree / {args.against} over the {len(results)} runs (ours, tokens/s)")
    head = " ".join(f"{'run ' + str(i + 1):>6}" for i in range(len(results)))
    print(f"{'config':<6} {'thr':>3} {head} {'median':>6} {'spread':>6}")
    for (config, n), v in ratios.items():
        med = statistics.median(v)
        runs = " ".join(f"{x:>5.3f}x" for x in v)
        print(f"{config:<6} {n:>3} {runs} {med:>5.3f}x {(max(v) - min(v)) / med:>6.1%}")


def _print_against(speed, args) -> None:
    """This tree's tokens/s over the other tree's, per config and thread count."""
    rows = {(r["config"], r["threads"], r["tree"]): r for r in speed}
    print(f"this tree / {args.against} (tokens/s, medians; torch's ratio: the launches' noise)")
    print(f"{'config':<6} {'thr':>3} {'ours':>6}" + (f" {'torch':>6}" if args.torch else ""))
    for config, n, tree in rows:
        if tree != "this" or (config, n, "against") not in rows:
            continue
        a, b = rows[(config, n, "this")], rows[(config, n, "against")]
        line = f"{config:<6} {n:>3} {a['ours']['tokens_per_s'] / b['ours']['tokens_per_s']:>5.3f}x"
        if args.torch:
            line += f" {a['torch']['tokens_per_s'] / b['torch']['tokens_per_s']:>5.3f}x"
        print(line)


def _print_ceiling(ceiling, speed) -> None:
    parts = [
        f"{n} core{'s' if n > 1 else ''} {statistics.median(c):.0f} GFLOP/s "
        f"({min(c):.0f}-{max(c):.0f})"
        for n, c in sorted(ceiling.items())
    ]
    print(
        "GEMM ceiling (float32 1024x1024 products, median of 5, measured before and after "
        f"each launch): {', '.join(parts)}"
    )
    flops = {r["config"]: r["flops"] / 1e9 for r in speed}
    print("matrix products per step: " + ", ".join(f"{c} {f:.1f} GFLOP" for c, f in flops.items()))


if __name__ == "__main__":
    main()
