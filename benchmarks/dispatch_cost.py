"""The dispatcher's cost per op call, in microseconds: 10^5 calls of an op through its
table against the same number of calls of the implementation the table chooses, on an
array so small that the arithmetic is nearly free.

    PYTHONPATH=<tree> python benchmarks/dispatch_cost.py [--calls 100000] [--rounds 5]

Per op (ReLU's forward, which the table sends to its in-place form when the caller
donates; layer norm's forward and backward): the median over ``--rounds`` of
(time through the table - time of the direct call) / calls. The script finds the tables
in either layout (``scratchformer.kernels.<op>`` before the reorganisation, the op's
table in ``scratchformer.engine.ops.<family>`` after), so one file measures two trees; run
both on a quiet machine, one after the other. Not a test: nothing here asserts.
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402


def _tables():
    """``{op: (forward, backward, chosen implementation)}`` for relu and layernorm."""
    try:  # the layout before: one module per op in scratchformer/kernels
        kernels = importlib.import_module("scratchformer.kernels")
        pick = {n: getattr(kernels, n) for n in ("relu", "layernorm")}
        return {n: (m.forward, m.backward, m.TABLE.chosen) for n, m in pick.items()}
    except ModuleNotFoundError:
        pass
    found = {}
    for family, name in (("activations", "relu"), ("layernorm", "layernorm")):
        for prefix in ("scratchformer.engine.ops.", "scratchformer.ops."):
            try:
                op = getattr(importlib.import_module(prefix + family), name)
            except ModuleNotFoundError:
                continue
            found[name] = (op.forward, op.backward, op.chosen)
            break
    return found


def _per_call(fn, calls: int) -> float:
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t) / calls


def measure(calls: int, rounds: int) -> dict:
    tables = _tables()
    x = np.ones((2, 4), dtype=np.float32)
    g, b = np.ones(4, dtype=np.float32), np.zeros(4, dtype=np.float32)
    relu_fwd, _, relu_chosen = tables["relu"]
    ln_fwd, ln_bwd, ln_chosen = tables["layernorm"]
    relu_impl = relu_chosen("float32", donate=True)
    ln_impl = ln_chosen("float32")
    _, ln_cache = ln_fwd(x, g, b, 1e-5)
    _, ln_value = ln_impl.forward(x, g, b, 1e-5)
    pairs = {
        "relu forward (donated)": (lambda: relu_fwd(x, donate=True),
                                   lambda: relu_impl.forward(x)),
        "layernorm forward": (lambda: ln_fwd(x, g, b, 1e-5),
                              lambda: ln_impl.forward(x, g, b, 1e-5)),
        "layernorm backward": (lambda: ln_bwd(x, ln_cache), lambda: ln_impl.backward(x, ln_value)),
    }
    out = {}
    for name, (through, direct) in pairs.items():
        costs = []
        for _ in range(rounds):
            costs.append(_per_call(through, calls) - _per_call(direct, calls))
        out[name] = {"median_us": round(1e6 * statistics.median(costs), 3),
                     "min_us": round(1e6 * min(costs), 3), "max_us": round(1e6 * max(costs), 3)}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=100_000)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    for name, row in measure(args.calls, args.rounds).items():
        print(f"{name:<24} {row['median_us']:6.2f} us per call through the table "
              f"(rounds {row['min_us']:.2f}-{row['max_us']:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
