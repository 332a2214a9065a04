"""scratchformer kernels: each op's table (engine/dispatch.py), and their parity check.

scratchformer kernels                  every op's implementations, and which one runs
scratchformer kernels --check          each registered implementation against its
                                       reference on fresh random inputs (float32, float64)
scratchformer kernels --check --all    the references against themselves too

An op's table holds its readable reference and the implementations registered below it
in the op's file (scratchformer/engine/ops/: faster NumPy forms, GPU kernels); the chosen one
is what the models call. SCRATCHFORMER_KERNELS=reference in the environment forces the references
everywhere. The check prints, per implementation and tensor, the largest relative
error max|a - b| / max|b| over the cases, and exits 1 if one is above its limit
(0 for an implementation that is bitwise equal by construction).
"""

from __future__ import annotations

import argparse

import scratchformer.engine.ops  # noqa: F401  (every op's file, so every table is registered)
from scratchformer.engine import backend, dispatch, parity


def add_parser(sub) -> None:
    p = sub.add_parser(
        "kernels",
        help="each op's implementations, which one runs, and their parity with the reference",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--check", action="store_true", help="run the parity harness")
    p.add_argument("--all", action="store_true", help="with --check: the references too")
    p.add_argument(
        "--dtype",
        choices=["float16", "float32", "float64"],
        action="append",
        help="with --check (all three)",
    )
    p.set_defaults(func=run)


def _list() -> None:
    forced = dispatch.reference_forced()
    print(f"the ops on {backend.backend_name()}; references forced everywhere: "
          f"{'yes' if forced else 'no (SCRATCHFORMER_KERNELS=reference forces them)'}")
    print("* = what a call with float32 inputs runs now (its inputs donated where it may)")
    print(f"{'op':<19} {'implementation':<15} {'backends':<12} {'dtypes':<17} {'chosen':<6} note")
    for name in sorted(dispatch.TABLES):
        table = dispatch.TABLES[name]
        chosen = table.chosen("float32", donate=True)
        for i, impl in enumerate(table.implementations()):
            note = impl.note if impl.proven else f"not yet run on a GPU: off; {impl.note}"
            mark = "*" if impl is chosen else ""
            print(
                f"{name if i == 0 else '':<19} {impl.name:<15} {', '.join(impl.backends):<12} "
                f"{', '.join(impl.dtypes):<17} {mark:<6} {note}".rstrip()
            )


def _check(args) -> int:
    dtypes = tuple(args.dtype or ("float16", "float32", "float64"))
    rows = parity.check_all(dispatch.TABLES, dtypes, every=args.all)
    print(f"parity on {backend.backend_name()}: each implementation against its reference, "
          "largest relative error max|a - b| / max|b| per tensor over the cases")
    print(f"{'op':<20} {'implementation':<15} {'dtype':<8} {'tensor':<10} {'error':>9}  limit")
    failed = 0
    for op, impl, dtype, tensor, err, limit, ok in parity.summary(rows):
        failed += not ok
        bound = "0 (bitwise)" if limit == 0 else f"{limit:.0e}"
        status = "ok" if ok else "FAIL"
        print(f"{op:<20} {impl:<15} {dtype:<8} {tensor:<10} {err:>9.2e}  {bound:<12} {status}")
    cases = len({(r.table, r.implementation, r.dtype, r.case) for r in rows})
    verdict = "all within their limits" if not failed else f"{failed} above their limits"
    print(f"{len(rows)} tensors of {cases} cases: {verdict}")
    return 1 if failed else 0


def run(args) -> int:
    if args.check:
        return _check(args)
    _list()
    return 0
