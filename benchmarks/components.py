"""Per-component timings of a d256 training step: what each optimisation bought.

    python benchmarks/components.py                       # this checkout
    PYTHONPATH=/path/to/older/checkout python benchmarks/components.py   # a baseline

Times, in isolation and with the shapes of the d256 configuration (32 x 32 tokens,
d_model 256, h 4, d_ff 1024, V 8000), the forward + backward of each piece that is not a
weight-matrix product: layer norm, residual dropout, the FFN's ReLU, self- and
cross-attention (the Q/K/V and output projections included), the label-smoothed loss over
(1024, 8000) logits, the embedding's gradient, and one Adam step over the model's 7.6M
parameters. CPU time (``process_time``), median of --repeats, one thread (set
OPENBLAS_NUM_THREADS=1); on CuPy (SCRATCHFORMER_BACKEND=cupy) the device time of CUDA
events instead. Running the same file against an older checkout gives the before/after
of docs/benchmarks.md. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

# --threads N must reach OpenBLAS before NumPy is imported
_threads = sys.argv[sys.argv.index("--threads") + 1] if "--threads" in sys.argv else "1"
os.environ.setdefault("OPENBLAS_NUM_THREADS", _threads)

from scratchformer.engine import backend, device  # noqa: E402
from scratchformer.engine.models import Transformer, TransformerConfig  # noqa: E402
from scratchformer.engine.models.transformer import padding_mask  # noqa: E402
from scratchformer.engine.ops import (  # noqa: E402
    cross_entropy_backward,
    cross_entropy_forward,
    layernorm_backward,
    layernorm_forward,
)
from scratchformer.engine.ops.loss import cross_entropy  # noqa: E402
from scratchformer.engine.optim import Adam  # noqa: E402


def _time(fn, repeats):
    fn()
    if backend.backend_name() == "cupy":  # queued work: the device's own clock
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "gpu"))
        from timing import Timer

        ts = []
        for _ in range(repeats):
            with Timer() as t:
                fn()
            ts.append(t.ms)
        return statistics.median(ts)
    # one thread: CPU time (the process's alone); more: wall-clock (CPU time sums threads)
    clock = time.process_time if os.environ["OPENBLAS_NUM_THREADS"] == "1" else time.perf_counter
    ts = []
    for _ in range(repeats):
        t0 = clock()
        fn()
        ts.append(clock() - t0)
    return statistics.median(ts) * 1e3


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="BLAS threads (above 1 the times are wall-clock: CPU time would sum the threads)",
    )
    args = p.parse_args(argv)
    np = backend.np
    r = np.random.default_rng(0)
    f32 = np.float32
    B, T, D, V = 32, 32, 256, 8000
    cfg = TransformerConfig.preset("small", vocab_size=V)
    model = Transformer(cfg)
    x = backend.asarray(r.standard_normal((B, T, D)).astype(f32))
    g, b = backend.asarray(np.ones(D, f32)), backend.asarray(np.zeros(D, f32))
    ids = backend.asarray(r.integers(4, V, (B, T)))
    rows = {}

    def ln():
        out, c = layernorm_forward(x, g, b)
        layernorm_backward(out, c)

    rows["layer norm fwd+bwd (1024 x 256)"] = ln
    addnorm = model.encoder.layers[0].ffn_norm

    def drop_res():
        y, c = addnorm.exit(x, x, device.generator(0))  # dropout, residual add, layer norm
        addnorm.exit_backward(y, c)

    rows["Add & Norm exit fwd+bwd (dropout 0.1)"] = drop_res
    ffn = model.encoder.layers[0].ffn

    def ffn_step():
        y, c = ffn.forward(x)
        ffn.backward(y, c)

    rows["FFN fwd+bwd (incl. 2 GEMMs)"] = ffn_step
    sa = model.decoder.layers[0].self_attn
    mask = padding_mask(ids, 0)  # the decoder's self-attention adds the causal mask

    def self_attn():
        y, c = sa.forward(x, x, mask)
        sa.backward(y, c)

    rows["masked self-attention fwd+bwd (incl. GEMMs)"] = self_attn
    ca = model.decoder.layers[0].cross_attn
    mem = backend.asarray(r.standard_normal((B, T, D)).astype(f32))

    def cross_attn():
        y, c = ca.forward(x, mem, (ids != 0)[:, None, None, :])
        ca.backward(y, c)

    rows["cross-attention fwd+bwd (incl. GEMMs)"] = cross_attn
    logits = backend.asarray(r.standard_normal((B, T, V)).astype(f32))

    def loss():
        lg = logits.copy()  # the model's own logits: a fresh array each step
        _, c = cross_entropy_forward(lg, ids, 0.1, 0)
        cross_entropy_backward(1.0, c)

    rows["label-smoothed loss fwd+bwd (1024 x 8000, pure op)"] = loss

    def loss_seam():
        lg = logits.copy()
        _, c = cross_entropy.forward(lg, ids, 0.1, 0, donate=True)
        cross_entropy.backward(1.0, c)

    rows["the same, the op's default (in place)"] = loss_seam
    emb = model.embed

    def emb_bwd():
        _, c = emb.forward(ids)
        emb.backward(x, c)

    rows["embedding lookup + gradient"] = emb_bwd
    flat = model.flatten()
    opt = Adam(flat)
    flat.grads[...] = backend.asarray(r.standard_normal(flat.size))

    rows["Adam step (7.6M parameters, flat)"] = lambda: opt.step(1e-4)
    src = r.integers(4, V, (B, T))

    def whole():
        model.zero_grad()
        _, c = model.loss_forward(src, ids, ids, rng=device.generator(1))
        model.loss_backward(c)
        opt.step(1e-4)

    rows["whole training step"] = whole
    threads = os.environ["OPENBLAS_NUM_THREADS"]
    clock = "device ms (CUDA events)" if backend.backend_name() == "cupy" else "CPU ms"
    if clock == "CPU ms" and threads != "1":
        clock = "wall-clock ms"
    print(f"{clock}, median of {args.repeats}, OPENBLAS_NUM_THREADS={threads}")
    for name, fn in rows.items():
        reps = max(3, args.repeats // 6) if name == "whole training step" else args.repeats
        print(f"{name:<52} {_time(fn, reps):8.2f}")


if __name__ == "__main__":
    main()
