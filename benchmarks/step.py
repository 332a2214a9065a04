"""Forward + backward of one training batch (no optimizer): time and peak memory.

    python benchmarks/step.py --preset base --batch 8 --length 32

Peak memory is what tracemalloc sees NumPy allocate during the step (activations,
caches, temporaries and gradients' temporaries; the parameters and gradient buffers
allocated before the step are not counted), and the process's max RSS.
A benchmark, not a test: nothing here can fail on a timing.
"""

from __future__ import annotations

import argparse
import resource
import time
import tracemalloc

from scratchformer.engine import backend, device
from scratchformer.engine.models import PRESETS, Transformer, TransformerConfig


def main(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--preset", default="base", choices=sorted(PRESETS))
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--length", type=int, default=32, help="source and target length")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)

    model = Transformer(TransformerConfig.preset(args.preset, vocab_size=args.vocab))
    np = backend.np
    data = np.random.default_rng(0)
    shape = (args.batch, args.length)
    src, tgt_in, tgt_out = (backend.asarray(data.integers(4, args.vocab, shape)) for _ in range(3))
    drop = device.generator(1)

    def step():
        model.zero_grad()
        loss, cache = model.loss_forward(src, tgt_in, tgt_out, rng=drop)
        model.loss_backward(cache)
        return float(loss)

    step()  # warm-up
    tracemalloc.start()
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    tokens = args.batch * args.length
    print(
        f"{args.preset}: {model.num_parameters() / 1e6:.1f}M parameters, batch {args.batch} x "
        f"{args.length}, float32, {backend.backend_name()}\n"
        f"forward+backward: {min(times) * 1e3:.0f} ms (best of {args.repeats}), "
        f"{tokens / min(times):.0f} target tokens/s\n"
        f"peak memory during the step: {peak / 2**20:.0f} MiB (tracemalloc), "
        f"max RSS {rss:.0f} MiB"
    )


if __name__ == "__main__":
    main()
