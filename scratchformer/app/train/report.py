"""What a run prints: one format for every task.

    training <name>: task <task>, <n> train / <n> dev / <n> test examples, vocabulary V
    model: <class>, <n> parameters (N=.., d_model=.., h=.., <attention> attention)
    plan: <steps> steps of <= <max_tokens> tokens x <accum>[, shared by <R> processes],
          <batches> batches/epoch -> <dir>
    loss: label-smoothed (eps_ls 0.1), the objective; nll: without smoothing, ppl = exp(nll)
    step   50/3000 | loss 2.3456 | nll 2.1234 | ppl 8.36 | lr 1.23e-04 | grad norm 0.812 | ...
    step  500/3000 | dev | loss 0.4321 | nll 0.2345 | ppl 1.26 | token acc 95.12% | ...
    ...
    test set: <examples>, then one line per model (last checkpoint, average)
    done: <steps> steps in <time> (<tokens/s>), then every file written

and what a run returns (``TrainResult``).

The periodic line is printed every ``log_every`` steps when there is no progress bar
(with one, its fields are the bar's postfix); every other line always. With label
smoothing the loss trained is not the cross-entropy a perplexity is the exp of: both
are shown, side by side (``nll``), and the header says which is which.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from scratchformer.app.progress import Ticker, clock, progress_bar, time_left
from scratchformer.engine import backend


@dataclass
class TrainResult:
    step: int  # optimizer steps done in total
    losses: list  # [(step, training loss)] of the steps run in this call
    valid: list  # validation records of this call
    test: dict | None  # test metrics of the final model (checkpoints/final.npz)
    examples: list  # the final model's test examples (task-specific tuples or texts)
    checkpoint: Path | None  # the last checkpoint written
    run_dir: Path
    elapsed: float  # seconds spent in this call
    stopped: str = ""  # why the run stopped before train.steps ("" if it did not)
    files: list = field(default_factory=list)  # every file of the run directory it wrote


def progress_line(s: int, first: int, steps: int, here: float, before: float, train) -> str:
    """``  training: step/steps (elapsed, about <time> left)`` at step ``s``: the run's
    wall time (``before`` this process, for a resumed run, as the step lines count it,
    plus ``here``) and the time left at this process's rate since its first step
    ``first``, or until ``train.time_limit`` when that comes first."""
    left = time_left(here, s - first, steps - first)
    if train.time_limit:
        left = min(left, max(train.time_limit - here, 0.0))
    return f"  training: {s}/{steps} ({clock(before + here)}, about {clock(left)} left)"


def _pct(x) -> str:
    return f"{100 * x:.2f}%"


def _num(x) -> str:
    """A loss-like number: 4 decimals, or 4 significant digits when huge (a diverging
    run's perplexity must not print 300 digits)."""
    if not math.isfinite(x):
        return str(x)
    return f"{x:.4f}" if abs(x) < 1e4 else f"{x:.4g}"


#: metric key -> (label, format)
FORMATS = {
    "loss": ("loss", _num),
    "nll": ("nll", _num),
    "ppl": (
        "ppl",
        lambda x: "beyond 1e308" if x is None else f"{x:.3f}" if x < 1e4 else f"{x:.3g}",
    ),
    "bpc": ("bits/char", _num),
    "token_acc": ("token acc", _pct),
    "seq_acc": ("seq acc", _pct),
    "seq_acc_decoded": ("exact match", _pct),
    "accuracy": ("accuracy", _pct),
    "majority_baseline": ("training set's majority class", _pct),
    "largest_class": ("this set's largest class", _pct),
    "bleu": ("BLEU", lambda x: f"{x:.2f}"),
    "chrf": ("chrF", lambda x: f"{x:.2f}"),
}


def metrics_text(m: dict, keys, smoothed: bool = False) -> str:
    """``loss 0.4321 | ppl 1.54 | ...`` for the ``keys`` present in ``m``; ``smoothed``:
    the loss is label-smoothed, and the NLL follows it."""
    if smoothed and "loss" in keys and "nll" not in keys:
        keys = [x for k in keys for x in ((k, "nll") if k == "loss" else (k,))]
    parts = []
    for k in keys:
        if k in m and m[k] is not None:
            label, fmt = FORMATS[k]
            which = {"majority_baseline": "majority_class", "largest_class": "largest_class_name"}
            which = f" ('{m[which[k]]}')" if k in which and which[k] in m else ""
            parts.append(f"{label} {fmt(m[k])}{which}")
    if "decode" in m:
        parts.append(f"decoding {m['decode']}")
    return " | ".join(parts)


def step_prefix(step: int, steps: int) -> str:
    return f"step {step:>{len(str(steps))}}/{steps}"


def train_line(rec: dict, steps: int, smoothed: bool = False, keys=("loss", "ppl")) -> str:
    """The periodic line of a "train" record of metrics.jsonl: its ``keys`` (the task's
    ``shown_train``; ``smoothed``: see ``metrics_text``), the learning rate, the gradient
    norm and the speed; in mixed precision, the loss scale and the steps it skipped."""
    scaling = ""
    if "loss_scale" in rec:
        scaling = f"loss scale {rec['loss_scale']:.3g}, {rec['skipped_steps']} skipped | "
    return (
        f"{step_prefix(rec['step'], steps)} | "
        f"{metrics_text(rec, keys, smoothed) or 'no loss: every step skipped'} | "
        f"lr {rec['lr']:.2e} | "
        f"grad norm {rec['grad_norm']:.3g} | {scaling}{rec['tokens_per_s']:,.0f} tok/s | "
        f"{clock(rec['elapsed'])}"
    )


def valid_line(step: int, steps: int, m: dict, keys, smoothed: bool = False) -> str:
    return f"{step_prefix(step, steps)} | dev | {metrics_text(m, keys, smoothed)}"


def loss_note(eps_ls: float) -> list[str]:
    """The header's line saying what the loss shown is, when it is not the NLL."""
    if not eps_ls:
        return []
    return [
        f"loss: label-smoothed cross-entropy (eps_ls {eps_ls:g}), the objective trained; "
        "nll: without smoothing, ppl = exp(nll)"
    ]


def header(
    cfg, task, model, batches_per_epoch: int, run_dir, ranks: int = 1, seconds_before=0.0
) -> list[str]:
    """The run's first lines: the task and data, the model, the plan (steps, batches, the
    time limit: of this process's training, so a resumed run, ``seconds_before`` into
    it, says so) and what the loss shown is."""
    sizes = task.sizes()
    mc = model.config
    t = cfg.train
    attn = mc.attention
    accum = f" x {t.accum_steps} micro-batches" if t.accum_steps > 1 else ""
    limit = f", at most {t.time_limit:g} s" if t.time_limit else ""
    if t.time_limit and seconds_before:
        limit += f" more (the run trained {clock(seconds_before)} before this resume)"
    if ranks > 1:
        each = (
            f"{t.threads} BLAS thread{'s' if t.threads > 1 else ''}"
            if t.threads
            else "BLAS's threads"
        )
        limit += f", shared by {ranks} processes ({each} each)"
    return [
        f"training {cfg.name}: task {task.name}, {sizes['train']} train / {sizes['valid']} "
        f"dev / {sizes['test']} test examples, vocabulary {mc.vocab_size}",
        f"model: {type(model).__name__}, {model.num_parameters():,} parameters "
        f"(N={mc.N}, d_model={mc.d_model}, h={mc.h}, {attn} attention)",
        f"plan: {t.steps} step{'s' if t.steps != 1 else ''} of <= {t.max_tokens} tokens"
        f"{accum}{limit}, "
        f"{batches_per_epoch} batches/epoch -> {run_dir}",
        *loss_note(mc.eps_ls),
        *best_note(t, sizes["valid"]),
        *precision_note(t, backend.backend_name()),
    ]


def best_note(t, n_valid: int) -> list[str]:
    """The header's line on the best checkpoint and early stopping, unless both are the
    defaults (best.npz by dev nll, no early stopping)."""
    if t.best_metric == "nll" and not t.patience:
        return []
    how = {"nll": "dev nll", "accuracy": "dev accuracy"}.get(t.best_metric, "")
    if not how:
        n = min(n_valid, t.best_sentences or n_valid)
        how = f"dev {'BLEU' if t.best_metric == 'bleu' else 'chrF'} (greedy, {n} dev sentences)"
    stop = f", stopping after {t.patience} validations without a better one" if t.patience else ""
    return [f"best: checkpoints/best.npz by {how}{stop}"]


#: float16's step time over float32's on NumPy, measured: the default task (reverse, N=2,
#: d_model 64), 150 steps each, alternated twice, CPU time of one BLAS thread
#: (2026-11-28, 2-core AMD EPYC, shared: 3.59x in CPU time, 3.49x in wall time)
FLOAT16_ON_NUMPY = 3.6


def precision_note(t, backend_name: str = "numpy") -> list[str]:
    """The header's line on mixed precision, when the run uses it; on NumPy, whose float16
    is emulated in software, a second line saying so and what it costs."""
    if t.precision == "float32":
        return []
    lines = [
        f"precision: {t.precision} activations, float32 master weights and Adam; dynamic "
        f"loss scale from {t.loss_scale:g} (doubled after {t.loss_scale_window} good steps)"
    ]
    if backend_name == "numpy":
        lines.append(
            "  float16 on NumPy is emulated (float16 operands, float32 sums: no float16 "
            "matrix products on a CPU): it shows mixed precision's numerics, not its speed; "
            f"a step takes about {FLOAT16_ON_NUMPY:g}x float32's (measured on the default task)"
        )
    return lines


def files_written(
    run_dir: Path, checkpoints: list, averaged: tuple, final=None, best=None, more=()
) -> list[str]:
    """The closing list of every file of the run directory this run wrote or kept;
    ``averaged``: ``(path, steps)`` of the average (path None: none was made); ``final``:
    the run's ``train.final.Final`` (None: not chosen, the run judged nothing at its
    end); ``best``: its ``train.best.Best``; ``more``: its best files and TensorBoard
    event files."""
    lines = [f"files in {run_dir}:", "  config.json        the resolved configuration"]
    lines.append("  metrics.jsonl      one JSON record per log line, validation and test")
    if checkpoints:
        names = [p.name for p in checkpoints]
        shown = names[0] if len(names) == 1 else f"{names[0]} ... {names[-1]}"
        lines.append(
            f"  checkpoints/{shown}  ({len(names)} kept: parameters, Adam's moments, the "
            "position in the data, for --resume)"
        )
    path, steps = averaged
    if path is not None:
        lines.append(
            f"  checkpoints/{path.name}  the average of the checkpoints of steps "
            f"{', '.join(map(str, steps))} (parameters only)"
        )
    if final is not None and final.path is not None:
        lines.append(
            f"  checkpoints/{final.path.name}     the final model: {final.describe()} "
            "(parameters only; translate, evaluate and generate take it)"
        )
    names = {"best.npz": best.metric if best else "", "best_nll.npz": "nll"}
    for p in [p for p in more if p.name in names]:
        b = best.best.get(names[p.name]) if best else None
        at = f" (step {b['step']})" if b else ""
        lines.append(
            f"  checkpoints/{p.name}  the best model by dev {names[p.name]}{at} (parameters only)"
        )
    events = [p for p in more if p.name not in names]
    if events:
        n = len(events)
        lines.append(
            f"  {events[0].name if n == 1 else f'events.out.tfevents.* ({n})'}  TensorBoard's "
            f"event file{'s' if n > 1 else ''}, one per session of the run: tensorboard "
            f"--logdir {run_dir.parent}"
        )
    return lines


@dataclass
class Show:
    """How a run shows its long stages: ``progress`` bars, or lines through ``echo``."""

    progress: bool
    echo: Callable

    def staged(self, what: str, total: int, stage):
        """``stage(tick)`` with its progress shown (``tick(n)``: n more examples done): a
        progress bar, or without one a line every 10 s, so no stage is a silent stretch."""
        if self.progress:
            counter = progress_bar(total, what, "example")
        else:
            counter = Ticker(total, what, self.echo)
        try:
            return stage(counter.update)
        finally:
            counter.close()


__all__ = [
    "FORMATS",
    "Show",
    "TrainResult",
    "clock",
    "files_written",
    "header",
    "loss_note",
    "metrics_text",
    "train_line",
    "valid_line",
]
