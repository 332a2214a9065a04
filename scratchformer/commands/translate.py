"""``scratchformer translate``: decode sentences with a trained checkpoint.

Reads one sentence per line from ``--input`` (a file, or ``-`` for stdin, the default)
and writes one line per input to ``--output`` (default stdout), in input order:

    scratchformer translate --checkpoint runs/x/checkpoint_1000.npz < src.txt > out.txt
    scratchformer translate --checkpoint ... --beam 8 --alpha 1.0 --nbest 4 --input src.txt

With ``--nbest N > 1`` (or ``--scores``) each input gives N tab-separated lines:
``line<TAB>rank<TAB>score<TAB>logprob<TAB>text`` (line and rank counted from 1; score
is the length-penalised one hypotheses are ranked by). An empty input line gives an
empty output line (no n-best lines). ``--greedy`` decodes greedily instead.

The tokenizer is the one stored in the checkpoint (``meta["tokenizer"]``).
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import ExitStack

from scratchformer.checkpoint import load_with_tokenizer
from scratchformer.commands import plural
from scratchformer.decode import translate, translate_nbest
from scratchformer.errors import ScratchformerError
from scratchformer.models import Transformer
from scratchformer.progress import progress_bar


def add_parser(sub) -> None:
    p = sub.add_parser(
        "translate",
        help="translate sentences with a checkpoint (beam search or greedy)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--checkpoint", required=True, help="a checkpoint_<step>.npz file")
    p.add_argument("--input", default="-", help="source sentences, one per line (- = stdin)")
    p.add_argument("--output", default="-", help="where to write (- = stdout)")
    p.add_argument("--beam", type=int, default=4, help="beam size K (default 4)")
    p.add_argument("--alpha", type=float, default=0.6, help="GNMT length penalty (0.6)")
    p.add_argument("--nbest", type=int, default=1, help="hypotheses per sentence (<= beam)")
    p.add_argument("--max-len-a", type=float, default=1.0, help="max length = a * src + b")
    p.add_argument("--max-len-b", type=float, default=50)
    p.add_argument("--min-len", type=int, default=1, help="minimum output tokens (1: never empty)")
    p.add_argument("--no-repeat-ngram", type=int, default=0, help="block repeated n-grams")
    p.add_argument("--batch-size", type=int, default=32, help="sentences per batch")
    p.add_argument("--greedy", action="store_true", help="greedy decoding (ignores --beam)")
    p.add_argument("--scores", action="store_true", help="tab-separated output with scores")
    p.set_defaults(func=run)


def run(args) -> int:
    if args.greedy and (args.nbest > 1 or args.scores):
        raise ScratchformerError("--greedy gives one output without scores: drop --nbest/--scores")
    ckpt, tokenizer = load_with_tokenizer(args.checkpoint, expect=Transformer)
    with ExitStack() as stack:
        src = (
            sys.stdin
            if args.input == "-"
            else stack.enter_context(open(args.input, encoding="utf-8"))
        )
        sentences = [line.rstrip("\r\n") for line in src]
    bar = progress_bar(sum(1 for s in sentences if s.strip()), "translating", "sentence")
    options = dict(
        max_len_a=args.max_len_a,
        max_len_b=args.max_len_b,
        min_len=args.min_len,
        batch_size=args.batch_size,
        progress=bar.update,
    )
    t0 = time.perf_counter()
    if args.greedy:
        lines = translate(ckpt.model, tokenizer, sentences, greedy=True, **options)
    elif args.nbest == 1 and not args.scores:
        lines = translate(
            ckpt.model,
            tokenizer,
            sentences,
            beam_size=args.beam,
            alpha=args.alpha,
            no_repeat_ngram_size=args.no_repeat_ngram,
            **options,
        )
    else:
        results = translate_nbest(
            ckpt.model,
            tokenizer,
            sentences,
            beam_size=args.beam,
            alpha=args.alpha,
            nbest=args.nbest,
            no_repeat_ngram_size=args.no_repeat_ngram,
            **options,
        )
        lines = []
        for i, nb in enumerate(results, start=1):
            if not nb:
                lines.append("")
            for rank, t in enumerate(nb, start=1):
                h = t.hypothesis
                lines.append(f"{i}\t{rank}\t{h.score:.6f}\t{h.logprob:.6f}\t{t.text}")
    dt = time.perf_counter() - t0
    bar.close()
    with ExitStack() as stack:
        out = (
            sys.stdout
            if args.output == "-"
            else stack.enter_context(open(args.output, "w", encoding="utf-8"))
        )
        for line in lines:
            out.write(line + "\n")
    how = "greedy" if args.greedy else f"beam {args.beam}, alpha {args.alpha}"
    print(
        f"translated {plural(len(sentences), 'sentence')} in {dt:.2f} s ({how}, step {ckpt.step})",
        file=sys.stderr,
    )
    return 0
