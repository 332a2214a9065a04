"""One process, one tree: training steps alternating one and two worker threads for the
element-wise passes (device.set_workers), at N BLAS threads. Runs on commit fad2bfa only
(the worker threads were reverted after this measurement).

    OPENBLAS_NUM_THREADS=2 python workers_ab.py small 2      # or base
"""

# ruff: noqa: I001  (its imports are fad2bfa's layout, which the sorter cannot see today)
import os
import statistics
import sys
import time

os.environ["OPENBLAS_NUM_THREADS"] = sys.argv[2] if len(sys.argv) > 2 else "2"
import numpy as np

from scratchformer import device
from scratchformer.models import Transformer, TransformerConfig
from scratchformer.optim import Adam

preset = sys.argv[1] if len(sys.argv) > 1 else "small"
r = np.random.default_rng(0)
cfg = TransformerConfig.preset(preset, vocab_size=8000)
model = Transformer(cfg)
opt = Adam(model.flatten(), 0.9, 0.98, 1e-9)
src = r.integers(4, 8000, (32, 32))
tgt = r.integers(4, 8000, (32, 32))


def step():
    model.zero_grad()
    loss, c = model.loss_forward(src, tgt, tgt, rng=device.generator(1))
    model.loss_backward(c)
    opt.step(1e-4)


times = {1: [], 2: []}
for w in (1, 2):
    device.set_workers(w)
    step()
n = 8 if preset == "small" else 4
for i in range(n):
    for w in (1, 2) if i % 2 == 0 else (2, 1):
        device.set_workers(w)
        t0 = time.perf_counter()
        step()
        times[w].append(time.perf_counter() - t0)
for w in (1, 2):
    print(
        preset,
        "BLAS threads",
        os.environ["OPENBLAS_NUM_THREADS"],
        "workers",
        w,
        "median ms",
        round(statistics.median(times[w]) * 1e3, 1),
        "min",
        round(min(times[w]) * 1e3, 1),
    )
