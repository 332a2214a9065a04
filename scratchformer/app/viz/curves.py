"""Curves and tables: positional encodings, the warmup schedule, training curves read
from a run's metrics.jsonl.

Dimension key: ``L`` positions, ``D`` d_model.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from scratchformer.app.data.text import iter_text_lines, not_a_file
from scratchformer.app.viz.figure import DPI, PlotError, new_figure, png_path, save_png
from scratchformer.engine import backend
from scratchformer.engine.optim.schedule import NoamSchedule


# -- positions -----------------------------------------------------------------------------
def _wavelength_dims(D: int) -> list[int]:
    """Even (sine) dimensions spread over the table: 0, D/8, D/4, D/2, as even indices."""
    return sorted({2 * ((D * k) // 16) for k in (0, 1, 2, 4)} & set(range(0, D, 2)))


def plot_positional(table, path, *, title: str | None = None, dims=None, sinusoidal=True) -> Path:
    """The position table ``table`` (L, D) as a heat map (positions down, dimensions across),
    and under it a few dimensions drawn as curves along the positions.

    The colour scale is symmetric around 0 (blue negative, red positive); for sinusoids it
    is exactly [-1, 1]. ``dims``: the dimensions drawn as curves (default: the sines at
    0, D/8, D/4 and D/2, whose wavelengths grow geometrically from 2 pi to 10000 * 2 pi).
    """
    png_path(path)
    np = backend.np
    P = np.asarray(backend.asnumpy(table), dtype=np.float64)
    if P.ndim != 2 or P.size == 0:
        raise PlotError(
            f"a position table must be a non-empty (positions, d_model) array, got {P.shape}"
        )
    L, D = P.shape
    dims = _wavelength_dims(D) if dims is None else [d for d in dims if 0 <= d < D]
    lim = float(np.abs(P).max()) or 1.0
    # At least 2 pixels per dimension, so neighbouring sin/cos columns do not alias.
    width = max(10.0, min(2 * D, 1400) / DPI + 2.4)
    fig = new_figure(width, 8.5)
    grid = fig.add_gridspec(
        2,
        2,
        height_ratios=[1.35, 1],
        width_ratios=[1, 0.018],
        left=0.8 / width,
        right=1 - 0.9 / width,
        bottom=0.14,
        top=0.9,
        hspace=0.35,
        wspace=0.03,
    )
    ax = fig.add_subplot(grid[0, 0])
    im = ax.imshow(P, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto", interpolation="nearest")
    ax.set_xlabel("dimension of the encoding (0 .. d_model - 1)")
    ax.set_ylabel("position in the sequence")
    if sinusoidal:
        ax.set_title(
            "even dimensions 2i: sin(pos / 10000^(2i/d_model)), "
            "odd dimensions 2i+1: cos(same angle)",
            fontsize=10,
        )
    fig.colorbar(im, cax=fig.add_subplot(grid[0, 1])).set_label("value added to the embedding")
    ax2 = fig.add_subplot(grid[1, 0])
    for d in dims:
        label = f"dimension {d}"
        if sinusoidal:
            wavelength = 2 * math.pi * 10000 ** ((d - d % 2) / D)
            label += f": {'sin' if d % 2 == 0 else 'cos'}, wavelength {wavelength:.3g} positions"
        ax2.plot(np.arange(L), P[:, d], label=label, linewidth=1.6)
    ax2.set_xlabel("position in the sequence")
    ax2.set_ylabel("value")
    ax2.set_xlim(0, max(L - 1, 1))
    ax2.grid(alpha=0.3)
    if dims:
        ax2.legend(
            loc="upper center",
            bbox_to_anchor=(0.5, -0.16),
            ncol=min(len(dims), 2),
            fontsize=9,
            frameon=False,
        )
        ax2.set_title("a few dimensions along the positions", fontsize=10)
    fig.suptitle(title or f"positional encoding: {L} positions x d_model = {D}", fontsize=12)
    return save_png(fig, path)


# -- learning-rate schedule ------------------------------------------------------------------
def plot_schedule(curves, path, *, steps: int = 20000, title: str | None = None) -> Path:
    """``lr(s) = lr_factor * d_model^-0.5 * min(s^-0.5, s * warmup^-1.5)`` for s = 1 .. steps,
    one curve per ``(d_model, warmup, lr_factor)``; each peak (at s = warmup) is marked."""
    png_path(path)
    np = backend.np
    curves = list(curves)
    if not curves:
        raise PlotError("give at least one (d_model, warmup, lr_factor) curve")
    if steps < 2:
        raise PlotError(f"steps must be at least 2, got {steps}")
    fig = new_figure(9, 5.5)
    ax = fig.add_subplot(1, 1, 1)
    s = np.unique(np.linspace(1, steps, min(steps, 2000)).round().astype(np.int64))
    # Curves with the same d_model and lr_factor decay along the same 1/sqrt(s) line after
    # their warmups: a dash pattern per warmup keeps the one underneath visible.
    warmups = sorted({int(w) for _, w, _ in curves})
    dashes = ["-", "--", ":", "-."]
    for d_model, warmup, lr_factor in curves:
        sched = NoamSchedule(int(d_model), int(warmup), float(lr_factor))
        lr = np.array([sched(int(k)) for k in s])
        label = f"d_model={d_model}, warmup={warmup}" + (
            f", lr_factor={lr_factor:g}" if lr_factor != 1 else ""
        )
        style = dashes[warmups.index(int(warmup)) % len(dashes)]
        (line,) = ax.plot(s, lr, style, label=label, linewidth=2)
        if warmup <= steps:
            ax.plot([warmup], [sched.peak], "o", color=line.get_color())
            ax.annotate(
                f"{sched.peak:.2e}",
                (warmup, sched.peak),
                textcoords="offset points",
                xytext=(6, 4),
                fontsize=8,
                color=line.get_color(),
            )
    ax.set_xlabel("optimizer step s")
    ax.set_ylabel("learning rate")
    ax.set_xlim(0, steps)
    ax.set_ylim(bottom=0)
    ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=9)
    ax.set_title(
        title
        or "lr = lr_factor * d_model^-0.5 * min(s^-0.5, s * warmup^-1.5): linear warmup, "
        "then 1/sqrt(s) decay",
        fontsize=10,
    )
    return save_png(fig, path)


# -- training curves ----------------------------------------------------------------------------
#: panel -> [(record kind, key, legend label)]. The metrics log of ``scratchformer.app.train``
#: holds "train" records (loss, lr, ...) and "valid" records (loss, nll, ppl, accuracies,
#: bleu for translation); a record without "kind" counts as "train".
CURVE_PANELS = {
    "loss per target token": [
        ("train", "loss", "train loss (label-smoothed)"),
        ("valid", "loss", "valid loss (label-smoothed)"),
        ("valid", "nll", "valid NLL (no smoothing)"),
    ],
    "perplexity": [
        ("train", "ppl", "train perplexity"),
        ("valid", "ppl", "valid perplexity = exp(NLL)"),
    ],
    "learning rate": [("train", "lr", "learning rate")],
    "BLEU": [("valid", "bleu", "valid BLEU"), ("train", "bleu", "BLEU")],
    "accuracy": [
        ("valid", "token_acc", "valid token accuracy"),
        ("valid", "seq_acc", "valid exact-sequence accuracy"),
    ],
}


def read_metrics(path) -> list[dict]:
    """The records of a metrics log: one JSON object per line (blank lines skipped).

    Read by ``iter_text_lines`` (UTF-8, lines end at ``\\n``). Raises PlotError naming
    the file for a missing file, a line that is not a JSON object, or a log with no
    records (``TextEncodingError`` for bytes that are not UTF-8).
    """
    path = Path(path)
    why = not_a_file(path)
    if why:
        raise PlotError(f"no metrics log at {path}" if why == "not found" else f"{path} {why}")
    records = []
    for n, line in iter_text_lines(path):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise PlotError(f"{path} line {n} is not JSON: {e}") from None
        if not isinstance(rec, dict):
            raise PlotError(f"{path} line {n} is not a JSON object")
        records.append(rec)
    if not records:
        raise PlotError(f"the metrics log {path} is empty: nothing to plot")
    return records


def _series(records, kind, key):
    """``(steps, values)`` of ``key`` in records of ``kind`` with a numeric step, or None."""
    pts = []
    for r in records:
        if r.get("kind", "train") != kind:
            continue
        x, y = r.get("step"), r.get(key)
        if isinstance(x, (int, float)) and isinstance(y, (int, float)) and math.isfinite(y):
            pts.append((x, y))
    return ([p[0] for p in pts], [p[1] for p in pts]) if pts else None


def plot_curves(records, path, *, title: str | None = None) -> Path:
    """Loss, perplexity, learning rate, BLEU and accuracy against the step, one panel each,
    from metrics-log records (dicts with a ``"step"``, a ``"kind"`` and the keys in
    ``CURVE_PANELS``). Panels with no data are left out; nothing to draw is a PlotError."""
    png_path(path)
    panels = []
    for panel, keys in CURVE_PANELS.items():
        drawn = []
        for kind, key, label in keys:
            xy = _series(records, kind, key)
            if xy:
                drawn.append((label, xy))
        if drawn:
            panels.append((panel, drawn))
    if not panels:
        known = sorted({f"{kind}:{k}" for keys in CURVE_PANELS.values() for kind, k, _ in keys})
        raise PlotError(
            "no plottable metrics: records need a numeric 'step' and one of these "
            f"kind:key pairs: {known}"
        )
    last_step = max(x[-1] for _, drawn in panels for _, (x, _) in drawn)
    n = len(panels)
    ncols = 2 if n > 1 else 1
    nrows = math.ceil(n / ncols)
    fig = new_figure(6 * ncols, 3.6 * nrows + 0.5)
    for i, (panel, drawn) in enumerate(panels):
        ax = fig.add_subplot(nrows, ncols, i + 1)
        for label, (x, y) in drawn:
            ax.plot(
                x, y, label=label, linewidth=1.6, marker="o" if len(x) < 30 else None, markersize=3
            )
        ax.set_title(panel, fontsize=11)
        ax.set_xlabel("optimizer step")
        ax.set_xlim(0, last_step * 1.02)  # the same steps in every panel
        if panel == "perplexity" and max(max(y) for _, (_, y) in drawn) > 50:
            ax.set_yscale("log")
        if panel == "learning rate":
            ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
            ax.set_ylim(bottom=0)
        if panel == "accuracy":
            ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title or "training curves", fontsize=12)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    return save_png(fig, path)
