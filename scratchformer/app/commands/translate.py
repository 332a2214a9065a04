"""``scratchformer translate``: decode sentences with a trained checkpoint.

Reads one sentence per line from ``--input`` (a file, or ``-`` for stdin, the default)
and writes one line per input to ``--output`` (default stdout), in input order:

    scratchformer translate --checkpoint runs/x/checkpoints/final.npz < src.txt > out.txt
    scratchformer translate --checkpoint ... --beam 8 --alpha 1.0 --nbest 4 --input src.txt

With ``--nbest N > 1`` (or ``--scores``) each input gives N tab-separated lines:
``line<TAB>rank<TAB>score<TAB>logprob<TAB>text`` (line and rank counted from 1; score
is the length-penalised one hypotheses are ranked by). An empty input line gives an
empty output line (no n-best lines). ``--greedy`` decodes greedily instead.

``--sample`` draws from the model's distribution instead of searching:

    scratchformer translate --checkpoint ... --sample --top-p 0.9 --samples 3 --seed 1

``--temperature T`` divides the logits by T (0: greedy), ``--top-k K`` keeps the K most
likely tokens, ``--top-p P`` the most likely ones whose probability reaches P (nucleus);
``--min-len`` and the maximum length hold as for the searches. Line i's samples are
fixed by ``--seed`` and i alone (not by the chunks, batches or other lines). With
``--samples N > 1`` (or ``--scores``) each input gives N lines as ``--nbest`` does, the
rank being the sample's number (samples are not ranked: the score is the sample's
log-probability under the model over the length penalty of ``--alpha``). ``--nbest`` is
beam search's: with ``--sample`` ask for ``--samples``; ``--sample`` with ``--greedy``,
``--nbest`` or ``--no-repeat-ngram`` is refused, and so are the sampling flags without
``--sample``. An output's line breaks and tabs (byte pieces a sample may draw) are
written as spaces: each input keeps its line, or its N lines.

``--interactive`` translates each line of standard input as soon as it is read and
writes its output at once (the n-best or samples with ``--nbest``, ``--samples`` or
``--scores``), keeping the model loaded: a prompt on a terminal, a pipe read line by
line. A line too long for the model is reported and the session goes on; end of input
(Ctrl-D) or Ctrl-C ends it, with exit code 0.

The tokenizer is the one stored in the checkpoint (``meta["tokenizer"]``).

A file is read twice (first its lines are counted, for the progress shown); a stream
(stdin, a pipe, a FIFO, ``/dev/stdin``, a process substitution) once, as it comes.

The input is read as UTF-8, one sentence per ``\\n``-ended line (a ``\\r\\n`` ending loses
its ``\\r``; a UTF-8 byte order mark at the start is dropped); bytes that are not UTF-8
are an error naming the line. Tokens the model's vocabulary lacks are read as <unk>,
with one warning at the end. The input is translated in chunks of ``--chunk-size``
lines (sorted into batches within each), each written before the next is read: memory
does not grow with the input, and output comes while a pipe is still being written.
An error in a later chunk (a line too long for the model) leaves the earlier chunks'
output written.
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from scratchformer.app import writer
from scratchformer.app.checkpoint import load_with_tokenizer
from scratchformer.app.commands import (
    COUNT,
    NONNEGATIVE,
    add_decoding_flags,
    add_sampling_flags,
    check_lengths,
    decode_options,
    plural,
    sampling_given,
)
from scratchformer.app.data.text import LineLimit, iter_text_lines
from scratchformer.app.progress import stage
from scratchformer.app.train.rundir import owned_file_of
from scratchformer.app.translate import (
    CHUNK_SIZE,
    SourceCheck,
    chunked,
    loop_hint,
    loops,
    one_line,
    translate,
    translate_nbest,
)
from scratchformer.engine.decode.common import DecodeError
from scratchformer.engine.errors import ScratchformerError
from scratchformer.engine.models import Transformer


def add_parser(sub) -> None:
    p = sub.add_parser(
        "translate",
        help="translate sentences with a checkpoint (beam search, greedy or sampling)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--checkpoint",
        required=True,
        help="a run's final model: runs/<name>/checkpoints/final.npz (or checkpoint_<step>.npz)",
    )
    p.add_argument("--input", default="-", help="source sentences, one per line (- = stdin)")
    p.add_argument("--output", default="-", help="where to write (- = stdout)")
    add_decoding_flags(p, CHUNK_SIZE)
    p.add_argument("--nbest", type=COUNT, default=1, help="hypotheses per sentence (<= beam)")
    p.add_argument("--no-repeat-ngram", type=NONNEGATIVE, default=0, help="block repeated n-grams")
    p.add_argument("--scores", action="store_true", help="tab-separated output with scores")
    p.add_argument("--sample", action="store_true",
                   help="sample from the model instead of searching (the flags below)")
    add_sampling_flags(p)
    p.add_argument("--interactive", action="store_true",
                   help="translate each line of standard input as it is read (Ctrl-D ends)")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an --output that is a run's file or not text (never an input)",
    )
    p.set_defaults(func=run)


def check_search(args) -> None:
    """The flags that cannot go together, refused in one line naming them."""
    if args.greedy and (args.nbest > 1 or args.scores):
        raise ScratchformerError("--greedy gives one output without scores: drop --nbest/--scores")
    given = sampling_given(args)
    if given and not args.sample:
        what = "is a sampling flag" if len(given) == 1 else "are sampling flags"
        raise ScratchformerError(f"{', '.join(given)} {what}: add --sample, or drop "
                                 f"{'it' if len(given) == 1 else 'them'}")
    if args.sample:
        if args.greedy:
            raise ScratchformerError("--sample and --greedy are two ways to decode: choose one")
        if args.nbest > 1:
            raise ScratchformerError("--nbest ranks the hypotheses of a beam search: with "
                                     "--sample, --samples N gives N samples of each line")
        if args.no_repeat_ngram:
            raise ScratchformerError("--no-repeat-ngram applies to beam search, not --sample")
    if args.interactive and (args.input != "-" or args.output != "-"):
        raise ScratchformerError("--interactive reads standard input and writes standard "
                                 "output: drop --input/--output")


def run(args) -> int:
    check_search(args)
    chunk_size = CHUNK_SIZE if args.chunk_size is None else args.chunk_size
    if chunk_size < 1:
        raise ScratchformerError(f"--chunk-size must be at least 1, got {chunk_size}")
    inputs = [("--checkpoint", args.checkpoint)]
    inputs.append(("--input", args.input) if args.input != "-" else ("standard input", 0))
    plan = writer.Plan("translate", inputs, overwrite=args.overwrite)
    target = plan.text_output(
        args.output, "translate --output", flag="--output", protected=owned_file_of
    )
    ckpt, tokenizer = load_with_tokenizer(args.checkpoint, expect=Transformer)
    check_lengths(args, ckpt.config)
    lines = LineLimit(ckpt.config.max_len)
    if args.input == "-":
        source, name, total = getattr(sys.stdin, "buffer", sys.stdin), "stdin", None
    else:
        source, name, total = args.input, args.input, None
        if Path(source).is_file():  # a stream (a pipe, a FIFO, /dev/stdin) is read once
            # a first pass over a file: the total shown, bad bytes found before any output
            total = sum(1 for _, line in iter_text_lines(source, limit=lines) if line.strip())
    check = SourceCheck(ckpt.model, tokenizer, name)
    decode = _decoder(args, ckpt.model, tokenizer)
    if args.interactive:
        return _interactive(args, check, decode, source, lines, ckpt.step)
    n = looping = outputs = 0
    t0 = time.perf_counter()
    with ExitStack() as stack:
        show = stage(total, "translating", "sentence", bar=not args.no_progress)
        stack.callback(show.close)
        out = sys.stdout if target is None else stack.enter_context(writer.replacing(target))
        for chunk in chunked(check(iter_text_lines(source, name, lines)), chunk_size):
            # flushed: a reader at the other end of a pipe gets each chunk at once
            got = decode(chunk, show.update)
            show.emit("".join(line + "\n" for line in got), out)
            n += len(chunk)
            looping, outputs = looping + sum(map(loops, got)), outputs + len(got)
    hint = loop_hint(looping, outputs)
    if hint:
        print(hint, file=sys.stderr)
    _summary(args, check, n, time.perf_counter() - t0, ckpt.step)
    return 0


def _summary(args, check, n: int, seconds: float, step: int) -> None:
    """The last lines on standard error: the <unk> warning, what was translated, how."""
    if check.warning():
        print(check.warning(), file=sys.stderr)
    if args.sample:
        o = decode_options(args)
        how = (f"sampling: temperature {o.temperature:g}, top-k {o.top_k}, top-p {o.top_p:g}, "
               f"seed {o.seed}, {plural(o.samples, 'sample')}")
    else:
        how = "greedy" if args.greedy else f"beam {args.beam}, alpha {args.alpha}"
    print(f"translated {plural(n, 'sentence')} in {seconds:.2f} s ({how}, step {step})",
          file=sys.stderr, flush=True)


def _interactive(args, check, decode, source, limit, step: int) -> int:
    """``--interactive``: read a line, write its output lines and flush, until the end of
    the input or Ctrl-C (both end the session, exit code 0). A line the model cannot
    take (too many tokens) is reported on standard error and the session goes on."""
    prompt = sys.stdin.isatty() and sys.stderr.isatty()
    if prompt:
        print("type a sentence and press Enter; Ctrl-D or Ctrl-C ends", file=sys.stderr)
    lines = iter_text_lines(source, "stdin", limit)
    n, t0 = 0, time.perf_counter()
    try:
        while True:
            if prompt:
                print("> ", end="", file=sys.stderr, flush=True)
            numbered = next(lines, None)
            if numbered is None:  # Ctrl-D: the closing line below the prompt, not after it
                if prompt:
                    print(file=sys.stderr)
                break
            try:
                got = decode(list(check([numbered])), None)
            except DecodeError as e:  # this line's problem: the next may be fine
                print(f"scratchformer translate: error: {e}", file=sys.stderr, flush=True)
                continue
            sys.stdout.write("".join(line + "\n" for line in got))
            sys.stdout.flush()
            n += 1
    except KeyboardInterrupt:  # Ctrl-C ends the session as the end of input does
        print(file=sys.stderr)
    _summary(args, check, n, time.perf_counter() - t0, step)
    return 0


def _decoder(args, model, tokenizer):
    """``decode(chunk, progress) -> output lines``: one chunk of ``(line number,
    sentence)`` pairs decoded as the options ask, its lines in input order (one per
    sentence, or the n-best lines or samples of each; ``one_line``: an output's line
    breaks and tabs as spaces); a line's samples are seeded by its number counted
    from 0."""
    options, batch = decode_options(args), args.batch_size
    one = args.nbest == 1 and options.samples == 1 and not args.scores
    if args.greedy or one:
        return lambda chunk, progress: list(map(one_line, translate(
            model, tokenizer, [s for _, s in chunk], options, batch_size=batch,
            progress=progress, positions=[lineno - 1 for lineno, _ in chunk],
        )))

    def nbest_lines(chunk, progress):
        sentences = [s for _, s in chunk]
        results = translate_nbest(model, tokenizer, sentences, options, batch_size=batch,
                                  progress=progress, positions=[i - 1 for i, _ in chunk])
        lines = []
        for (lineno, _), nb in zip(chunk, results):
            if not nb:
                lines.append("")
            for rank, t in enumerate(nb, start=1):
                h = t.hypothesis
                lines.append(f"{lineno}\t{rank}\t{h.score:.6f}\t{h.logprob:.6f}\t"
                             f"{one_line(t.text)}")
        return lines

    return nbest_lines
