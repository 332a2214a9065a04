"""scratchformer plot: PNG pictures for study (needs pip install 'scratchformer[plot]').

scratchformer plot attention runs/reverse "abcdef"      attention maps of a trained model
scratchformer plot attention gpt2.npz "Hello world"     a language model's (an imported GPT-2)
scratchformer plot positional --d-model 512             the sinusoid table as a heat map
scratchformer plot schedule --warmup 4000 8000          learning rate against the step
scratchformer plot curves runs/reverse                  loss, perplexity, lr, BLEU
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

from scratchformer.app import viz, writer
from scratchformer.app.checkpoint import latest_checkpoint, load_checkpoint, load_with_tokenizer
from scratchformer.app.commands import COUNT, NONNEGATIVE, integer, number
from scratchformer.app.train.rundir import FINAL_NAME, owned_file_of
from scratchformer.app.viz import ATTENTION_MAPS, PlotError
from scratchformer.engine import backend, memory
from scratchformer.engine.decode import greedy_decode
from scratchformer.engine.models import LanguageModel, Transformer
from scratchformer.engine.ops import sinusoidal_table

#: where the plots of no run go (a run's plots go into its directory): beside the runs,
#: never into the current folder (in a clone, a stray untracked file)
PLOTS = "runs/plots"


def add_parser(sub) -> None:
    p = sub.add_parser(
        "plot",
        help="draw attention maps, positional encodings, the lr schedule, training curves",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    plots = p.add_subparsers(dest="plot", metavar="PLOT")
    plots.required = True
    overwrite = argparse.ArgumentParser(add_help=False)
    overwrite.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing file that is not an earlier plot of the same kind",
    )

    a = plots.add_parser(
        "attention",
        parents=[overwrite],
        help="heat maps of encoder, decoder and cross-attention for one sentence",
        description="Heat maps of the attention weights of a trained model on one sentence: "
        "one PNG per kind (encoder self-attention, decoder masked self-attention, "
        "encoder-decoder attention), one panel per layer and head, tokens on the axes. "
        "The decoder side is the model's own greedy output, or --target teacher-forced.",
    )
    a.add_argument(
        "checkpoint",
        help="a checkpoint .npz, or a run directory (its final.npz; its newest checkpoint "
        "while it has none)",
    )
    a.add_argument(
        "source",
        help="the source sentence (text, tokenized as in training); a language model's text",
    )
    a.add_argument("--target", help="teacher-force this target instead of decoding")
    a.add_argument(
        "--kind", choices=[*ATTENTION_MAPS, "all"], default="all", help="which attention"
    )
    a.add_argument("--layer", type=NONNEGATIVE, nargs="+", help="layers to draw (default: all)")
    a.add_argument("--head", type=NONNEGATIVE, nargs="+", help="heads to draw (default: all)")
    a.add_argument(
        "-o", "--out-dir", help="folder for attention_<kind>.png (default: the run directory)"
    )
    a.set_defaults(func=run_attention)

    q = plots.add_parser(
        "positional",
        parents=[overwrite],
        help="the positional encoding table as a heat map",
        description="The sinusoidal encoding (positions x dimensions), or with --checkpoint "
        "the position table of a trained model (its learned table for positions='learned').",
    )
    q.add_argument("--d-model", type=integer(lo=2), default=512, help="width of the sinusoid table")
    q.add_argument("--positions", type=COUNT, default=100, help="number of positions drawn")
    q.add_argument(
        "--checkpoint", help="draw this model's table (a checkpoint, or a run dir: its final.npz)"
    )
    q.add_argument("--stack", choices=["encoder", "decoder"], default="encoder")
    q.add_argument(
        "-o",
        "--out",
        help="default: positional.png in the run directory with --checkpoint, else "
        f"{PLOTS}/positional.png",
    )
    q.set_defaults(func=run_positional)

    s = plots.add_parser(
        "schedule",
        parents=[overwrite],
        help="learning rate against the step, for several d_model/warmup/lr_factor",
        description="lr = lr_factor * d_model^-0.5 * min(s^-0.5, s * warmup^-1.5), one curve "
        "per combination of the values given (the paper: d_model 512, warmup 4000, "
        "lr_factor 1).",
    )
    s.add_argument("--d-model", type=COUNT, nargs="+", default=[512, 256])
    s.add_argument("--warmup", type=COUNT, nargs="+", default=[4000, 8000])
    s.add_argument("--lr-factor", type=number(above=0), nargs="+", default=[1.0])
    s.add_argument(
        "--factor", type=number(above=0), nargs="+", dest="old_factor", help=argparse.SUPPRESS
    )
    s.add_argument("--steps", type=integer(lo=2), default=20000, help="last step drawn")
    s.add_argument("-o", "--out", default=f"{PLOTS}/schedule.png", help="(default: %(default)s)")
    s.set_defaults(func=run_schedule)

    c = plots.add_parser(
        "curves",
        parents=[overwrite],
        help="loss, perplexity, learning rate and BLEU from a training metrics log",
        description="Training curves from metrics.jsonl (JSON lines written by "
        "'scratchformer train'): loss, perplexity, learning rate, BLEU and accuracy.",
    )
    c.add_argument("metrics", help="a metrics.jsonl file, or a run directory holding one")
    c.add_argument("-o", "--out", help="default: curves.png in the run directory")
    c.set_defaults(func=run_curves)


# -- attention ------------------------------------------------------------------------------
def _target(args, out, kind: str, inputs=()) -> writer.Target:
    """The plot's file, checked before anything is drawn (``writer.Plan``): never one of
    ``inputs``, a run's file or another file than an earlier plot of this ``kind``
    (unless --overwrite)."""
    plan = writer.Plan(f"plot {kind}", inputs, overwrite=args.overwrite)
    return plan.output(out, f"plot {kind}", flag="-o", suffix=".png", protected=owned_file_of)


def run_dir_of(path: Path) -> Path:
    """The run directory a checkpoint or metrics file belongs to (runs/<name>/checkpoints/
    x.npz -> runs/<name>), or the directory itself."""
    path = Path(path)
    if path.is_dir():
        return path
    return path.parent.parent if path.parent.name == "checkpoints" else path.parent


def _checkpoint_path(path) -> Path:
    """A checkpoint file; of a run directory (or its checkpoints/), the run's final model
    (``final.npz``, as every command takes), or while the run has none (stopped before
    its end), its newest checkpoint."""
    path = Path(path)
    if path.is_dir():
        for folder in (path / "checkpoints", path):
            if (folder / FINAL_NAME).is_file():
                return folder / FINAL_NAME
        found = latest_checkpoint(path / "checkpoints") or latest_checkpoint(path)
        if found is None:
            raise PlotError(
                f"no {FINAL_NAME} or checkpoint_<step>.npz in {path} or {path / 'checkpoints'}"
            )
        return found
    if not path.exists():
        raise PlotError(f"no checkpoint file or run directory at {path}")
    return path


def _greedy(model, src_ids):
    """The model's greedy output ids (no bos/eos)."""
    src = backend.asarray(backend.np.asarray([src_ids], dtype=backend.np.int64))
    out = greedy_decode(model, src)  # up to source length + 50 tokens
    cfg = model.config
    special = (cfg.pad_id, cfg.bos_id, cfg.eos_id)
    return [int(i) for i in backend.asnumpy(backend.np.asarray(out[0])) if int(i) not in special]


def run_lm_attention(args, ck, tok) -> int:
    """A language model's causal self-attention on ``args.source`` (after its <bos>):
    one PNG, attention_decoder.png, one panel per layer and head."""
    cfg = ck.config
    if args.target is not None or args.kind not in ("all", "decoder"):
        what = "--target" if args.target is not None else f"--kind {args.kind}"
        raise PlotError(
            f"{what}: {ck.path} holds a language model, whose one attention is its causal "
            "self-attention over the text (--kind decoder)"
        )
    ids = [cfg.bos_id, *tok.encode(args.source)][: cfg.max_len]
    itos = tok.vocab.itos
    tokens = [itos[i] for i in ids]
    maps = viz.lm_attention_maps(ck.model, ids)
    out = _target(
        args, Path(args.out_dir or run_dir_of(ck.path)) / "attention_decoder.png",
        "attention", [("checkpoint", ck.path)],
    )
    print(f"checkpoint {ck.path} (step {ck.step}, N={cfg.N}, h={cfg.h}, d_model={cfg.d_model})")
    print(f"text: {args.source!r} ({len(ids)} tokens, <bos> first)")
    viz.plot_attention(
        maps, out, kind="decoder", src_tokens=[], tgt_in_tokens=tokens, tgt_out_tokens=[],
        layers=args.layer, heads=args.head,
        title=f"language model causal self-attention  (step {ck.step})",
    )
    w, h = viz.png_size(out.path)
    print(f"wrote {out.path} ({w} x {h})")
    return 0


def run_attention(args) -> int:
    ck, tok = load_with_tokenizer(_checkpoint_path(args.checkpoint))
    if isinstance(ck.model, LanguageModel):
        return run_lm_attention(args, ck, tok)
    if not isinstance(ck.model, Transformer):
        raise PlotError(
            f"{ck.path} holds a {type(ck.model).__name__}: attention maps are drawn for a "
            "translation model or a language model"
        )
    model, cfg = ck.model, ck.config
    src_ids = tok.encode(args.source)
    if not src_ids:
        raise PlotError("the source sentence is empty after tokenization")
    if cfg.source_end_id is not None:  # Marian's </s> after every source
        src_ids = [*src_ids, cfg.source_end_id]
    if args.target is not None:
        tgt_ids, how = tok.encode_target(args.target), "teacher-forced --target"
    else:
        tgt_ids = _greedy(model, src_ids)
        how = "the model's greedy output"
    itos = tok.vocab.itos
    bos, eos = itos[cfg.bos_id], itos[cfg.eos_id]
    src_tokens = [itos[i] for i in src_ids]
    tgt_in = [cfg.bos_id, *tgt_ids]
    tgt_in_tokens = [bos] + [itos[i] for i in tgt_ids]
    tgt_out_tokens = [itos[i] for i in tgt_ids] + [eos]
    maps = viz.attention_maps(model, src_ids, tgt_in)
    kinds = list(ATTENTION_MAPS) if args.kind == "all" else [args.kind]
    step = f"step {ck.step}"
    print(f"checkpoint {ck.path} ({step}, N={cfg.N}, h={cfg.h}, d_model={cfg.d_model})")
    print(f"source: {args.source!r}  ->  target ({how}): {tok.decode(tgt_ids)!r}")
    targets = {
        kind: _target(
            args, Path(args.out_dir or run_dir_of(ck.path)) / f"attention_{kind}.png",
            "attention", [("checkpoint", ck.path)],
        )
        for kind in kinds
    }
    for kind in kinds:
        out = targets[kind]
        title = f"{ATTENTION_MAPS[kind][0]}  ({step}"
        title += ")" if kind == "encoder" else f"; target: {how})"
        viz.plot_attention(
            maps,
            out,
            kind=kind,
            src_tokens=src_tokens,
            tgt_in_tokens=tgt_in_tokens,
            tgt_out_tokens=tgt_out_tokens,
            layers=args.layer,
            heads=args.head,
            title=title,
        )
        w, h = viz.png_size(out.path)
        print(f"wrote {out.path} ({w} x {h})")
    return 0


# -- positions, schedule, curves ---------------------------------------------------------------
def run_positional(args) -> int:
    if args.checkpoint is None:
        memory.need_memory(
            32.0 * args.positions * args.d_model,  # the table and the image's float copies
            f"a table of {args.positions} positions x {args.d_model} dimensions",
            "draw fewer --positions or a smaller --d-model",
        )
        table, title, sinusoidal = sinusoidal_table(args.positions, args.d_model), None, True
    else:
        ck = load_checkpoint(_checkpoint_path(args.checkpoint))
        cfg = ck.config
        n = min(args.positions, cfg.max_len)
        if cfg.positions == "learned":
            name = f"{args.stack}.pos.P"
            params = ck.model.parameters()
            if name not in params:
                have = sorted(k.split(".")[0] for k in params if k.endswith(".pos.P"))
                raise PlotError(f"{ck.path} has no {args.stack} positions: --stack {have[0]}")
            table = params[name][:n]
            title = (
                f"learned positions {name} of {ck.path.name} (step {ck.step}): "
                f"{n} positions x d_model = {cfg.d_model}"
            )
            sinusoidal = False
        else:
            table = sinusoidal_table(n, cfg.d_model)
            title = (
                f"{ck.path.name} uses the fixed sinusoids: {n} positions x d_model = {cfg.d_model}"
            )
            sinusoidal = True
    where = run_dir_of(ck.path) if args.checkpoint is not None else Path(PLOTS)
    inputs = [("checkpoint", ck.path)] if args.checkpoint is not None else []
    target = _target(args, args.out or where / "positional.png", "positional", inputs)
    out = viz.plot_positional(table, target, title=title, sinusoidal=sinusoidal)
    print(f"wrote {out} ({' x '.join(map(str, viz.png_size(out)))})")
    return 0


def run_schedule(args) -> int:
    if args.old_factor is not None:
        print("note: --factor is now called --lr-factor", file=sys.stderr)
        args.lr_factor = args.old_factor
    curves = list(itertools.product(args.d_model, args.warmup, args.lr_factor))
    out = viz.plot_schedule(curves, _target(args, args.out, "schedule"), steps=args.steps)
    print(f"wrote {out} ({' x '.join(map(str, viz.png_size(out)))}), {len(curves)} curves")
    return 0


def run_curves(args) -> int:
    path = Path(args.metrics)
    if path.is_dir():
        path = path / "metrics.jsonl"
    target = _target(args, args.out or run_dir_of(path) / "curves.png", "curves",
                     [("metrics", path)])
    records = viz.read_metrics(path)
    out = viz.plot_curves(records, target, title=f"training curves: {path}")
    print(f"wrote {out} ({' x '.join(map(str, viz.png_size(out)))}) from {len(records)} records")
    return 0
