"""Peak memory and time of one attention step: local block attention vs dense (causal).

    python benchmarks/local_attention_memory.py                  # L=4096, M=64
    python benchmarks/local_attention_memory.py --length 8192 --block 128

Measures, with ``tracemalloc`` (NumPy reports its buffers to it), the peak of the memory
allocated during forward and during forward + backward of the attention core alone
(Q, K, V given; B=1, H=4, Dh=32, float32), for:

    dense   attention_forward with the (L, L) causal mask: scores are H * L^2
    band    the same, with the local band mask (what local attention equals)
    local   LocalMultiHeadAttention.attend: blocked scores, H * L * 2M

Also checks that local and band-masked dense agree on the output.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

from scratchformer.engine import backend
from scratchformer.engine.backend import xp
from scratchformer.engine.nn.attention import MultiHeadAttention
from scratchformer.engine.nn.local_attention import LocalMultiHeadAttention
from scratchformer.engine.ops.attention import causal_mask
from scratchformer.engine.ops.local_attention import band_mask


def measure(fwd, bwd):
    tracemalloc.start()
    t0 = time.perf_counter()
    out, cache = fwd()
    _, peak_f = tracemalloc.get_traced_memory()
    t1 = time.perf_counter()
    bwd(out, cache)
    t2 = time.perf_counter()
    _, peak_fb = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return out, peak_f, peak_fb, t1 - t0, t2 - t1


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--length", type=int, default=4096)
    p.add_argument("--block", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--dk", type=int, default=32)
    a = p.parse_args(argv)
    np = backend.np
    r = np.random.default_rng(0)
    L, M, H, Dh = a.length, a.block, a.heads, a.dk
    Q, K, V = (xp.asarray(r.standard_normal((1, H, L, Dh)), dtype=xp.float32) for _ in range(3))
    dO = xp.asarray(r.standard_normal((1, H, L, Dh)), dtype=xp.float32)
    causal = causal_mask(L)[None, None]
    band = band_mask(L, M)[None, None]
    dense = MultiHeadAttention(H * Dh, H, rng=backend.host_rng(0))
    local = LocalMultiHeadAttention(H * Dh, H, rng=backend.host_rng(0), local_block=M)
    rows = []
    outs = {}
    for name, fwd, bwd in [
        (
            "dense (causal)",
            lambda: dense.attend_masked(Q, K, V, causal),
            lambda o, c: dense.attend_backward(dO, c),
        ),
        (
            "dense + band mask",
            lambda: dense.attend_masked(Q, K, V, band),
            lambda o, c: dense.attend_backward(dO, c),
        ),
        (
            f"local (block {M})",
            lambda: local.attend(Q, K, V),
            lambda o, c: local.attend_backward(dO, c),
        ),
    ]:
        out, pf, pfb, tf, tb = measure(fwd, bwd)
        outs[name] = out
        rows.append((name, pf / 2**20, pfb / 2**20, tf, tb))
    err = float(abs(outs["dense + band mask"] - outs[f"local (block {M})"]).max())
    inputs = 4 * L * H * Dh * 3 / 2**20
    print(f"L={L}, block={M}, B=1, H={H}, Dh={Dh}, float32 (Q, K, V: {inputs:.1f} MiB)")
    print(
        f"{'attention':<20} {'peak fwd MiB':>13} {'peak fwd+bwd MiB':>17} {'fwd s':>7} {'bwd s':>7}"
    )
    for name, pf, pfb, tf, tb in rows:
        print(f"{name:<20} {pf:>13.1f} {pfb:>17.1f} {tf:>7.3f} {tb:>7.3f}")
    print(f"max |local - dense with band mask| = {err:.2e}")


if __name__ == "__main__":
    main()
