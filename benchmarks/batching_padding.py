"""Padding of token-budget batching against random batching, on corpus-like lengths.

    python benchmarks/batching_padding.py [--n 31000] [--budgets 1024 4096 25000]

Lengths: log-normal words per source sentence (median ~20, long tail, like the ~31k
verse pairs of the translation data), the target a noisy 1.1x of the source. Width of an
example = max(source length, target length + 1); padding fraction = share of the padded
cells (sentences x max width, summed over batches) that are padding. Both methods get
the same budget; random batching shuffles and cuts, token-budget batching sorts first.
"""

from __future__ import annotations

import argparse

from scratchformer.app.data import batch_by_size, padding_fraction, random_batches
from scratchformer.engine import backend


def corpus_widths(n: int, seed: int = 0):
    np = backend.np
    r = np.random.default_rng(seed)
    src = np.clip(np.round(r.lognormal(3.0, 0.55, n)), 1, 250).astype(int)
    tgt = np.clip(np.round(src * r.normal(1.1, 0.15, n)), 1, 250).astype(int)
    return np.maximum(src, tgt + 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=31000, help="sentence pairs")
    ap.add_argument("--budgets", type=int, nargs="+", default=[1024, 4096, 25000])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    np = backend.np
    w = corpus_widths(args.n, args.seed)
    print(f"{args.n} pairs, width median {int(np.median(w))}, mean {w.mean():.1f}, max {w.max()}")
    print(f"{'max_tokens':>10}  {'batches':>7}  {'token-budget':>12}  {'random':>7}")
    for budget in args.budgets:
        sorted_b = batch_by_size(w, budget, np.random.default_rng(args.seed))
        random_b = random_batches(w, budget, np.random.default_rng(args.seed))
        print(
            f"{budget:>10}  {len(sorted_b):>7}  {padding_fraction(sorted_b, w):>12.2%}  "
            f"{padding_fraction(random_b, w):>7.2%}"
        )


if __name__ == "__main__":
    main()
