"""Sequence-to-sequence tasks for the encoder-decoder Transformer: the built-in string
tasks (copy, reverse, sort) and translation.

An example is a pair of id lists ``(source, target)``; its batch rows are ``src``,
``tgt_in = <bos> target`` and ``tgt_out = target <eos>`` (``scratchformer.app.data.collate``).
Validation is teacher-forced; the test set is decoded for real (beam search or greedy)
and scored by exact-sequence accuracy, and for translation also by sacreBLEU's BLEU and
chrF on the detokenized output.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from scratchformer.app.bleu import ScoringError, corpus_scores
from scratchformer.app.data.batching import collate, example_widths, fixed_batches
from scratchformer.app.data.pairs import string_pairs, translation_pairs
from scratchformer.app.data.text import NO_MODEL, LineLimit
from scratchformer.app.train.evaluation import decode_outputs
from scratchformer.app.train.tasks import fit
from scratchformer.app.train.tasks.base import Task, TaskBatch, check_decoding, check_settings
from scratchformer.engine import backend
from scratchformer.engine.decode import DecodeOptions
from scratchformer.engine.errors import ConfigError, need

#: the longest side (in tokens) of the dev pair whose attention a run draws
ATTENTION_TOKENS = 30


def pair_batch(pairs, indices) -> TaskBatch:
    """The ``TaskBatch`` of the (source ids, target ids) ``pairs`` at ``indices``."""
    b = collate([pairs[i] for i in indices], indices=indices)
    return TaskBatch((b.src, b.tgt_in), b.tgt_out, b.n_tokens, b.n_tokens)


def pair_batches(pairs, max_tokens: int, progress=None):
    """``pairs`` in evaluation batches of at most ``max_tokens`` (length order);
    ``progress`` is called with the size of each batch once the next is asked for."""
    widths = example_widths(pairs)
    for idx in fixed_batches(widths, max(max_tokens, int(widths.max()))):
        yield pair_batch(pairs, idx)
        if progress is not None:
            progress(len(idx))


@dataclass
class StringSettings:
    """[task] of copy, reverse and sort (defaults: configs/reverse.toml)."""

    name: str  # "copy", "reverse" or "sort"
    symbols: int  # alphabet: the first `symbols` lowercase letters
    min_len: int  # shortest source
    max_len: int  # longest source
    train_size: int  # training pairs (sampled with replacement)
    valid_size: int  # validation pairs (held-out sources)
    test_size: int  # test pairs (held-out sources)
    held_out: float  # share of all source strings reserved for validation and test
    seed: int  # the data's seed
    decode: str  # test-time decoding: "beam" or "greedy"
    beam_size: int
    alpha: float  # GNMT length penalty of beam search

    def check(self) -> None:
        check_settings(self)
        check_decoding(self)


@dataclass
class TranslateSettings:
    """[task] of translate (defaults: configs/bible-cpu.toml)."""

    name: str  # "translate"
    data_dir: str  # the directory of {train,dev,test}.tsv
    vocab_size: int  # joint BPE vocabulary size (specials included); 0: chosen from the data
    max_len: int  # training pairs with a side longer than this (BPE tokens) are left out
    decode: str
    beam_size: int
    alpha: float

    def check(self) -> None:
        check_settings(self)
        check_decoding(self)


class Seq2SeqTask(Task):
    """Shared by the string tasks and translation: ``self.data`` holds their ``Pairs``."""

    min_len = 0  # fewest output tokens of test-time decoding
    shown_valid = ("loss", "ppl", "token_acc", "seq_acc")
    shown_test = ("seq_acc_decoded", "token_acc", "ppl")

    def examples(self, split: str) -> list:
        return self.data.encoded(split)

    def unigram_nll(self, split: str) -> float:
        """NLL per target token of ``split`` under the unigram model of the training
        targets: ``p(w) = (c(w) + 1) / (n + V)`` from the counts ``c`` of the training
        targets' tokens and ``<eos>`` (``n`` of them; add-one smoothing over the ``V``
        ids). The loss of a model that ignores the source and every earlier token: the
        first thing a trained model must beat."""
        np = backend.np
        V = len(self.tokenizer.vocab)
        eos = self.tokenizer.vocab.eos_id

        def targets(s):
            rows = [list(t) + [eos] for _, t in self.examples(s)]
            return np.asarray([i for r in rows for i in r], dtype=np.int64)

        counts = np.bincount(targets("train"), minlength=V)
        logp = np.log(counts + 1.0) - np.log(counts.sum() + V)
        return float(-logp[targets(split)].mean())

    def configure(self, model: dict, seed: int):
        config = super().configure(model, seed)
        splits = ("train", "valid", "test")
        longest = max(int(self.widths(split).max()) for split in splits)
        raise_it = "lower task.max_len" if self.init is not None else "raise model.max_len"
        need(
            config.max_len >= longest,
            f"model.max_len={config.max_len} is shorter than the longest example "
            f"({longest} positions, the target's <bos>/<eos> included): {raise_it}",
        )
        return config

    def model_spec(self) -> dict:
        return {"class": "Transformer"}

    def widths(self, split: str):
        return example_widths(self.examples(split))

    def batch(self, split: str, indices) -> TaskBatch:
        return pair_batch(self.examples(split), indices)

    def decoding(self) -> str:
        s = self.settings
        return f"beam {s.beam_size}, alpha {s.alpha}" if s.decode == "beam" else "greedy"

    def test(self, model, max_tokens: int, examples: int, seed: int, progress=None, world=None):
        m, shown, _ = self.decode_test(model, max_tokens, examples, progress, world)
        return m, shown

    def decode_test(self, model, max_tokens: int, examples: int, progress=None, world=None):
        """Teacher-forced metrics, then the test sources decoded for real: exact-sequence
        accuracy of the decoded outputs (``seq_acc_decoded``). Returns ``(metrics, the
        first ``examples`` (source, target, output) texts, every output's ids)``. The ranks
        of ``world`` share the decoding (``decode_outputs``)."""
        s = self.settings
        m = self.evaluate(model, "test", max_tokens)
        pairs = self.examples("test")
        t0 = time.perf_counter()
        sources = [x for x, _ in pairs]
        options = DecodeOptions(search=s.decode, beam_size=s.beam_size, alpha=s.alpha,
                                min_len=self.min_len)
        outputs = decode_outputs(model, sources, options, progress=progress, world=world)
        m["seq_acc_decoded"] = sum(o == list(y) for o, (_, y) in zip(outputs, pairs)) / len(pairs)
        m["decode"] = self.decoding()
        m["decode_seconds"] = time.perf_counter() - t0
        texts = self.data.test
        shown = [(src, tgt, self.tokenizer.decode(o)) for (src, tgt), o in zip(texts, outputs)]
        return m, shown[:examples], outputs

    def attention_example(self):
        """The first dev pair of at most ``ATTENTION_TOKENS`` tokens a side (else the
        shortest of the first 200): its cross-attention stays legible as an image."""
        pairs = self.examples("valid")
        if not pairs:
            return None
        short = [p for p in pairs if max(len(p[0]), len(p[1]) + 1) <= ATTENTION_TOKENS]
        return short[0] if short else min(pairs[:200], key=lambda p: len(p[0]) + len(p[1]))

    def format_example(self, example) -> str:
        src, tgt, out = example
        verdict = "ok" if out == tgt else f"WRONG, want {tgt!r}"
        return f"  {src!r:16} -> {out!r:16} {verdict}"


class StringTask(Seq2SeqTask):
    """copy, reverse, sort: generated strings, never downloaded."""

    Settings = StringSettings
    config = "reverse"
    kinds = ("copy", "reverse", "sort")

    def __init__(self, settings: StringSettings, lines: LineLimit = NO_MODEL, init=None):
        super().__init__(settings, lines, init)
        s = settings
        self.data = string_pairs(
            s.name,
            symbols=s.symbols,
            min_len=s.min_len,
            max_len=s.max_len,
            train_size=s.train_size,
            valid_size=s.valid_size,
            test_size=s.test_size,
            held_out=s.held_out,
            seed=s.seed,
        )
        if init is not None and init.tokenizer.to_dict() != self.data.tokenizer.to_dict():
            raise ConfigError(
                f"model.init_from {init.path} has another vocabulary than task {s.name}'s "
                f"alphabet of {s.symbols} letters (task.symbols)"
            )
        self.tokenizer = self.data.tokenizer


class TranslateTask(Seq2SeqTask):
    """Sentence pairs from TSV files with a joint SentencePiece BPE; BLEU at test time."""

    Settings = TranslateSettings
    config = "bible-cpu"
    kinds = ("translate",)
    min_len = 1  # a non-empty sentence never translates to nothing (fairseq's default)
    shown_test = ("bleu", "chrf", "token_acc", "ppl")
    best_metrics = ("nll", "bleu", "chrf")

    def __init__(self, settings: TranslateSettings, lines: LineLimit = NO_MODEL, init=None):
        super().__init__(settings, lines, init)
        s = settings
        self.data = translation_pairs(
            s.data_dir, vocab_size=s.vocab_size, max_len=s.max_len, lines=lines,
            tokenizer=self.tokenizer,
            source_end=None if init is None else init.config.source_end_id,
        )
        self.tokenizer = self.data.tokenizer
        self.fitted = ""  # the model chosen from the data, in words ("": none was)
        self.oversized = ""  # a note when the model given is far larger than the data

    def configure(self, model: dict, seed: int):
        """``[model] preset = "data"``: the model sized to the training pairs (``fit``),
        the other ``[model]`` keys on top."""
        if self.init is not None:  # the checkpoint's model
            return super().configure(model, seed)
        sources = [len(s) for s, _ in self.examples("train")]
        tokens = sum(len(t) + 1 for _, t in self.examples("train"))  # + <eos>
        longest = max(int(self.widths(split).max()) for split in ("train", "valid", "test"))
        fitted, why = fit.model_for(tokens, max(sources), longest)
        if model.get("preset") != "data":
            config = super().configure(model, seed)
            if config.d_model > fitted["d_model"]:  # a model far larger than its data
                self.oversized = (
                    f"note: d_model={config.d_model} for {why.split(':')[0]}: a model "
                    f"this size learns these pairs by heart; --config pairs (or --set "
                    f'model.preset="data") sizes it from the data (d_model={fitted["d_model"]})'
                )
            return config
        rest = {k: v for k, v in model.items() if k != "preset"}
        config = super().configure({**fitted, **rest}, seed)
        self.fitted = f"model {fit.describe(config)} ({why})"
        return config

    def notes(self) -> list[str]:
        lines = []
        if self.data.dropped:
            lines.append(
                f"left out {self.data.dropped} training pair{'s' if self.data.dropped != 1 else ''}"
                f" with a side longer than task.max_len={self.settings.max_len} BPE tokens "
                "(the pairs trained on; the model's positions are model.max_len)"
            )
        held = self.data.dropped_held_out
        if held:
            n = " and ".join(
                f"{k} {'dev' if s == 'valid' else s} pair{'s' if k != 1 else ''}"
                for s, k in held.items()
            )
            lines.append(
                f"left out {n} longer than task.max_len={self.settings.max_len} tokens: not "
                "scored, as in training"
            )
        for chosen in (self.data.chosen, self.fitted):
            if chosen:
                lines.append(f"chosen from the data: {chosen}")
        if self.data.chosen or self.fitted:
            lines.append(
                '  (the config\'s task.vocab_size = 0 and model.preset = "data"; set a size '
                "with --set task.vocab_size=N or --set model.KEY=VALUE)"
            )
        if self.oversized:
            lines.append(self.oversized)
        nll = self.unigram_nll("valid")
        lines.append(
            f"unigram baseline: dev nll {nll:.4f} (ppl {math.exp(nll):.1f}), the training "
            "targets' token frequencies, blind to the source and to the words before"
        )
        return lines

    def test(self, model, max_tokens: int, examples: int, seed: int, progress=None, world=None):
        """As for every sequence-to-sequence task, plus corpus BLEU and chrF of the
        detokenized outputs (none when sacreBLEU is not installed)."""
        m, shown, outputs = self.decode_test(model, max_tokens, examples, progress, world)
        hyps = [self.tokenizer.decode(o) for o in outputs]
        try:
            scores = corpus_scores(hyps, [t for _, t in self.data.test])
        except ScoringError as e:
            m["bleu_missing"] = str(e)
        else:
            m.update({k: scores[k] for k in ("bleu", "chrf", "bleu_signature")})
        return m, shown

    def dev_scores(self, model, limit: int = 0, progress=None, world=None) -> dict:
        """sacreBLEU's BLEU and chrF of the first ``limit`` dev sentences (0: all),
        decoded greedily (fast, and the same for every batch), with the seconds the
        decoding and scoring took (``decode_seconds``). The ranks of ``world`` share the
        decoding."""
        t0 = time.perf_counter()
        pairs = self.examples("valid")[: limit or None]
        options = DecodeOptions(search="greedy", min_len=self.min_len)
        outputs = decode_outputs(model, [x for x, _ in pairs], options, progress=progress,
                                 world=world)
        hyps = [self.tokenizer.decode(o) for o in outputs]
        scores = corpus_scores(hyps, [t for _, t in self.data.valid[: len(pairs)]])
        return {"bleu": scores["bleu"], "chrf": scores["chrf"], "decoded": len(pairs),
                "decode_seconds": time.perf_counter() - t0}

    def format_example(self, example) -> str:
        src, tgt, out = example
        return f"  source:    {src}\n  reference: {tgt}\n  output:    {out}"


__all__ = [
    "pair_batch",
    "pair_batches",
    "StringSettings",
    "StringTask",
    "TranslateSettings",
    "TranslateTask",
]
