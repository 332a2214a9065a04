"""Training speed on a GPU, ours (CuPy) against PyTorch eager on the same device, in one
run: tokens/s, ms per step (CUDA events, after a warm-up), the host CPU time per step,
peak device memory and model FLOP utilisation, for fp32 and TF32.

    python benchmarks/gpu/speed.py --configs small base --tokens 25000 4096 --json out.json

One step = zero the gradients, forward, backward, Adam (no clipping), on a batch of
``tokens`` target tokens (sentences of ``--length`` tokens, source as long), dropout 0.1,
label smoothing 0.1. Each row runs in a process of its own, and ``--json`` is rewritten
after each row (a run cut short keeps the rows it finished). TF32 is off unless a row
asks: ``CUPY_TF32=1`` for ours (read by CuPy when it starts), and
``torch.backends.cuda.matmul.allow_tf32`` for PyTorch; ``0`` and ``False`` in fp32 rows.

Peak memory: ours, the largest number of bytes CuPy's memory pool had lent out during one
more step after the timed ones (a counting allocator, kept out of the timing); PyTorch,
``torch.cuda.max_memory_allocated``. Model FLOPs per step: three times the forward's
multiply-adds of every matrix product (the projections, the feed-forward, the output
layer, and the attention's two products), counted from the config. A benchmark: nothing here
asserts on a timing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

#: dense peak throughput per GPU, TFLOP/s: (fp32 without tensor cores, TF32 tensor cores)
PEAKS = {"H100": (67.0, 494.7), "H200": (67.0, 494.7), "A100": (19.5, 156.0)}


def forward_flops(cfg, batch: int, length: int) -> float:
    """Multiply-adds x 2 of one forward pass of the Transformer on ``batch`` sentences of
    ``length`` source and ``length`` target tokens."""
    D, F, V, L = cfg.d_model, cfg.d_ff, cfg.vocab_size, length
    hk, hv = cfg.h * (cfg.d_k or D // cfg.h), cfg.h * (cfg.d_v or D // cfg.h)
    proj = 2 * D * hk + D * hv + hv * D  # W_q, W_k, W_v, W_o per token
    attn = hk * L + hv * L  # Q K^T and A V per query
    enc = cfg.N * (proj + attn + 2 * D * F)
    dec = cfg.N_dec * (2 * (proj + attn) + 2 * D * F)
    return 2.0 * batch * L * (enc + dec + D * V)


def _peak(name: str, tf32: bool) -> float | None:
    for key, (fp32, tf) in PEAKS.items():
        if key in name:
            return 1e12 * (tf if tf32 else fp32)
    return None


def run_row(args, preset: str, tokens: int, framework: str, tf32: bool) -> dict:
    """One row, in this process (its child side)."""
    import numpy as np
    from timing import Timer

    from scratchformer.engine import backend, device
    from scratchformer.engine.models import TransformerConfig

    on_gpu = backend.backend_name() == "cupy"
    batch = max(1, tokens // args.length)
    cfg = TransformerConfig.preset(preset, vocab_size=args.vocab, max_len=args.length + 2)
    data = np.random.default_rng(0)
    src, tgt_in, tgt_out = (data.integers(4, args.vocab, (batch, args.length)) for _ in "abc")
    peak = {"bytes": 0}
    if framework == "ours":
        from scratchformer.engine.models import Transformer
        from scratchformer.engine.optim import Adam

        model = Transformer(cfg)
        opt = Adam(model.flatten(), 0.9, 0.98, 1e-9)
        rng = device.generator(1)

        def step():
            model.zero_grad()
            loss, cache = model.loss_forward(src, tgt_in, tgt_out, rng=rng)
            model.loss_backward(cache)
            opt.step(1e-4)

        timer = lambda: Timer()  # noqa: E731
    else:
        import torch
        import torch_reference

        torch.backends.cuda.matmul.allow_tf32 = tf32
        model, opt = torch_reference.build(cfg)
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        model.to(dev)
        s, ti, to = (torch.from_numpy(a).to(dev) for a in (src, tgt_in, tgt_out))

        def step():
            opt.zero_grad(set_to_none=True)
            model.loss(s, ti, to, cfg.eps_ls).backward()
            opt.step()

        timer = lambda: Timer(torch_cuda=dev == "cuda")  # noqa: E731
    for _ in range(args.warmup):
        step()
    if framework == "torch" and on_gpu:
        import torch

        torch.cuda.reset_peak_memory_stats()
    peak["bytes"] = 0
    times, cpus = [], []
    for _ in range(args.repeats):
        with timer() as t:
            step()
        times.append(t.ms)
        cpus.append(t.cpu_ms)
    if framework == "torch" and on_gpu:
        import torch

        peak["bytes"] = torch.cuda.max_memory_allocated()
    if framework == "ours" and on_gpu:
        # one more step, untimed, through a counting allocator (a Python call per
        # allocation: kept out of the timed steps)
        cupy = backend.xp
        pool = cupy.get_default_memory_pool()

        def alloc(n):
            p = pool.malloc(n)
            peak["bytes"] = max(peak["bytes"], pool.used_bytes())
            return p

        cupy.cuda.set_allocator(alloc)
        step()
        cupy.cuda.Device().synchronize()
        cupy.cuda.set_allocator(pool.malloc)
    ms = statistics.median(times)
    flops = 3 * forward_flops(cfg, batch, args.length)
    name = device_name()
    top = _peak(name, tf32)
    return {
        "preset": preset, "tokens": batch * args.length, "framework": framework,
        "tf32": tf32, "ms": ms, "cpu_ms": statistics.median(cpus),
        "tokens_per_s": batch * args.length / (ms / 1e3), "peak_bytes": peak["bytes"],
        "tflops": flops / (ms / 1e3) / 1e12, "mfu": flops / (ms / 1e3) / top if top else None,
        "device": name,
    }


def device_name() -> str:
    from scratchformer.engine import backend

    if backend.backend_name() != "cupy":
        return "CPU (NumPy)"
    props = backend.xp.cuda.runtime.getDeviceProperties(0)
    return props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])


def _child(args) -> int:
    row = run_row(args, args.row[0], int(args.row[1]), args.row[2], args.row[3] == "tf32")
    print(json.dumps(row))
    return 0


def _torch_ok() -> str:
    """'' when PyTorch with CUDA can run the reference rows here, else why not."""
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed"
    return "" if torch.cuda.is_available() else "PyTorch sees no CUDA device"


def _ratios(rows: list[dict]) -> None:
    """Ours/PyTorch tokens/s for each row of ours whose PyTorch row is there."""
    for r in rows:
        key = (r["preset"], r["tokens"], r["tf32"])
        theirs = [o for o in rows if o["framework"] == "torch"
                  and (o["preset"], o["tokens"], o["tf32"]) == key]
        if r["framework"] == "ours" and theirs:
            r["ratio_to_torch"] = r["tokens_per_s"] / theirs[0]["tokens_per_s"]


def _write_json(path: Path, rows: list[dict]) -> None:
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(json.dumps(rows, indent=1))
    os.replace(tmp, path)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--configs", nargs="+", default=["small", "base"])
    p.add_argument("--tokens", nargs="+", type=int, default=[25000, 4096])
    p.add_argument("--length", type=int, default=50, help="tokens per sentence")
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--no-tf32", action="store_true", help="fp32 rows only")
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--row", nargs=4, help=argparse.SUPPRESS)  # a child's one row
    args = p.parse_args(argv)
    if args.row:
        return _child(args)
    why_not = "not asked for" if args.no_torch else _torch_ok()
    frameworks = ["ours"] + ([] if why_not else ["torch"])
    if why_not:
        print(f"PyTorch rows skipped: {why_not}")
    rows = []
    for tf32 in [False] + ([] if args.no_tf32 else [True]):
        for preset in args.configs:
            for tokens in args.tokens:
                for fw in frameworks:
                    env = {**os.environ, "CUPY_TF32": "1" if tf32 else "0"}
                    cmd = [sys.executable, __file__, "--row", preset, str(tokens), fw,
                           "tf32" if tf32 else "fp32", "--length", str(args.length),
                           "--vocab", str(args.vocab), "--warmup", str(args.warmup),
                           "--repeats", str(args.repeats)]
                    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
                    if out.returncode:
                        print(f"{preset} {tokens} {fw}: failed: {out.stderr.strip()[-400:]}")
                        continue
                    rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
                    _ratios(rows)
                    if args.json:
                        _write_json(args.json, rows)
                    r = rows[-1]
                    mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] else "-"
                    print(f"{r['device'][:24]:24} {'tf32' if tf32 else 'fp32'} {preset:6} "
                          f"{r['tokens']:6} {fw:6} {r['ms']:9.2f} ms  cpu {r['cpu_ms']:8.2f} ms  "
                          f"{r['tokens_per_s']:10,.0f} tok/s  {r['peak_bytes'] / 2**20:8.0f} MiB  "
                          f"MFU {mfu}", flush=True)
    for r in rows:
        if "ratio_to_torch" in r:
            print(f"ours/PyTorch {r['preset']} {r['tokens']} "
                  f"{'tf32' if r['tf32'] else 'fp32'}: {r['ratio_to_torch']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
