"""The ``scratchformer`` sub-commands, one module each (see ``scratchformer.app.cli``).

Numeric flags are read by ``integer`` and ``number``: a value out of range is refused
when the command line is parsed, in one line naming the flag and the range
(``argument --beam: must be a whole number >= 1, got '0'``), before anything is loaded.
"""

from __future__ import annotations

import argparse
import math

from scratchformer.engine.decode.options import DecodeOptions
from scratchformer.engine.errors import ScratchformerError


def plural(n: int, word: str) -> str:
    """``1 sentence``, ``2 sentences``."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def _bounds(**limits) -> str:
    """``">= 0 and < 1"`` for ``lo=0, below=1``."""
    ops = {"above": ">", "lo": ">=", "hi": "<=", "below": "<"}
    text = " and ".join(f"{ops[k]} {v}" for k, v in limits.items() if v is not None)
    return " " + text if text else ""


def integer(lo: int | None = None, hi: int | None = None):
    """An argparse ``type``: a whole number in ``[lo, hi]`` (either bound may be open)."""

    def read(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or (lo is not None and value < lo) or (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(
                f"must be a whole number{_bounds(lo=lo, hi=hi)}, got {text!r}"
            )
        return value

    read.__name__ = "whole number"
    return read


def number(lo=None, hi=None, above=None, below=None):
    """An argparse ``type``: a finite number, ``>= lo``, ``<= hi``, ``> above`` and
    ``< below`` where given (``nan`` and ``inf`` are refused: no setting of ours means
    them)."""

    def read(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        bad = not math.isfinite(value)
        bad = bad or (lo is not None and value < lo) or (hi is not None and value > hi)
        bad = bad or (above is not None and value <= above)
        if bad or (below is not None and value >= below):
            limits = _bounds(above=above, lo=lo, hi=hi, below=below)
            raise argparse.ArgumentTypeError(f"must be a finite number{limits}, got {text!r}")
        return value

    read.__name__ = "number"
    return read


#: a probability that must leave something: dropout, label smoothing, a share of the data
PROBABILITY = number(lo=0, below=1)
#: the types of the flags most commands share
COUNT = integer(lo=1)  # beams, batch sizes, steps, samples
NONNEGATIVE = integer(lo=0)  # seeds, limits, 'every N' intervals (0 = off)


def add_decoding_flags(p, chunk_size: int) -> None:
    """The flags translate and evaluate share: the search, the lengths, the batches and
    the chunks of input read, decoded and written at a time (default ``chunk_size``)."""
    p.add_argument("--beam", type=COUNT, default=4, help="beam size K (default 4)")
    p.add_argument("--alpha", type=number(lo=0), default=0.6, help="GNMT length penalty (0.6)")
    p.add_argument("--greedy", action="store_true", help="greedy decoding (ignores --beam)")
    p.add_argument("--max-len-a", type=number(lo=0), default=1.0, help="max length = a * src + b")
    p.add_argument("--max-len-b", type=number(), default=50)
    p.add_argument(
        "--min-len", type=NONNEGATIVE, default=1, help="minimum output tokens (1: never empty)"
    )
    p.add_argument("--batch-size", type=COUNT, default=32, help="sentences per batch")
    p.add_argument(
        "--chunk-size",
        type=COUNT,
        default=None,
        help=f"lines read, decoded and written at a time (default {chunk_size})",
    )


#: the sampling flags (``add_sampling_flags``) and the ``DecodeOptions`` field of each
SAMPLING_FLAGS = {"--temperature": "temperature", "--top-k": "top_k", "--top-p": "top_p",
                  "--seed": "seed", "--samples": "samples"}


def add_sampling_flags(p, defaults: dict | None = None, samples_aliases=()) -> None:
    """The flags of sampling, one grammar for translate and generate: ``--temperature``,
    ``--top-k``, ``--top-p``, ``--seed``, ``--samples`` (``DecodeOptions``' fields of the
    same names). ``defaults`` (by field) where the command has its own; without them
    every flag defaults to None, so that a command can tell the flags given."""
    d = defaults or {}
    p.add_argument("--temperature", type=number(lo=0), default=d.get("temperature"),
                   help=f"divide the logits by T before sampling (0: greedy; default "
                        f"{d.get('temperature', 1.0):g})")
    p.add_argument("--top-k", type=NONNEGATIVE, default=d.get("top_k"),
                   help="sample among the k most likely tokens (0: all, the default)")
    p.add_argument("--top-p", type=number(above=0, hi=1), default=d.get("top_p"),
                   help="sample among the most likely tokens whose probability reaches p "
                        "(nucleus; 1: all, the default)")
    p.add_argument("--seed", type=NONNEGATIVE, default=d.get("seed"),
                   help="sampling seed (default 0): an input's samples depend on it and "
                        "the input's line number alone")
    p.add_argument("--samples", *samples_aliases, dest="samples", type=COUNT,
                   default=d.get("samples"), help="samples per input (default 1)")


def sampling_given(args) -> list[str]:
    """The sampling flags given on the command line (those not left at None)."""
    return [f for f, field in SAMPLING_FLAGS.items() if getattr(args, field, None) is not None]


def decode_options(args) -> DecodeOptions:
    """The ``DecodeOptions`` the decoding flags ask for (``add_decoding_flags``; translate's
    ``--nbest``, ``--no-repeat-ngram``, ``--sample`` and the sampling flags where it has
    them)."""
    sample = getattr(args, "sample", False)
    given = {field: getattr(args, field) for field in SAMPLING_FLAGS.values()
             if getattr(args, field, None) is not None}
    return DecodeOptions(
        search="sample" if sample else "greedy" if args.greedy else "beam",
        beam_size=args.beam, alpha=args.alpha, nbest=getattr(args, "nbest", 1),
        max_len_a=args.max_len_a, max_len_b=args.max_len_b, min_len=args.min_len,
        no_repeat_ngram_size=getattr(args, "no_repeat_ngram", 0),
        **(given if sample else {}),
    )


def check_lengths(args, config) -> None:
    """The length flags of translate and evaluate against the model (``config``): a
    ``--min-len`` beyond what the model can write, or ``--max-len-a``/``--max-len-b``
    that let a one-token sentence have fewer tokens than ``--min-len`` (its output could
    be empty), refused in one line naming them, rather than silently capped."""
    can = config.max_len - 1  # <bos> and the tokens fill the positions, <eos> is the last
    if args.min_len > can:
        raise ScratchformerError(
            f"--min-len {args.min_len} is more than the {can} tokens this model can write "
            f"(its max_len is {config.max_len}): lower --min-len"
        )
    shortest = min(math.floor(args.max_len_a * 1 + args.max_len_b), can)
    if shortest < args.min_len:
        raise ScratchformerError(
            f"--max-len-a {args.max_len_a:g} --max-len-b {args.max_len_b:g} let a one-token "
            f"sentence have {max(shortest, 0)} tokens, fewer than --min-len {args.min_len} "
            "(its output could be empty): raise --max-len-b, or lower --min-len"
        )
