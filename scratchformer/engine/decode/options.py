"""How to decode: one options object for every search, checked once where it is made.

    options = DecodeOptions(beam_size=4, alpha=0.6)          # the paper's beam search
    options = DecodeOptions(search="greedy", min_len=1)
    options = DecodeOptions(search="sample", top_p=0.9, samples=5, seed=1)
    beam_search(model, src, options); greedy_decode(model, src, options)
    sample_decode(model, src, options)
    translate(model, tokenizer, sentences, options)
    beam_search(model, src, beam_size=8)                     # the same, by its fields

The searches, ``translate``, ``translate_nbest``, evaluation and the command line read
their settings from it; nothing threads them as separate keywords (a call may name
fields as keywords: they are folded into the object where the call enters).

    search                "beam" (the paper's), "greedy" (beam 1, faster) or "sample"
                          (draws from the model's distribution: decode/sample.py)
    beam_size, alpha      K >= 1 hypotheses; the GNMT length penalty's exponent >= 0
                          (``score = log P / ((5 + |Y|) / 6) ** alpha``, also the
                          score of a sample)
    nbest                 hypotheses returned per sentence (<= beam_size); beam search's
                          alone (a sample is not ranked: ask for ``samples``)
    temperature           sampling: the logits are divided by it (0: the argmax, greedy)
    top_k                 sampling: only the k most probable tokens (0: all)
    top_p                 sampling: only the most probable tokens whose mass reaches
                          top_p, in (0, 1] (nucleus sampling; 1: all)
    seed, samples         sampling: ``samples`` outputs per sentence, sample j of the
                          sentence at position i drawn by a generator of (seed, i, j)
    max_len_a, max_len_b  the output's length limit, ``a * source length + b`` tokens
                          (and the position table's end)
    min_len               fewest output tokens before <eos> is allowed
    no_repeat_ngram_size  n > 0: no n-gram of output tokens twice in a hypothesis
    decoder_start         the decoder's first input (None: the model's <bos>)
    source_end            an id ``translate`` appends to every source (None: none)

Dimension key: ``B`` sentences, ``S`` source length, ``K`` beams.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from scratchformer.engine.errors import ScratchformerError

#: the searches a ``DecodeOptions`` may name
SEARCHES = ("beam", "greedy", "sample")


class DecodeError(ScratchformerError):
    """Decoding cannot run as asked (bad source, bad arguments, no hypothesis possible)."""


def _whole(name: str, value, least: int, why: str = "") -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise DecodeError(f"{name} must be an integer >= {least}, got {value!r}{why}")


def _finite(name: str, value, least: float | None = None, why: str = "") -> None:
    number = not isinstance(value, bool) and isinstance(value, (int, float))
    if not number or not math.isfinite(value) or (least is not None and value < least):
        at_least = "" if least is None else f" >= {least:g}"
        raise DecodeError(f"{name} must be a finite number{at_least}, got {value!r}{why}")


def check_sampling(temperature, top_k, top_p, seed, samples, samples_name="samples") -> None:
    """The sampling settings (``DecodeOptions``' and ``generate``'s), each refused in one
    line naming it when out of range."""
    _finite("temperature", temperature, 0, " (0 is greedy)")
    _whole("top_k", top_k, 0, " (0 keeps every token)")
    number = not isinstance(top_p, bool) and isinstance(top_p, (int, float))
    if not (number and 0 < top_p <= 1):
        raise DecodeError(f"top_p must be a number in (0, 1], got {top_p!r} (1 keeps every "
                          "token)")
    _whole("seed", seed, 0)
    _whole(samples_name, samples, 1)


@dataclass(frozen=True)
class DecodeOptions:
    """The settings of a decode (the module doc); invalid ones are refused in one line
    when the object is made."""

    search: str = "beam"
    beam_size: int = 4
    alpha: float = 0.6
    nbest: int = 1
    max_len_a: float = 1.0
    max_len_b: float = 50
    min_len: int = 0
    no_repeat_ngram_size: int = 0
    decoder_start: int | None = None
    source_end: int | None = None
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    samples: int = 1

    def __post_init__(self):
        if self.search not in SEARCHES:
            raise DecodeError(f"search must be one of {', '.join(SEARCHES)}, got {self.search!r}")
        _whole("beam_size", self.beam_size, 1)
        _finite("alpha", self.alpha, 0, " (a negative alpha would favour short outputs and "
                "break the early-stopping bound)")
        if isinstance(self.nbest, bool) or not isinstance(self.nbest, int) or not (
                1 <= self.nbest <= self.beam_size):
            raise DecodeError(f"nbest must be an integer in [1, beam_size={self.beam_size}], "
                              f"got {self.nbest!r}")
        if self.nbest > 1 and self.search == "sample":
            raise DecodeError(f"nbest={self.nbest} ranks the hypotheses of a beam search: "
                              "with search='sample' ask for samples=N instead")
        check_sampling(self.temperature, self.top_k, self.top_p, self.seed, self.samples)
        if self.samples > 1 and self.search != "sample":
            raise DecodeError(f"samples={self.samples} draws several outputs: it needs "
                              f"search='sample', not {self.search!r}")
        _finite("max_len_a", self.max_len_a)
        _finite("max_len_b", self.max_len_b)
        _whole("min_len", self.min_len, 0)
        _whole("no_repeat_ngram_size", self.no_repeat_ngram_size, 0)
        for name in ("decoder_start", "source_end"):
            if getattr(self, name) is not None:
                _whole(name, getattr(self, name), 0)

    def start(self, config) -> int:
        """The decoder's first input: ``decoder_start``, else the model's <bos>."""
        return config.bos_id if self.decoder_start is None else self.decoder_start

    def replace(self, **changes) -> DecodeOptions:
        """A copy with ``changes`` (checked as a new object is)."""
        return dataclasses.replace(self, **changes) if changes else self


def options_of(options: DecodeOptions | None, default: DecodeOptions, settings: dict):
    """The options of a call: ``options`` (else ``default``) with the keyword ``settings``
    (fields of ``DecodeOptions``: ``beam_search(model, src, beam_size=8)``) put in."""
    unknown = sorted(set(settings) - {f.name for f in dataclasses.fields(DecodeOptions)})
    if unknown:
        raise DecodeError(f"{', '.join(unknown)}: not a decoding setting (DecodeOptions has "
                          f"{', '.join(f.name for f in dataclasses.fields(DecodeOptions))})")
    if options is not None and not isinstance(options, DecodeOptions):
        raise DecodeError(f"options must be a DecodeOptions, got {type(options).__name__}")
    return (default if options is None else options).replace(**settings)


#: the paper's beam search (beam 4, alpha 0.6): the options when none are given
BEAM = DecodeOptions()

__all__ = ["BEAM", "SEARCHES", "DecodeError", "DecodeOptions", "check_sampling", "options_of"]
