"""``scratchformer gradcheck --checkpoint CKPT``: the gradient check of a checkpoint's own
model, any of the three (an imported GPT-2, a trained encoder-decoder, a classifier).

The model is the checkpoint's, with its config (its dropout replayed, its label
smoothing), checked in float64 on a copy; the batch is made here, seeded, of ids drawn
from its vocabulary, in the shape its ``loss_forward`` takes, with padding:

    Transformer        src (3, 6), tgt_in = <bos> y, tgt_out = y <eos>   rows of 6/4/2, 4/3/1
    LanguageModel      ids = <bos> x, targets = x <eos>                  rows of 6, 4 and 2
    EncoderClassifier  ids = <bos> x, one label each                     rows of 6, 4 and 2

(lengths cut to the model's ``max_len``). Entry by entry (``--samples`` per tensor) or
along ``--directions K`` random directions per tensor: at GPT-2's 124 M parameters the
directions are what is practical (two forward passes each, whatever the size). A model
without kinks (GELU) is checked at larger steps unless ``--h`` says otherwise, rounding
being what limits its check: entries at 3e-5 (``SMOOTH_H``), directions at 1e-4
(``EXTRAPOLATED_H``), extrapolated (the steps h and h/2 combined, Richardson's:
truncation cancels to O(h^4)); several ``--h`` show the error by step.
"""

from __future__ import annotations

from typing import NamedTuple

from scratchformer.app.checkpoint import load_checkpoint
from scratchformer.app.progress import stage
from scratchformer.engine import backend, memory
from scratchformer.engine.errors import ScratchformerError
from scratchformer.engine.gradcheck import check_model, default_step
from scratchformer.engine.models import LanguageModel, Transformer
from scratchformer.engine.models.sizes import describe, model_spec

#: the flags that describe the built-in model, which a checkpoint's model replaces
MODEL_FLAGS = ("--preset", "--norm", "--positions", "--share-embeddings", "--activation",
               "--layers", "--vocab", "--dropout", "--label-smoothing", "--explain")


def refuse_model_flags(argv) -> None:
    """One line for a flag of the built-in model given with --checkpoint."""
    given = [f for f in MODEL_FLAGS for a in argv or () if a == f or a.startswith(f + "=")]
    if given:
        raise ScratchformerError(
            f"{given[0]} is a setting of the built-in model: with --checkpoint the model, its "
            "dropout and label smoothing are the checkpoint's"
        )


def _rows(cfg, lengths, seed: int):
    """Token ids of ``lengths`` drawn from the vocabulary, none of the special ids."""
    np = backend.np
    rng = np.random.default_rng(seed)
    special = {cfg.pad_id, cfg.bos_id, cfg.eos_id}
    pool = np.asarray([i for i in range(cfg.vocab_size) if i not in special][:100_000])
    if not len(pool):
        raise ScratchformerError("the model's vocabulary holds no token but its special ids")
    return [rng.choice(pool, n) for n in lengths]


def _padded(rows, width: int, pad: int):
    np = backend.np
    a = np.full((len(rows), width), pad, dtype=np.int64)
    for i, r in enumerate(rows):
        a[i, : len(r)] = r
    return a


def checkpoint_batch(model, seed: int = 0) -> tuple:
    """The check's batch for ``model`` (see the module doc), host int64 arrays."""
    cfg = model.config
    L = cfg.max_len
    bos, eos, pad = cfg.bos_id, cfg.eos_id, cfg.pad_id
    if isinstance(model, Transformer):
        src = _rows(cfg, [min(n, L) for n in (6, 4, 2)], seed)
        ys = _rows(cfg, [min(n, L - 1) for n in (4, 3, 1)], seed + 1)
        T = max(len(y) for y in ys) + 1
        return (
            _padded(src, max(len(s) for s in src), pad),
            _padded([[bos, *y] for y in ys], T, pad),
            _padded([[*y, eos] for y in ys], T, pad),
        )
    xs = _rows(cfg, [max(min(n, L) - 1, 0) for n in (6, 4, 2)], seed)
    T = max(len(x) for x in xs) + 1
    ids = _padded([[bos, *x] for x in xs], T, pad)
    if isinstance(model, LanguageModel):
        return ids, _padded([[*x, eos] for x in xs], T, pad)
    labels = backend.np.random.default_rng(seed + 1).integers(0, model.num_classes, len(xs))
    return ids, labels.astype(backend.np.int64)


class CheckTools(NamedTuple):
    """The gradcheck command's own pieces a checkpoint's check runs with."""

    timed: object  # (args, model, batch, forwards, fewer, ...) -> the check's Clock
    directions: object  # (args, model, batch, h, timer, retries) -> GradReport
    sweep: object  # (args, model, batch, steps, timer) -> passed
    bytes_per_parameter: dict  # "entries" / "directions" -> bytes a check holds a parameter


def run_checkpoint(args, tools: CheckTools) -> int:
    """The check of ``args.checkpoint``'s model, with the gradcheck command's clock,
    memory bound, directional check and sweep (several ``--h``)."""
    g = tools
    ckpt = load_checkpoint(args.checkpoint)
    model, cfg = ckpt.model, ckpt.config
    spec = model_spec(model)
    how = "directions" if args.directions else "entries"
    n = model.num_parameters()
    memory.need_memory(
        n * g.bytes_per_parameter[how], f"a gradient check of {describe(spec, cfg)}",
        "check fewer --directions on a machine with more memory",
    )
    batch = [backend.asarray(a) for a in checkpoint_batch(model, args.seed)]
    shapes = " ".join(f"{tuple(a.shape)}" for a in batch)
    head = (
        f"\n== {args.checkpoint}: {describe(spec, cfg)}, {len(model.parameters())} tensors, "
        f"P_drop={cfg.P_drop} (replayed), eps_ls={cfg.eps_ls}, batch {shapes} with padding"
    )
    steps = args.h or [default_step(model, bool(args.directions))]
    if args.directions:
        # a smooth model's directions: Richardson's h and h/2 (check_directions)
        args.extrapolate = cfg.activation != "relu"
        per = 4 if args.extrapolate else 2
        forwards = per * args.directions * (len(model.parameters()) + 1) * len(steps)
        timer = g.timed(args, model, batch, forwards, "check fewer --directions",
                         entries=2 * n * args.directions * len(steps), setups=len(steps),
                         steps=steps)
        how = ", central differences at h and h/2 extrapolated" if args.extrapolate else ""
        print(head + f", {args.dtype}, {args.directions} direction(s) per tensor{how}")
        if len(steps) > 1:
            return 0 if g.sweep(args, model, batch, steps, timer) else 1
        report = g.directions(args, model, batch, steps[0], timer, retries=2)
        print(f"step h = {steps[0]:g} (RMS per entry), {timer.took()}")
    else:
        samples = 20 if args.samples is None else args.samples
        total = sum(min(int(p.size), samples) if samples else int(p.size)
                    for p in model.parameters().values())
        timer = g.timed(args, model, batch, 2 * total,
                      "check fewer entries (--samples) or directions", steps=steps)
        print(head + f", float64, {samples or 'every'} entries per tensor")
        bar = stage(total, "checking", "entry", bar=not args.no_progress)
        report = check_model(model, *batch, rng=args.seed + 1, max_entries=samples or None,
                             tol=args.tol, h=steps[0], seed=args.seed,
                             progress=timer.watch(bar))
        bar.close()
        print(f"step h = {steps[0]:g}, {timer.took()}")
    print(report.table())
    print("\ngradcheck:", "PASSED" if report.passed else "FAILED")
    return 0 if report.passed else 1


__all__ = ["CheckTools", "checkpoint_batch", "refuse_model_flags", "run_checkpoint"]
