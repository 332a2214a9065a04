"""``scratchformer gradcheck``: prove every parameter's gradient of a small model.

By default: a 2-layer ``tiny`` encoder-decoder, post-LN and pre-LN, tied embeddings,
padding in source and target (B=3, S=6, T=5, d_k=8, h=2), label smoothing 0.1 and
dropout 0.1 with its masks replayed; every parameter, large ones on a seeded sample.

``--explain PARAM`` shows one parameter's check entry by entry: the loss at theta + h
and theta - h, the numeric and the analytic derivative side by side, and their error.

``--directions K`` checks K random directions per parameter tensor and K over all
parameters (two forward passes each, whatever the size): the check for ``small`` and
``base`` models. ``--dtype float32`` runs it in float32; several ``--h`` values print
the error by step size instead of the table:

    scratchformer gradcheck --preset base --directions 1
    scratchformer gradcheck --preset small --directions 1 --dtype float32 --h 1e-1 1e-2 1e-3
"""

from __future__ import annotations

import copy
import difflib
import statistics
import sys
import time

from scratchformer import backend, device, memory
from scratchformer.backend import xp
from scratchformer.commands import COUNT, NONNEGATIVE, PROBABILITY, integer, number
from scratchformer.errors import ScratchformerError
from scratchformer.gradcheck import (
    DEFAULT_H,
    DEFAULT_TOL,
    DIRECTIONAL_H,
    central_values,
    check_directions,
    check_model,
    rel_error,
    sample_entries,
)
from scratchformer.models import PRESETS, Transformer, TransformerConfig
from scratchformer.models.sizes import describe, largest_part, model_bytes, parameter_totals
from scratchformer.progress import stage


def demo_batch(vocab_size: int, seed: int = 0):
    """A padded batch with S != T and every row a different length.

    Returns host arrays src (3, 6), tgt_in (3, 5), tgt_out (3, 5); pad 0, bos 1, eos 2.
    """
    np = backend.np
    rng = np.random.default_rng(seed)
    src_lens, tgt_lens = [6, 4, 2], [4, 3, 1]  # target content lengths, + eos = T
    src = np.zeros((3, 6), dtype=np.int64)
    tgt_in = np.zeros((3, 5), dtype=np.int64)
    tgt_out = np.zeros((3, 5), dtype=np.int64)
    for b, (ls, lt) in enumerate(zip(src_lens, tgt_lens)):
        src[b, :ls] = rng.integers(3, vocab_size, ls)
        y = rng.integers(3, vocab_size, lt)
        tgt_in[b, : lt + 1] = np.r_[1, y]
        tgt_out[b, : lt + 1] = np.r_[y, 2]
    return src, tgt_in, tgt_out


def add_parser(sub) -> None:
    p = sub.add_parser(
        "gradcheck",
        help="finite-difference check of every parameter of a small model",
        description=__doc__,
    )
    p.add_argument("--preset", default="tiny", choices=sorted(PRESETS))
    p.add_argument(
        "--norm",
        default=None,
        choices=["post", "pre", "both"],
        help="post-LN, pre-LN or both (default: both; post with --explain)",
    )
    p.add_argument("--positions", default="sinusoidal", choices=["sinusoidal", "learned"])
    p.add_argument("--share-embeddings", default="all", choices=["all", "decoder", "none"])
    p.add_argument("--activation", default="relu", choices=["relu", "gelu"])
    p.add_argument("--layers", type=COUNT, default=None, help="N (default: the preset's)")
    p.add_argument("--vocab", type=integer(lo=4), default=23, help="vocabulary size")
    p.add_argument("--dropout", type=PROBABILITY, default=0.1, help="P_drop (masks are replayed)")
    p.add_argument("--label-smoothing", type=PROBABILITY, default=0.1)
    p.add_argument("--tol", type=number(above=0), default=DEFAULT_TOL, help="max relative error")
    p.add_argument(
        "--samples",
        type=NONNEGATIVE,
        default=None,
        help="entries checked per tensor (default 20, 8 with --explain; 0 = all)",
    )
    p.add_argument("--seed", type=NONNEGATIVE, default=0)
    p.add_argument(
        "--directions",
        type=NONNEGATIVE,
        default=0,
        help="check K random directions per tensor instead of entries (0 = entries)",
    )
    p.add_argument(
        "--dtype",
        default="float64",
        choices=["float64", "float32"],
        help="precision of a directional check (entry checks are float64)",
    )
    p.add_argument(
        "--h",
        type=number(above=0, hi=1),  # a step is a small change of a weight
        nargs="+",
        default=None,
        help=f"step (default {DEFAULT_H:g}, directional {DIRECTIONAL_H:g}); several: a sweep",
    )
    p.add_argument(
        "--explain",
        metavar="PARAM",
        help="show the check of one parameter entry by entry, e.g. decoder.layers.0.cross_attn.W_k",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help=f"run a check estimated to take more than {TIME_LIMIT / 3600:g} hour",
    )
    p.set_defaults(func=run)


def _config(args, norm) -> TransformerConfig:
    layers = {} if args.layers is None else {"N": args.layers}
    return TransformerConfig.preset(
        args.preset,
        vocab_size=args.vocab,
        **layers,
        norm=norm,
        positions=args.positions,
        share_embeddings=args.share_embeddings,
        activation=args.activation,
        P_drop=args.dropout,
        eps_ls=args.label_smoothing,
        seed=args.seed,
    )


# -- every check bounded before it starts ------------------------------------------------------
#: bytes a check holds per parameter: the model and its gradients in float32 (8), the
#: float64 copy the check perturbs and its gradients (16), the values saved around each
#: perturbation (8); a directional check adds the directions drawn, the perturbed copy
#: and the values either side of each step, in float64 (40). Measured (peak resident
#: memory, ``small``: 5.5 M parameters): 55 bytes a parameter with --directions 1.
BYTES_PER_PARAMETER = {"entries": 32, "directions": 72}
#: seconds per parameter entry a directional check spends drawing, scaling and applying
#: its directions (every entry twice: its tensor's row and the row of all parameters);
#: measured 72-75 ns on the small preset (2026-11-27, 2-core AMD EPYC, one BLAS thread)
ENTRY_SECONDS = 75e-9
#: the longest estimated check started without --force, in seconds
TIME_LIMIT = 3600.0


def _bounded_model(args, norm: str, how: str):
    """``(config, model)`` of ``norm``, once the check's memory (``how``: "entries" or
    "directions") is estimated to fit; refused in one line, naming what makes the model
    large, before any parameter is allocated."""
    cfg = _config(args, norm)
    spec = {"class": "Transformer"}
    _, entries = parameter_totals(spec, cfg)
    need = entries * BYTES_PER_PARAMETER[how] + model_bytes(spec, cfg, copies=0)
    advice = {
        "layers": "lower --layers (or choose a smaller --preset)",
        "vocabulary": "lower --vocab",
        "positions": "choose a smaller --preset",
    }[largest_part(spec, cfg)]
    memory.need_memory(need, f"a gradient check of {describe(spec, cfg)}", advice)
    return cfg, Transformer(cfg)


def _pass_seconds(model, dtype) -> tuple[float, float, float]:
    """``(copy, forward, backward)``: seconds to copy ``model`` into ``dtype`` and of one
    forward and one backward pass of that copy on the demo batch, which is what the check
    runs: the median of at least three, and of as many as fit in a quarter of a second
    (up to 50), after one to warm up: a typical pass, as the check's thousands are, not
    the luckiest, and not one moment's."""
    t0 = time.perf_counter()
    m = copy.deepcopy(model).astype(dtype)
    copied = time.perf_counter() - t0
    batch = [backend.asarray(a) for a in demo_batch(model.config.vocab_size)]
    forward, backward = [], []
    start = time.perf_counter()
    for i in range(51):
        if i > 3 and time.perf_counter() - start > 0.25:
            break
        t0 = time.perf_counter()
        _, cache = m.loss_forward(*batch, rng=device.generator(0))
        t1 = time.perf_counter()
        m.zero_grad()
        m.loss_backward(cache)
        if i:
            forward.append(t1 - t0)
            backward.append(time.perf_counter() - t1)
    return copied, statistics.median(forward), statistics.median(backward)


def duration(seconds: float) -> str:
    """``"40 s"``, ``"12 min"``, ``"5.2 h"``, ``"61 days"``: a time in a message."""
    for unit, size, limit in (("s", 1, 60), ("min", 60, 3600), ("h", 3600, 2 * 86400)):
        if seconds < limit:
            return (
                f"{seconds / size:.2g} {unit}"
                if seconds < 10 * size
                else f"{seconds / size:.0f} {unit}"
            )
    return f"{seconds / 86400:,.0f} days"


class Clock:
    """A check's estimate against its time: the progress callback of ``watch`` says
    once, while the check runs, when it has taken more than twice the estimate; ``took``
    is what the check's last line shows."""

    def __init__(self, estimate: float):
        self.estimate, self.warned = estimate, False
        self.t0 = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def watch(self, show):
        """The progress callback for a stage shown by ``show`` (a bar or a ticker)."""
        return lambda n: (show.update(n), self._check(show))

    def _check(self, show) -> None:
        if not self.warned and self.elapsed() > 2 * self.estimate:
            self.warned = True
            show.emit(
                f"note: this check has run more than twice its estimate ({duration(self.elapsed())}"
                f", estimated {duration(self.estimate)}): the cores are likely busy with other "
                "work; on a busy machine give it one BLAS thread (OPENBLAS_NUM_THREADS=1, "
                "docs/gradient-checks.md)\n",
                sys.stderr,
            )

    def took(self) -> str:  # "6.4 s; estimated 4.1 s"
        return f"{duration(self.elapsed())}; estimated {duration(self.estimate)}"


def _bounded_time(args, model, forwards: int, fewer: str, *, entries=0, setups=1) -> float:
    """The check's estimated time: ``setups`` times its copy of ``model`` (in the check's
    dtype) and the forward and backward pass that give the analytic gradient, then
    ``forwards`` more forward passes and ``entries`` parameter entries moved along
    directions, each part timed or counted here. Printed, and returned; beyond
    ``TIME_LIMIT`` without ``--force`` the check is refused in one line saying what to
    lower (``fewer``)."""
    dtype = getattr(xp, getattr(args, "dtype", "float64"))
    copied, forward, backward = _pass_seconds(model, dtype)
    estimate = setups * (copied + forward + backward) + forwards * forward
    estimate += entries * ENTRY_SECONDS
    what = (
        f"{forwards + setups:,} forward passes of {forward * 1e3:.1f} ms and "
        f"{setups} backward pass{'es' if setups > 1 else ''} of {backward * 1e3:.1f} ms, timed"
    )
    if entries:
        what += f"; {entries:,} entries moved along directions"
    if estimate > TIME_LIMIT and not args.force:
        raise ScratchformerError(
            f"this check would take about {duration(estimate)} ({what}): {fewer}, or pass "
            "--force to run it anyway"
        )
    print(f"estimated time: about {duration(estimate)} ({what})", flush=True)
    return estimate


def run(args) -> int:
    if args.directions and args.explain is not None:
        raise ScratchformerError("--explain checks entries: leave out --directions")
    if args.dtype != "float64" and not args.directions:
        raise ScratchformerError("--dtype float32 is for directional checks: add --directions")
    if args.h is not None and len(args.h) > 1 and not args.directions:
        raise ScratchformerError("several --h values are a directional sweep: add --directions")
    if args.directions:
        return run_directions(args)
    if args.explain is not None:
        return explain(args)
    samples = 20 if args.samples is None else args.samples
    norms = ["post", "pre"] if args.norm in (None, "both") else [args.norm]
    src, tgt_in, tgt_out = (backend.asarray(a) for a in demo_batch(args.vocab, args.seed))
    ok = True
    for norm in norms:
        cfg, model = _bounded_model(args, norm, "entries")
        sizes = [int(p.size) for p in model.parameters().values()]
        total = sum(min(n, samples) if samples else n for n in sizes)
        estimate = _bounded_time(
            args, model, 2 * total, "check fewer entries (--samples) or directions"
        )
        clock = Clock(estimate)
        bar = stage(total, f"checking {norm}-LN", "entry", bar=not args.no_progress)
        report = check_model(
            model,
            src,
            tgt_in,
            tgt_out,
            rng=args.seed + 1,
            max_entries=samples or None,
            tol=args.tol,
            h=args.h[0] if args.h else DEFAULT_H,
            seed=args.seed,
            progress=clock.watch(bar),
        )
        bar.close()
        print(
            f"\n== {args.preset} encoder-decoder, {norm}-LN, N={cfg.N}, "
            f"d_model={cfg.d_model}, h={cfg.h}, d_k={cfg.d_k or cfg.d_model // cfg.h}, "
            f"positions={cfg.positions}, share_embeddings={cfg.share_embeddings}, "
            f"P_drop={cfg.P_drop} (replayed), eps_ls={cfg.eps_ls}, "
            f"batch B=3 S=6 T=5 with padding, float64 ({clock.took()})"
        )
        print(report.table())
        ok = ok and report.passed
    print("\ngradcheck:", "PASSED" if ok else "FAILED")
    return 0 if ok else 1


def run_directions(args) -> int:
    """Directional checks of each norm's model: the table, or with several ``--h`` the
    largest and the median error of the rows at each step, each row's first direction
    as drawn (no redrawing after a kink): the float32 guidance."""
    norms = ["post", "pre"] if args.norm in (None, "both") else [args.norm]
    src, tgt_in, tgt_out = (backend.asarray(a) for a in demo_batch(args.vocab, args.seed))
    steps = args.h or [DIRECTIONAL_H]
    ok = True
    for norm in norms:
        cfg, model = _bounded_model(args, norm, "directions")
        n = sum(int(p.size) for p in model.parameters().values())
        forwards = 2 * args.directions * (len(model.parameters()) + 1) * len(steps)
        estimate = _bounded_time(
            args, model, forwards, "check fewer --directions (or --h steps)",
            entries=2 * n * args.directions * len(steps), setups=len(steps),
        )  # fmt: skip
        clock = Clock(estimate)
        print(
            f"\n== {args.preset} encoder-decoder, {norm}-LN, N={cfg.N}, d_model={cfg.d_model}, "
            f"h={cfg.h}, {n:,} parameters in {len(model.parameters())} tensors, "
            f"P_drop={cfg.P_drop} (replayed), eps_ls={cfg.eps_ls}, batch B=3 S=6 T=5, "
            f"{args.dtype}, {args.directions} direction(s) per tensor"
        )
        if len(steps) > 1:
            print(f"{'h':>8}  {'largest rel err':>15}  {'median':>8}  {'rows over tol':>13}  time")
        for h in steps:
            t0 = time.perf_counter()
            bar = stage(
                (len(model.parameters()) + 1) * args.directions,
                "directions",
                "direction",
                bar=not args.no_progress,
            )
            report = check_directions(
                model, src, tgt_in, tgt_out, directions=args.directions, rng=args.seed + 1,
                dtype=args.dtype, h=h, tol=args.tol, seed=args.seed, progress=clock.watch(bar),
                retries=0 if len(steps) > 1 else 2,  # a sweep shows the first draw's error
            )  # fmt: skip
            bar.close()
            dt = time.perf_counter() - t0
            if len(steps) > 1:
                errs = sorted(r.max_rel_error for r in report.rows)
                bad = f"{len(report.failures())}/{len(errs)}"
                print(
                    f"{h:>8.0e}  {errs[-1]:>15.2e}  {errs[len(errs) // 2]:>8.1e}  {bad:>13}  "
                    f"{dt:.1f} s"
                )
            else:
                print(f"step h = {h:g} (RMS per entry), {clock.took()}")
                print(report.table())
            ok = ok and report.passed
        if len(steps) > 1:
            print(f"all steps: {clock.took()}")
    print("\ngradcheck:", "PASSED" if ok else "FAILED")
    if not ok and args.dtype == "float32":
        print(float32_why(steps, args.tol))
    return 0 if ok else 1


def float32_why(steps, tol: float) -> str:
    """Why a float32 check fails a float64 tolerance, with what to do instead."""
    eps = 2.0**-23  # float32's relative rounding step (1.2e-7)
    h = min(steps)
    return (
        f"why: float32 keeps about 7 significant digits (eps = {eps:.1e}), so each loss is "
        f"off by up to about eps * |L|, and the difference quotient (L(+h) - L(-h)) / 2h by "
        f"about eps * |L| / h = {eps / h:.0e} * |L| at h = {h:g}: more than a tolerance of "
        f"{tol:g} of the directional derivatives, most of all the small ones. float32 cannot "
        "prove a gradient to float64's tolerance: prove them in float64 (the default), and "
        "use float32 with several --h to see where its rounding takes over"
    )


class UnknownParameterError(ScratchformerError):
    """``--explain`` names a parameter the model does not have."""


def _check_parameter_name(name: str, names: list[str]) -> None:
    """UnknownParameterError, with the closest names, when ``name`` is not in ``names``."""
    if name in names:
        return
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else "."
    raise UnknownParameterError(
        f"this model has no parameter {name!r}{hint} It has {len(names)}: "
        f"{', '.join(names[:4])}, ... ('scratchformer gradcheck' lists them all)"
    )


def _print_explain_header(args, cfg, norm: str, theta, L0, n_checked: int, h: float) -> None:
    """What is compared (the loss, both derivatives, the sample), then the column heads."""
    print(
        f"== {args.explain}, shape {tuple(theta.shape)}, in a {args.preset} encoder-decoder "
        f"({norm}-LN, N={cfg.N}, d_model={cfg.d_model}, h={cfg.h}, "
        f"P_drop={cfg.P_drop} replayed, eps_ls={cfg.eps_ls}), float64"
    )
    print(
        f"L = the cross-entropy (label smoothing {cfg.eps_ls}) of the demo batch "
        f"(B=3, S=6, T=5, padded) = {float(L0):.12f}"
    )
    print("analytic = dL/dtheta_i from model.loss_backward (the hand-written backward pass)")
    print(f"numeric  = (L(theta_i + h) - L(theta_i - h)) / 2h, h = {h:g}, central differences")
    print(f"{n_checked} of {int(theta.size)} entries, a seeded sample:\n")
    head = (
        f"{'entry':<10} {'theta_i':>10} {'L(theta_i + h)':>17} {'L(theta_i - h)':>17} "
        f"{'numeric':>13} {'analytic':>13} {'|a - n|':>9} {'rel err':>9}"
    )
    print(head)
    print("-" * len(head))


def _print_verdict(a_sel, numeric, tol: float) -> bool:
    """The relative error of the entries checked against ``tol``, and a note on the
    entries whose gradient is zero; True when within tolerance."""
    rel = rel_error(a_sel, numeric)
    ok = rel < tol
    print(
        f"\nrelative error of these entries, max|a - n| / max(|a| + |n|): {rel:.2e} "
        f"(tolerance {tol:.0e}): {'PASSED' if ok else 'FAILED'}"
    )
    zeros = int((abs(a_sel) < 1e-12).sum())
    if zeros:
        print(
            f"{zeros} of these entries have a zero gradient: the loss does not depend on them "
            "for this batch (a token that does not occur, a masked position), and the numeric "
            "derivative agrees."
        )
    return ok


def explain(args) -> int:
    """One parameter's gradient check, entry by entry, for a learner to follow:
    ``numeric_i = (L(theta_i + h) - L(theta_i - h)) / 2h`` against the analytic
    ``dL/dtheta_i`` of the backward pass, in float64 with the dropout masks replayed."""
    np = backend.np
    norm = "post" if args.norm is None else args.norm
    if norm == "both":
        raise ScratchformerError("--explain checks one model: choose --norm post or --norm pre")
    cfg, m = _bounded_model(args, norm, "entries")
    name = args.explain
    _check_parameter_name(name, list(m.parameters()))
    n_entries = 8 if args.samples is None else args.samples
    size = int(m.parameters()[name].size)
    estimate = _bounded_time(
        args, m, 2 * (min(n_entries, size) or size), "check fewer entries (--samples)"
    )
    clock = Clock(estimate)
    m.astype(xp.float64)  # the check runs in float64
    src, tgt_in, tgt_out = (backend.asarray(a) for a in demo_batch(args.vocab, args.seed))
    drop_seed = args.seed + 1  # the same dropout masks in every evaluation

    def loss():
        rng = device.generator(drop_seed) if cfg.P_drop > 0 else None
        return m.loss_forward(src, tgt_in, tgt_out, rng=rng)

    L0, cache = loss()
    m.zero_grad()
    m.loss_backward(cache)
    theta = m.parameters()[name]
    analytic = backend.asnumpy(m.gradients()[name]).reshape(-1)
    idx = sample_entries(int(theta.size), n_entries or None, backend.host_rng(args.seed))
    h = args.h[0] if args.h else DEFAULT_H
    _print_explain_header(args, cfg, norm, theta, L0, len(idx), h)
    numeric = np.empty(len(idx))
    for j, i in enumerate(idx):
        at = tuple(int(k) for k in np.unravel_index(i, theta.shape))
        old = float(theta[at])
        L_plus, L_minus = central_values(lambda: loss()[0], theta, at, h)
        numeric[j] = (L_plus - L_minus) / (2 * h)
        a = float(analytic[i])
        err = abs(a - numeric[j])
        rel = err / max(1e-8, abs(a) + abs(numeric[j]))
        print(
            f"{str(at):<10} {old:>10.6f} {L_plus:>17.12f} {L_minus:>17.12f} "
            f"{numeric[j]:>13.6e} {a:>13.6e} {err:>9.1e} {rel:>9.1e}"
        )
    ok = _print_verdict(analytic[idx], numeric, args.tol)
    print(f"time: {clock.took()}")
    return 0 if ok else 1
