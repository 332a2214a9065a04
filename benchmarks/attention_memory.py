"""Memory-efficient (blockwise) attention against dense attention: peak memory and speed.

    python benchmarks/attention_memory.py                      # T = S = 2048, blocks 64..512
    python benchmarks/attention_memory.py --length 4096 --heads 8 --blocks 128

One attention forward + backward (the per-head attention alone,
``MultiHeadAttention.attend`` and ``attend_backward``: Q, K, V, dO given; causal mask;
float32, no dropout), B=1, H=--heads, Dh=64, through the ops' chosen
implementations, dense and with query blocks (``attention_block``). Peak memory is
what tracemalloc sees NumPy allocate during the call beyond the inputs (exact and
deterministic); on CuPy (SCRATCHFORMER_BACKEND=cupy) the most bytes CuPy's memory pool
lent out beyond the inputs. Time is the median of
--repeats calls (on CuPy each one waited for, so the device's). Also the same for a
whole training step of a model with ``attention_block`` set (--model), to show the cost
inside a step at the usual lengths.

Run it with OPENBLAS_NUM_THREADS=1 (or 2) set to fix the thread count. A benchmark, not
a test: nothing here asserts on a timing.
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc

from scratchformer.engine import backend, device
from scratchformer.engine.nn.attention import MultiHeadAttention
from scratchformer.engine.ops import causal_mask


def _attention(heads: int, block):
    """The per-head attention of a module with query blocks of ``block`` (None: dense),
    as a forward/backward pair of (Q, K, V, mask)."""
    m = MultiHeadAttention(heads * 64, heads, rng=backend.host_rng(0))
    m.attention_block = block
    return m.attend, m.attend_backward


def _measure(fwd, bwd, args_, repeats, **kw):
    Q, K, V, mask, dO = args_

    def call():
        O, cache = fwd(Q, K, V, mask, **kw)
        return bwd(dO, cache)

    call()
    peak = _peak_bytes(call)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        call()
        _synchronize()
        times.append(time.perf_counter() - t0)
    return peak / 2**20, statistics.median(times) * 1e3


def _synchronize():
    if backend.backend_name() == "cupy":
        backend.xp.cuda.Device().synchronize()


def _peak_bytes(call) -> int:
    """The most memory ``call`` held at once beyond what was held before it."""
    if backend.backend_name() != "cupy":
        tracemalloc.start()
        call()
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return peak
    cupy = backend.xp
    pool = cupy.get_default_memory_pool()
    base, peak = pool.used_bytes(), [0]

    def alloc(n):
        p = pool.malloc(n)
        peak[0] = max(peak[0], pool.used_bytes() - base)
        return p

    cupy.cuda.set_allocator(alloc)
    try:
        call()
        _synchronize()
    finally:
        cupy.cuda.set_allocator(pool.malloc)
    return peak[0]


def _model_step(block, length, repeats):
    from scratchformer.engine.models import Transformer, TransformerConfig

    np = backend.np
    cfg = TransformerConfig.preset("small", vocab_size=8000, attention_block=block)
    model = Transformer(cfg)
    r = np.random.default_rng(0)
    src, ti, to = (r.integers(4, 8000, (32, length)) for _ in range(3))
    drop = device.generator(1)

    def step():
        model.zero_grad()
        loss, cache = model.loss_forward(src, ti, to, rng=drop)
        model.loss_backward(cache)

    step()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--length", type=int, default=2048)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--blocks", type=int, nargs="+", default=[64, 128, 256, 512])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--model", action="store_true", help="also time a small-model step")
    args = p.parse_args(argv)

    np = backend.np
    r = np.random.default_rng(0)
    shape = (1, args.heads, args.length, 64)
    Q, K, V, dO = (backend.asarray(r.standard_normal(shape, dtype=np.float32)) for _ in range(4))
    mask = causal_mask(args.length)
    data = (Q, K, V, mask, dO)
    print(
        f"attention forward+backward, B=1, H={args.heads}, T=S={args.length}, Dh=64, "
        f"causal, float32 (inputs: {4 * Q.nbytes / 2**20:.0f} MiB)"
    )
    d_mem, d_ms = _measure(*_attention(args.heads, None), data, args.repeats)
    print(f"{'variant':<12} {'peak MiB':>9} {'vs dense':>9} {'ms':>8} {'time vs dense':>14}")
    print(f"{'dense':<12} {d_mem:>9.1f} {1.0:>8.1f}x {d_ms:>8.0f} {1.0:>13.2f}x")
    for b in args.blocks:
        mem, ms = _measure(*_attention(args.heads, b), data, args.repeats)
        print(f"{f'block {b}':<12} {mem:>9.1f} {d_mem / mem:>8.1f}x {ms:>8.0f} {ms / d_ms:>13.2f}x")
    if args.model:
        print("training step (forward + backward) of the d256 model, 32 x 32 tokens:")
        base = _model_step(None, 32, args.repeats)
        print(f"  dense      {base:.0f} ms")
        for b in (8, 16):
            ms = _model_step(b, 32, args.repeats)
            print(f"  block {b:<4} {ms:.0f} ms ({ms / base:.2f}x)")


if __name__ == "__main__":
    main()
