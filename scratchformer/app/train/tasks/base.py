"""The task protocol: what a task gives the one training loop.

A task owns its data, its tokenizer and its kind of model; the loop owns everything
else (schedule, accumulation, clipping, the non-finite stop, progress, metrics.jsonl,
validation, checkpoints, averaging, exact resume, the time limit, threads). A task:

    Settings            the dataclass of its ``[task]`` section (every field required:
                        the defaults are in its shipped config, ``config``)
    __init__(settings, lines)  reads or makes the data and the tokenizer, no line of
                        text longer than ``lines`` (``line_limit``)
    configure(model, seed) -> TransformerConfig      the ``[model]`` section resolved
    model_spec()           -> its model's class and arguments (``models.sizes``):
                           a Transformer, LanguageModel or EncoderClassifier
    widths(split)          -> (N,) padded width of each example (token-budget batching)
    batch(split, indices)  -> TaskBatch: the model's inputs, the targets, tokens counted
    evaluate(model, split, max_tokens, limit)   teacher-forced metrics (validation)
    test(model, max_tokens, examples, seed, progress)   the test set judged as the task
                           is used: decoded, sampled or classified; -> (metrics,
                           examples); ``progress(n)`` is called as long stages advance
    meta()                 what a checkpoint keeps to be used alone: task, tokenizer, ...

Every model's ``loss_forward(*inputs, targets, rng)`` returns the mean loss over its
targets and a cache whose ``loss`` is the cross-entropy's (its accessors ``n_tokens`` and
``nll_sum`` read the number of targets and their summed negative log-likelihood),
so one loop accumulates and logs them all.
Splits are named "train", "valid" and "test".
"""

from __future__ import annotations

import hashlib
import math
from typing import NamedTuple

from scratchformer.app.data.batching import fixed_batches
from scratchformer.app.data.text import NO_MODEL, LineLimit
from scratchformer.app.data.vocab import Vocab
from scratchformer.app.train.evaluation import teacher_forced
from scratchformer.engine import backend
from scratchformer.engine.errors import ConfigError, need, wrong_field_types
from scratchformer.engine.models import PRESETS, TransformerConfig
from scratchformer.engine.models.sizes import build_model

#: [model] keys the tokenizer decides
TOKENIZER_KEYS = ("vocab_size", "pad_id", "bos_id", "eos_id")


class TaskBatch(NamedTuple):
    inputs: tuple  # host int64 arrays, what the model's forward takes: (src, tgt_in) or (ids,)
    targets: object  # host int64 (B, T) next tokens (pad where none) or (B,) labels
    n_tokens: int  # tokens this batch counts for tokens/s
    n_targets: int  # targets its loss counts (the normaliser), known on the host


def check_settings(obj, section: str = "task") -> None:
    """Raise ConfigError naming every field of dataclass ``obj`` of the wrong type
    (``task.max_len must be a whole number, got 'abc'``)."""
    wrong = wrong_field_types(type(obj), vars(obj))
    if wrong:
        raise ConfigError("; ".join(f"{section}.{w}" for w in wrong))


def check_decoding(s) -> None:
    """The test-time decoding settings of a sequence-to-sequence task."""
    need(s.decode in ("beam", "greedy"), f"task.decode={s.decode!r}: expected 'beam' or 'greedy'")
    need(s.beam_size >= 1, f"task.beam_size must be >= 1, got {s.beam_size}")
    need(math.isfinite(s.alpha) and s.alpha >= 0, f"task.alpha must be >= 0, got {s.alpha}")


def line_limit(model: dict) -> LineLimit:
    """The longest line a run's data files may hold (``data.text.LineLimit``): that of the
    model its ``[model]`` section asks for (its ``max_len``, else its preset's, else
    ``TransformerConfig``'s default); the limit without a model when the model is yet to
    be chosen from the data (``preset = "data"``) or the setting is not a whole number
    (refused when the model is configured)."""
    preset = model.get("preset")
    if preset == "data":
        return NO_MODEL
    default = PRESETS.get(preset, {}).get("max_len", TransformerConfig.max_len)
    max_len = model.get("max_len", default)
    ok = isinstance(max_len, int) and not isinstance(max_len, bool) and max_len >= 1
    return LineLimit(max_len if ok else None)


class Task:
    """Base class; see the module doc. Subclasses set ``Settings``, ``config``, ``kinds``
    (the ``[task] name`` values they serve) and implement the data-specific methods."""

    Settings: type
    config: str  # the shipped config holding this task's defaults
    kinds: tuple = ()
    target_pad: bool = True  # targets are padded with pad_id (False: one label per row)

    def __init__(self, settings, lines: LineLimit = NO_MODEL):
        self.settings, self.lines = settings, lines
        self.name = settings.name
        self.tokenizer = None
        self.model_config: TransformerConfig | None = None

    # -- the model ---------------------------------------------------------------------------
    def configure(self, model: dict, seed: int) -> TransformerConfig:
        """The model configuration of a run: ``model["preset"]`` (if any), then the other
        ``[model]`` keys, then the vocabulary's size and special ids; ``seed`` initialises
        the model unless ``[model]`` sets its own."""
        m = dict(model)
        preset = m.pop("preset", None)
        if preset is not None and preset not in PRESETS:
            raise ConfigError(f"unknown model preset {preset!r}: expected one of {sorted(PRESETS)}")
        given = sorted(k for k in TOKENIZER_KEYS if k in m)
        need(not given, f"model.{', model.'.join(given)} is set by the tokenizer, not the config")
        kwargs = {**(PRESETS[preset] if preset else {}), **m}
        kwargs.setdefault("seed", seed)
        kwargs.update(
            vocab_size=len(self.tokenizer.vocab),
            pad_id=Vocab.pad_id,
            bos_id=Vocab.bos_id,
            eos_id=Vocab.eos_id,
        )
        try:
            self.model_config = TransformerConfig(**kwargs)
        except (TypeError, ValueError) as e:  # the config's own words, without its class name
            msg = str(e).removeprefix("invalid TransformerConfig: ")
            raise ConfigError(f"[model]: {msg}") from None
        return self.model_config

    def model_spec(self) -> dict:
        """``{"class": ..., ...}``: the model this task trains (``models.sizes``)."""
        raise NotImplementedError

    def build_model(self, config: TransformerConfig):
        """The model of ``model_spec()`` for ``config``, its parameters initialised."""
        return build_model(self.model_spec(), config)

    # -- data --------------------------------------------------------------------------------
    def examples(self, split: str) -> list:
        """The encoded examples of a split."""
        raise NotImplementedError

    def fingerprint(self) -> str:
        """SHA-256 (16 hex digits) of the encoded training examples, in order: a resumed
        run refuses other data, which would change what its batches hold."""
        if getattr(self, "_fingerprint", None) is None:
            h = hashlib.sha256()
            for example in self.examples("train"):
                for part in example if isinstance(example, tuple) else (example,):
                    raw = backend.np.asarray(part)
                    h.update(f"{raw.dtype}{raw.shape};".encode())
                    h.update(raw.tobytes() if raw.dtype.kind != "U" else str(part).encode())
            self._fingerprint = h.hexdigest()[:16]
        return self._fingerprint

    def widths(self, split: str):
        raise NotImplementedError

    def batch(self, split: str, indices) -> TaskBatch:
        raise NotImplementedError

    def sizes(self) -> dict:
        return {s: len(self.examples(s)) for s in ("train", "valid", "test")}

    # -- evaluation --------------------------------------------------------------------------
    def evaluate(
        self, model, split: str, max_tokens: int, limit=0, predictions=False, progress=None
    ):
        """Teacher-forced metrics of ``model`` on the first ``limit`` examples of ``split``
        (0: all), dropout off; see ``scratchformer.app.train.evaluation.teacher_forced``.
        With ``predictions`` (tasks with one label per row): ``(metrics, argmax, labels)``,
        both host (N,) arrays in the order of the examples. ``progress``: called with the
        number of examples of each batch once it is evaluated."""
        np = backend.np
        widths = self.widths(split)
        if limit:
            widths = widths[:limit]
        order = fixed_batches(widths, max(max_tokens, int(widths.max())))

        def batches():
            for idx in order:
                yield self.batch(split, idx)
                if progress is not None:  # the caller asks for the next: this one is done
                    progress(len(idx))

        pad = model.config.pad_id if self.target_pad else None
        out = teacher_forced(model, batches(), model.config.eps_ls, pad, predictions)
        if not predictions:
            out["examples"] = len(widths)
            return out
        m, (pred, gold) = out
        m["examples"] = len(widths)
        where = np.concatenate(order)  # batches go in length order: put rows back
        in_order = np.empty_like(pred), np.empty_like(gold)
        in_order[0][where], in_order[1][where] = pred, gold
        return m, *in_order

    def test(self, model, max_tokens: int, examples: int, seed: int, progress=None, world=None):
        """``(metrics, [example])`` of ``model`` on the test set; the base class reports
        the teacher-forced metrics and no examples. ``progress``: called with the amount
        of work done as a long stage (decoding) advances. ``world``: the ranks that judge
        together (``distributed.World``; one process when None): a task may share the
        work among them, and every rank returns the same result."""
        return self.evaluate(model, "test", max_tokens), []

    # -- reporting ---------------------------------------------------------------------------
    #: metric keys shown (in this order) in the step lines, after a validation and for
    #: the test set
    shown_train: tuple = ("loss", "ppl")
    shown_valid: tuple = ("loss", "ppl")
    #: the dev metrics ``train.best_metric`` may name for this task (``train.best``)
    best_metrics: tuple = ("nll",)
    shown_test: tuple = ("loss", "ppl")

    def dev_scores(self, model, limit: int = 0, progress=None, world=None) -> dict:
        """The dev metrics that need decoding (``train.best_metric`` "bleu" or "chrf"):
        none for a task that has none."""
        return {}

    def attention_example(self):
        """``(source ids, target ids)`` of a short dev pair whose attention a run draws
        at each validation (``train.tensorboard``), or None for a model without
        encoder-decoder attention."""
        return None

    def format_example(self, example) -> str:
        return f"  {example}"

    def meta(self) -> dict:
        return {"task": self.name, "tokenizer": self.tokenizer.to_dict()}

    def notes(self) -> list[str]:
        """Lines about the data worth printing once at the start."""
        return []


def pad_rows(rows, pad_id: int):
    """Lists of ids -> (B, T) host int64 array right-padded with ``pad_id``."""
    np = backend.np
    T = max(len(r) for r in rows)
    a = np.full((len(rows), T), pad_id, dtype=np.int64)
    for i, r in enumerate(rows):
        a[i, : len(r)] = r
    return a


__all__ = [
    "TOKENIZER_KEYS",
    "Task",
    "TaskBatch",
    "check_decoding",
    "check_settings",
    "pad_rows",
]
