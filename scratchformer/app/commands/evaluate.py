"""``scratchformer evaluate``: translate a split and score it with sacreBLEU.

    scratchformer evaluate --checkpoint runs/bible-cpu/checkpoints/final.npz --split test
    scratchformer evaluate --checkpoint ... --split dev --greedy --limit 200
    scratchformer evaluate --checkpoint ... --beam 4 --alpha 0.6 --output hyp.txt

Reads ``<data-dir>/<split>.tsv`` (``source<TAB>target[<TAB>ref]``; the data directory
defaults to the one the checkpoint was trained on), decodes the sources with the
checkpoint's model and its own tokenizer (beam search, or greedy), detokenizes, and
prints corpus BLEU and chrF with the sacreBLEU signatures (``pip install -e '.[bleu]'``).
``--output`` writes the hypotheses, one per line, in the order of the file, a chunk of
``--chunk-size`` sentences at a time as they are decoded (``-``: to standard output, the
scores then to standard error); only their text is kept for the scores.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from scratchformer.app import writer
from scratchformer.app.bleu import corpus_scores
from scratchformer.app.checkpoint import load_with_tokenizer
from scratchformer.app.commands import (
    NONNEGATIVE,
    add_decoding_flags,
    check_lengths,
    decode_options,
    plural,
)
from scratchformer.app.compat import task_of
from scratchformer.app.data.bible_pairs import read_pairs
from scratchformer.app.data.text import LineLimit, check_data_set
from scratchformer.app.progress import stage
from scratchformer.app.train import evaluation
from scratchformer.app.train.report import FORMATS
from scratchformer.app.train.rundir import owned_file_of
from scratchformer.app.train.tasks.seq2seq import pair_batches
from scratchformer.app.translate import (
    CHUNK_SIZE,
    SourceCheck,
    chunked,
    loop_hint,
    loops,
    translate,
)
from scratchformer.engine.errors import ScratchformerError
from scratchformer.engine.models import Transformer


def add_parser(sub) -> None:
    p = sub.add_parser(
        "evaluate",
        help="decode a split of a translation data set and score it (sacreBLEU BLEU, chrF)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--checkpoint", required=True, help="a checkpoint (.npz) with its tokenizer")
    p.add_argument("--split", default="test", choices=["train", "dev", "test"])
    p.add_argument("--data-dir", default=None, help="default: the checkpoint's task.data_dir")
    add_decoding_flags(p, CHUNK_SIZE)
    p.add_argument("--limit", type=NONNEGATIVE, default=0, help="only the first N pairs (0 = all)")
    p.add_argument(
        "--output",
        default=None,
        help="write the hypotheses to this file (- = stdout; the scores then go to stderr)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an --output that is a run's file or not text (never an input)",
    )
    p.add_argument("--json", action="store_true", help="print the scores as one JSON line")
    p.set_defaults(func=run)


def teacher_forced(model, tok, pairs, max_tokens: int = 4096, bar: bool = True) -> dict:
    """Perplexity of the references under ``model`` (plain cross-entropy per target
    token, ``<eos>`` included, dropout off): ``exp(-(1/n) sum log p(y_t | y_<t, x))``.
    Pairs with a side longer than the model's positions are left out: ``ppl_sentences``
    says how many were scored. ``bar``: a progress bar (on a terminal), else lines."""
    limit = model.config.max_len - 1  # room for <bos>/<eos>
    end = model.config.source_end_id  # Marian's </s> after every source, if any
    end = [] if end is None else [end]
    enc = [(tok.encode(s) + end, tok.encode_target(t)) for s, t in pairs]
    enc = [(s, t) for s, t in enc if 0 < len(s) <= limit and len(t) <= limit]
    if not enc:
        return {}
    show = stage(len(enc), "perplexity", "sentence", bar=bar)
    batches = pair_batches(enc, max_tokens, progress=show.update)
    m = evaluation.teacher_forced(model, batches, 0.0, model.config.pad_id)
    show.close()
    return {"ppl": m["ppl"], "ppl_sentences": len(enc), "ppl_tokens": m["n_tokens"]}


def run(args) -> int:
    ckpt, tok = load_with_tokenizer(args.checkpoint, expect=Transformer)
    check_lengths(args, ckpt.config)
    data_dir = args.data_dir
    if data_dir is None:
        data_dir = ckpt.meta.get("train_config", {}).get("task", {}).get("data_dir") or None
        if data_dir is None:
            raise ScratchformerError(
                f"{args.checkpoint} does not say which data it was trained on: pass --data-dir"
            )
    path = Path(data_dir) / f"{args.split}.tsv"
    target, report = None, sys.stdout
    if args.output is not None:
        inputs = [("--checkpoint", args.checkpoint), (f"--split {args.split}", path)]
        plan = writer.Plan("evaluate", inputs, overwrite=args.overwrite)
        target = plan.text_output(
            args.output, "evaluate --output", flag="--output", protected=owned_file_of
        )
        if target is None:  # the hypotheses on standard output, the scores beside them
            target, report = sys.stdout, sys.stderr
    check_data_set(Path(data_dir), [path.name], "pairs")
    pairs = read_pairs(path, LineLimit(ckpt.config.max_len))
    _check_the_data_fits(ckpt, tok, pairs, path, args.checkpoint)
    if args.limit:
        pairs = pairs[: args.limit]
    refs = [t for _, t in pairs]
    t0 = time.perf_counter()
    hyps, warning = _decode_split(args, ckpt.model, tok, pairs, str(path), target)
    dt = time.perf_counter() - t0
    # re-encoded, + <eos>: about what was generated
    out_tokens = sum(len(tok.encode_target(h)) + 1 for h in hyps)
    scores_tf = teacher_forced(ckpt.model, tok, pairs, bar=not args.no_progress)
    scores = corpus_scores(hyps, refs)
    how = "greedy" if args.greedy else f"beam {args.beam}, alpha {args.alpha}"
    if args.json:
        rec = {
            "checkpoint": str(args.checkpoint),
            "split": args.split,
            "decode": how,
            "step": ckpt.step,
            "min_len": args.min_len,
            "max_len_a": args.max_len_a,
            "max_len_b": args.max_len_b,
            "seconds": dt,
            "output_tokens_per_s": out_tokens / dt,
            **scores,
            **scores_tf,
        }
        print(json.dumps(rec), file=report)
    else:
        n = plural(len(pairs), "sentence")
        print(f"{args.split}: {n}, {how}, step {ckpt.step}, {dt:.1f} s", file=report)
        print(scores["bleu_detail"], file=report)  # "BLEU = 28.15 60.2/34.1/... (BP = ...)"
        print(f"  signature: {scores['bleu_signature']}", file=report)
        print(f"chrF = {scores['chrf']:.2f}", file=report)
        print(f"  signature: {scores['chrf_signature']}", file=report)
        if scores_tf:
            print(
                f"perplexity = {FORMATS['ppl'][1](scores_tf['ppl'])} (teacher-forced, "
                f"{scores_tf['ppl_sentences']} of {len(pairs)} sentences, "
                f"{scores_tf['ppl_tokens']} target tokens)",
                file=report,
            )
        print(
            f"decoding: {out_tokens / dt:.0f} output tokens/s ({plural(len(pairs), 'sentence')})",
            file=report,
        )
    if warning:
        print(warning, file=sys.stderr)
    hint = loop_hint(sum(map(loops, hyps)), len(hyps))
    if hint:
        print(hint, file=sys.stderr)
    print(f"evaluated in {dt:.1f} s", file=sys.stderr)
    return 0


#: the share of a split's source tokens that may be unknown to the checkpoint's vocabulary
MOST_UNKNOWN = 0.5


def _check_the_data_fits(ckpt, tok, pairs, path, name) -> None:
    """Refuse to score a checkpoint on sentences it cannot read: when most of their
    tokens are unknown to its vocabulary (<unk>), the data is not what it was trained for
    (a reverse model's letters against Bible verses, say), and any score is noise."""
    unk = tok.vocab.unk_id
    ids = [i for s, _ in pairs for i in tok.encode(s)]
    unknown = sum(i == unk for i in ids) / max(len(ids), 1)
    if unknown > MOST_UNKNOWN:
        task = task_of(ckpt.meta)
        trained = f" (it was trained on the {task} task)" if task else ""
        raise ScratchformerError(
            f"{path}: {unknown:.0%} of its source tokens are unknown to the vocabulary of "
            f"{name}{trained}: these are not the sentences it was made for"
        )


def _decode_split(args, model, tok, pairs, name: str, target=None) -> tuple[list[str], str | None]:
    """The hypotheses of the sources of ``pairs`` (line ``i`` of the file is pair ``i``:
    ``read_pairs`` allows no blank line), decoded a chunk at a time and written to
    ``--output`` as each chunk is done; and the warning about <unk> tokens, if any.
    Only the hypotheses' text is kept, for the corpus scores."""
    chunk_size = CHUNK_SIZE if args.chunk_size is None else args.chunk_size
    if chunk_size < 1:
        raise ScratchformerError(f"--chunk-size must be at least 1, got {chunk_size}")
    check = SourceCheck(model, tok, name)
    hyps = []
    with ExitStack() as stack:
        show = stage(len(pairs), f"decoding {args.split}", "sentence", bar=not args.no_progress)
        stack.callback(show.close)
        out = target
        if isinstance(target, writer.Target):
            out = stack.enter_context(writer.replacing(target))
        numbered = enumerate((s for s, _ in pairs), start=1)
        for chunk in chunked(check(numbered), chunk_size):
            got = translate(model, tok, [s for _, s in chunk], decode_options(args),
                            batch_size=args.batch_size, progress=show.update)
            hyps += got
            if out is not None:
                show.emit("".join(h + "\n" for h in got), out)
    return hyps, check.warning()
