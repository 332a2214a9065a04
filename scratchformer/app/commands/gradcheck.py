"""``scratchformer gradcheck``: prove every parameter's gradient of a small model.

By default: a 2-layer ``tiny`` encoder-decoder, post-LN and pre-LN, tied embeddings,
padding in source and target (B=3, S=6, T=5, d_k=8, h=2), label smoothing 0.1 and
dropout 0.1 with its masks replayed; every parameter, large ones on a seeded sample.

``--checkpoint CKPT`` checks a checkpoint's own model instead (any of the three: an
imported GPT-2, a translation model, a classifier), with its config, on a padded batch
of its vocabulary's ids; ``--directions K`` for a large one:

    scratchformer gradcheck --checkpoint gpt2.npz --directions 2

``--explain PARAM`` shows one parameter's check entry by entry: the loss at theta + h
and theta - h, the numeric and the analytic derivative side by side, and their error.

``--directions K`` checks K random directions per parameter tensor and K over all
parameters (two forward passes each, whatever the size): the check for ``small`` and
``base`` models. ``--dtype float32`` runs it in float32; several ``--h`` values print
the error by step size instead of the table, the best step marked, and pass when some
step meets ``--tol``:

    scratchformer gradcheck --preset base --directions 1
    scratchformer gradcheck --preset small --directions 1 --dtype float32 --h 1e-1 1e-2 1e-3

Every check runs on one BLAS thread, as ``train`` does (``--threads``), and prints its
estimated time before it starts, with a note first when the cores are busy or when
``--tol`` is below what central differences can resolve at its step.
"""

from __future__ import annotations

import difflib
import time

from scratchformer.app.commands import COUNT, NONNEGATIVE, PROBABILITY, integer, number
from scratchformer.app.commands import gradcheck_clock as clock
from scratchformer.app.commands.gradcheck_checkpoint import (
    CheckTools,
    refuse_model_flags,
    run_checkpoint,
)
from scratchformer.app.progress import stage
from scratchformer.app.train.config import TrainConfig
from scratchformer.engine import backend, device, memory
from scratchformer.engine.backend import xp
from scratchformer.engine.errors import ScratchformerError
from scratchformer.engine.gradcheck import (
    DEFAULT_H,
    DEFAULT_TOL,
    DIRECTIONAL_H,
    ZERO_FRACTION,
    central_values,
    check_directions,
    check_model,
    rel_error,
    resolution,
    rounding_floor,
    sample_entries,
)
from scratchformer.engine.models import PRESETS, Transformer, TransformerConfig
from scratchformer.engine.models.sizes import describe, largest_part, model_bytes, parameter_totals


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
    p.add_argument("--activation", default="relu", choices=["relu", "gelu", "silu"])
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
        "--checkpoint",
        metavar="CKPT",
        help="check this checkpoint's model (its config, dropout and label smoothing) instead "
        "of a built-in one",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help=f"run a check estimated to take more than {clock.TIME_LIMIT / 3600:g} hour",
    )
    p.add_argument(
        "--threads",
        type=NONNEGATIVE,
        default=None,
        help="BLAS threads (default 1, as train's train.threads: on small matrices more "
        "threads mostly wait, and on busy cores far longer; 0 = the BLAS default)",
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


def _timed(args, model, batch, forwards: int, fewer: str, *, entries=0, setups=1, steps=(),
           names=None):
    """Time the check's passes (``clock.probe``), print its estimate (refused beyond the
    limit without --force), then before it starts the notes on a busy machine and on a
    tolerance below what its steps can resolve; the check's ``Clock``."""
    found = clock.probe(model, getattr(xp, args.dtype), batch, args.seed + 1)
    estimate = clock.bounded_time(
        found, forwards, fewer, force=args.force, entries=entries, setups=setups
    )
    timer = clock.start_clock(found, estimate, args.threads)
    directions = bool(args.directions)
    note = resolution_note(found, args.tol, steps or [DEFAULT_H], args.dtype, directions, names)
    if note:
        print(note, flush=True)
    return timer


def resolution_note(found, tol: float, steps, dtype: str, directions: bool, names=None) -> str:
    """One line when ``tol`` is below what central differences in ``dtype`` resolve at
    every step of ``steps`` for some of the tensors (``rounding_floor`` of each, from the
    timed pass's loss and gradients: the largest entry for entry checks, the norm along
    directions; ``names``: only these tensors); "" otherwise. Said at the largest step,
    where rounding is least."""
    scales = dict(found.norm if directions else found.largest)
    if names is not None:
        scales = {n: scales[n] for n in names}
    elif directions:
        scales["all parameters"] = sum(v * v for v in found.norm.values()) ** 0.5
    h = max(steps)
    zero = ZERO_FRACTION * resolution(found.loss, h, dtype)  # below it: zero (verdict)
    floors = sorted(rounding_floor(found.loss, s, h, dtype) for s in scales.values() if s > zero)
    if not floors or tol >= floors[-1]:
        return ""
    eps = float(backend.np.finfo(dtype).eps)
    which = "every tensor" if tol < floors[0] else "the tensors with the smallest gradients"
    at = f"h = {h:g}" + (" (the largest step tried)" if len(steps) > 1 else "")
    return (
        f"note: --tol {tol:g} is below what central differences in {dtype} resolve here: each "
        f"loss is computed to about eps*|L| (eps = {eps:.1e}, |L| = {found.loss:.3g}), so at "
        f"{at} a numeric derivative is off by about eps*|L|/h = {eps * found.loss / h:.1e}, "
        f"a relative error of {floors[0]:.1e} to {floors[-1]:.1e} of these tensors' "
        f"gradients: {which} can fail from rounding alone (a larger --h lowers it until the "
        "step's truncation error, about h^2, takes over)"
    )


def run(args) -> int:
    if args.directions and args.explain is not None:
        raise ScratchformerError("--explain checks entries: leave out --directions")
    if args.dtype != "float64" and not args.directions:
        raise ScratchformerError("--dtype float32 is for directional checks: add --directions")
    if args.h is not None and len(args.h) > 1 and not args.directions:
        raise ScratchformerError("several --h values are a directional sweep: add --directions")
    if args.threads is None:  # as train: configs/defaults.toml's train.threads
        args.threads = TrainConfig.default().train.threads
    if args.checkpoint is not None:
        refuse_model_flags(getattr(args, "argv", ()))
    with backend.blas_threads(args.threads):
        if args.checkpoint is not None:
            tools = CheckTools(_timed, _directions, sweep, BYTES_PER_PARAMETER)
            return run_checkpoint(args, tools)
        if args.directions:
            return run_directions(args)
        if args.explain is not None:
            return explain(args)
        return run_entries(args)


def run_entries(args) -> int:
    """The entry-by-entry check of each norm's model: one table each."""
    samples = 20 if args.samples is None else args.samples
    norms = ["post", "pre"] if args.norm in (None, "both") else [args.norm]
    batch = [backend.asarray(a) for a in demo_batch(args.vocab, args.seed)]
    h = args.h[0] if args.h else DEFAULT_H
    ok = True
    for norm in norms:
        cfg, model = _bounded_model(args, norm, "entries")
        sizes = [int(p.size) for p in model.parameters().values()]
        total = sum(min(n, samples) if samples else n for n in sizes)
        timer = _timed(
            args, model, batch, 2 * total, "check fewer entries (--samples) or directions",
            steps=[h],
        )
        bar = stage(total, f"checking {norm}-LN", "entry", bar=not args.no_progress)
        report = check_model(
            model, *batch, rng=args.seed + 1, max_entries=samples or None, tol=args.tol, h=h,
            seed=args.seed, progress=timer.watch(bar),
        )
        bar.close()
        print(
            f"\n== {args.preset} encoder-decoder, {norm}-LN, N={cfg.N}, "
            f"d_model={cfg.d_model}, h={cfg.h}, d_k={cfg.d_k or cfg.d_model // cfg.h}, "
            f"positions={cfg.positions}, share_embeddings={cfg.share_embeddings}, "
            f"P_drop={cfg.P_drop} (replayed), eps_ls={cfg.eps_ls}, "
            f"batch B=3 S=6 T=5 with padding, float64 ({timer.took()})"
        )
        print(report.table())
        ok = ok and report.passed
    print("\ngradcheck:", "PASSED" if ok else "FAILED")
    return 0 if ok else 1


def run_directions(args) -> int:
    """Directional checks of each norm's model: the table, or with several ``--h`` the
    sweep (``sweep``)."""
    norms = ["post", "pre"] if args.norm in (None, "both") else [args.norm]
    batch = [backend.asarray(a) for a in demo_batch(args.vocab, args.seed)]
    steps = args.h or [DIRECTIONAL_H]
    ok = True
    for norm in norms:
        cfg, model = _bounded_model(args, norm, "directions")
        n = sum(int(p.size) for p in model.parameters().values())
        forwards = 2 * args.directions * (len(model.parameters()) + 1) * len(steps)
        timer = _timed(
            args, model, batch, forwards, "check fewer --directions (or --h steps)",
            entries=2 * n * args.directions * len(steps), setups=len(steps), steps=steps,
        )
        print(
            f"\n== {args.preset} encoder-decoder, {norm}-LN, N={cfg.N}, d_model={cfg.d_model}, "
            f"h={cfg.h}, {n:,} parameters in {len(model.parameters())} tensors, "
            f"P_drop={cfg.P_drop} (replayed), eps_ls={cfg.eps_ls}, batch B=3 S=6 T=5, "
            f"{args.dtype}, {args.directions} direction(s) per tensor"
        )
        if len(steps) > 1:
            ok = sweep(args, model, batch, steps, timer) and ok
            continue
        report = _directions(args, model, batch, steps[0], timer, retries=2)
        print(f"step h = {steps[0]:g} (RMS per entry), {timer.took()}")
        print(report.table())
        ok = ok and report.passed
        if not report.passed and args.dtype != "float64":
            print(
                f"{args.dtype} cannot resolve these gradients to --tol {args.tol:g} at h = "
                f"{steps[0]:g} (rounding, about eps*|L|/h; several --h show the error by step "
                "size): prove them in float64 (the default)"
            )
    print("\ngradcheck:", "PASSED" if ok else "FAILED")
    return 0 if ok else 1


def _directions(args, model, batch, h: float, timer, retries: int):
    """One directional check of ``model`` at step ``h``, its progress shown."""
    rows = (len(model.parameters()) + 1) * args.directions
    bar = stage(rows, "directions", "direction", bar=not args.no_progress)
    report = check_directions(
        model, *batch, directions=args.directions, rng=args.seed + 1, dtype=args.dtype, h=h,
        tol=args.tol, seed=args.seed, progress=timer.watch(bar), retries=retries,
        extrapolate=getattr(args, "extrapolate", False),
    )
    bar.close()
    return report


def sweep(args, model, batch, steps, timer) -> bool:
    """The error by step size: per step the largest and the median error of the rows
    (each row's first direction as drawn: no redrawing after a kink) and the rows over
    the tolerance, the best step marked (the fewest rows over, then the smallest largest
    error). True when some step passes; else one line says the dtype cannot resolve the
    gradients to the tolerance at these steps."""
    results, lines = [], []
    for h in steps:
        t0 = time.perf_counter()
        report = _directions(args, model, batch, h, timer, retries=0)
        errs = sorted(r.max_rel_error for r in report.rows if not r.zero) or [0.0]
        results.append((len(report.failures()), errs[-1], h))
        line = f"{h:>8.0e}  {errs[-1]:>15.2e}  {errs[len(errs) // 2]:>8.1e}"
        lines.append(
            line + f"  {f'{results[-1][0]}/{len(errs)}':>13}  {time.perf_counter() - t0:>5.1f} s"
        )
    bad, largest, best = min(results)
    print(f"{'h':>8}  {'largest rel err':>15}  {'median':>8}  {'rows over tol':>13}  time")
    for (_, _, h), line in zip(results, lines):
        print(line + ("  <- best" if h == best else ""))
    print(
        f"best step: h = {best:g} ({bad} rows over --tol {args.tol:g}); all steps: {timer.took()}"
    )
    if not bad:
        return True
    print(
        f"{args.dtype} cannot resolve these gradients to --tol {args.tol:g} at any step tried "
        f"(the best, h = {best:g}, leaves a largest error of {largest:.1e}: rounding, about "
        "eps*|L|/h, falls as h grows, truncation, about h^2, rises)"
        + (": prove them in float64 (the default)" if args.dtype != "float64" else "")
    )
    return False


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
    src, tgt_in, tgt_out = (backend.asarray(a) for a in demo_batch(args.vocab, args.seed))
    h = args.h[0] if args.h else DEFAULT_H
    timer = _timed(
        args, m, (src, tgt_in, tgt_out), 2 * (min(n_entries, size) or size),
        "check fewer entries (--samples)", steps=[h], names=[name],
    )
    m.astype(xp.float64)  # the check runs in float64
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
    print(f"time: {timer.took()}")
    return 0 if ok else 1
