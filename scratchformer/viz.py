"""Pictures for study: attention maps, positional encodings, the warmup schedule, curves.

    maps = attention_maps(model, src_ids, tgt_ids)          # weights from the backward caches
    plot_attention(maps, "attention_cross.png", kind="cross", src_tokens=..., tgt_tokens=...)
    plot_positional(sinusoidal_table(100, 512), "positional.png")
    plot_schedule([(512, 4000, 1.0), (512, 8000, 1.0)], "schedule.png", steps=20000)
    plot_curves(read_metrics("metrics.jsonl"), "curves.png")

Every function writes a PNG and returns its path. matplotlib is an optional extra
(``pip install 'scratchformer[plot]'``), imported only when a plot is drawn. Figures are
built with ``matplotlib.figure.Figure`` on the Agg canvas, never through pyplot, so no
display is needed and a user's interactive backend is left alone.

Dimension key: ``H`` heads, ``S`` source length, ``T`` target length, ``L`` positions,
``D`` d_model.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path

from scratchformer import backend
from scratchformer.errors import ScratchformerError

__all__ = [
    "ATTENTION_KINDS",
    "AttentionMaps",
    "PlotError",
    "attention_maps",
    "display_tokens",
    "plot_attention",
    "plot_curves",
    "plot_positional",
    "plot_schedule",
    "png_size",
    "read_metrics",
]

DPI = 100
MAX_PIXELS = 40_000_000  # an attention figure larger than this is refused, not drawn


class PlotError(ScratchformerError):
    """A plot cannot be drawn from the arguments given (unknown head, empty log, ...)."""


def _figure(width: float, height: float):
    """A Figure on an Agg canvas (no display, no pyplot); a clear error without matplotlib."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415
        from matplotlib.figure import Figure  # noqa: PLC0415
    except ImportError:
        raise PlotError(
            "plots need matplotlib: pip install 'scratchformer[plot]' (or pip install matplotlib)"
        ) from None
    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def _png_path(path) -> Path:
    path = Path(path)
    if path.suffix.lower() != ".png":
        raise PlotError(f"plots are written as PNG: {path} should end in .png")
    return path


def _save(fig, path) -> Path:
    path = _png_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, format="png")
    return path


def png_size(path) -> tuple[int, int]:
    """``(width, height)`` in pixels from a PNG's IHDR chunk; PlotError if not a PNG."""
    with open(path, "rb") as f:
        head = f.read(24)
    if len(head) < 24 or head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        raise PlotError(f"{path} is not a PNG file")
    return struct.unpack(">II", head[16:24])


# -- attention ----------------------------------------------------------------------------
#: kind -> (title, query axis, key axis)
ATTENTION_KINDS = {
    "encoder": ("encoder self-attention", "source (query)", "source (key)"),
    "decoder": ("decoder masked self-attention", "decoder input (query)", "decoder input (key)"),
    "cross": ("encoder-decoder (cross) attention", "query (the token it predicts)", "source (key)"),
}


@dataclass
class AttentionMaps:
    """Attention weights of one sentence pair, per layer, as host arrays.

    ``encoder[i]`` (H, S, S), ``decoder[i]`` (H, T, T), ``cross[i]`` (H, T, S): row =
    query, column = key, each row sums to 1. The decoder's queries are the positions of
    ``tgt_in`` = <bos> y_1 ... y_n, where position t predicts ``tgt_out[t]``.
    """

    encoder: list
    decoder: list
    cross: list

    def layers(self, kind: str) -> list:
        if kind not in ATTENTION_KINDS:
            raise PlotError(
                f"unknown attention kind {kind!r}: expected one of {list(ATTENTION_KINDS)}"
            )
        return getattr(self, kind)

    @property
    def heads(self) -> int:
        return int(self.decoder[0].shape[0])


def attention_maps(model, src_ids, tgt_in_ids) -> AttentionMaps:
    """Run ``model`` (evaluation: no dropout) on one sentence pair and collect the weights.

    ``src_ids`` (S,) and ``tgt_in_ids`` (T,) are sequences of ids, ``tgt_in`` starting with
    <bos>. The weights are the softmax outputs kept in the backward caches
    (``cache.encoder.layers[i].self_attn.sublayer.attn.softmax.P``).
    """
    np = backend.np
    src = backend.asarray(np.asarray(src_ids, dtype=np.int64)[None, :])  # (1, S)
    tgt = backend.asarray(np.asarray(tgt_in_ids, dtype=np.int64)[None, :])  # (1, T)
    _, cache = model.forward(src, tgt)

    def weights(sub):
        return backend.asnumpy(sub.sublayer.attn.softmax.P)[0].astype(np.float64)  # (H, ., .)

    return AttentionMaps(
        encoder=[weights(c.self_attn) for c in cache.encoder.layers],
        decoder=[weights(c.self_attn) for c in cache.decoder.layers],
        cross=[weights(c.cross_attn) for c in cache.decoder.layers],
    )


def display_tokens(tokens) -> list[str]:
    """Tick labels: a space shown as an open box, long tokens shortened to 12 characters."""
    out = []
    for t in tokens:
        t = str(t).replace(" ", "\u2423").replace("\n", "\\n") or "''"
        out.append(t if len(t) <= 12 else t[:11] + "\u2026")
    return out


def _pick(n: int, wanted, what: str, unit: str) -> list[int]:
    """Indices to draw: all of ``range(n)``, or the ones asked for, checked."""
    if wanted is None:
        return list(range(n))
    wanted = [wanted] if isinstance(wanted, int) else list(wanted)
    for i in wanted:
        if not 0 <= i < n:
            raise PlotError(f"unknown {unit} {i}: {what} has {n} {unit}s (0 to {n - 1})")
    return wanted


def plot_attention(
    maps: AttentionMaps,
    path,
    *,
    kind: str,
    src_tokens,
    tgt_in_tokens,
    tgt_out_tokens,
    layers=None,
    heads=None,
    title: str | None = None,
) -> Path:
    """One heat map per (layer, head) of one attention kind: rows = layers, columns = heads.

    ``kind``: "encoder" (S x S), "decoder" (T x T, the causal triangle), "cross" (T x S).
    Decoder queries are labelled with their input token; cross-attention queries with the
    token they predict (so a copy or an alignment shows as a diagonal). The colour scale is
    the attention weight, fixed to [0, 1] in every panel so panels compare directly.
    """
    _png_path(path)
    per_layer = maps.layers(kind)
    if not per_layer:
        raise PlotError(f"the model has no {ATTENTION_KINDS[kind][0]} layers (N = 0)")
    layer_ids = _pick(len(per_layer), layers, f"the {kind}", "layer")
    head_ids = _pick(int(per_layer[0].shape[0]), heads, "each layer", "head")
    name, ylabel, xlabel = ATTENTION_KINDS[kind]
    src, t_in, t_out = (display_tokens(t) for t in (src_tokens, tgt_in_tokens, tgt_out_tokens))
    rows = {"encoder": src, "decoder": t_in, "cross": t_out}[kind]
    cols = src if kind in ("encoder", "cross") else t_in
    n_q, n_k = per_layer[0].shape[1:]
    if (len(rows), len(cols)) != (n_q, n_k):
        raise PlotError(
            f"{len(rows)} x {len(cols)} token labels for {n_q} x {n_k} attention weights"
        )

    # Size each panel by its token count so tick labels stay legible (about 0.22 in a token).
    cell = 0.22
    pw, ph = max(2.4, n_k * cell + 0.6), max(2.0, n_q * cell + 0.4)
    label_w = 0.12 * max(len(str(t)) for t in rows) + 0.9
    label_h = 0.075 * max(len(str(t)) for t in cols) + 0.55
    nr, nc = len(layer_ids), len(head_ids)
    W = label_w + nc * pw + 1.1
    H = label_h + nr * ph + 0.8
    if W * H * DPI**2 > MAX_PIXELS:
        raise PlotError(
            f"{nr} layers x {nc} heads of {n_q} x {n_k} tokens would make a "
            f"{int(W * DPI)} x {int(H * DPI)} pixel image: pick some with --layer/--head "
            "(layers=/heads=) or use a shorter sentence"
        )
    fig = _figure(W, H)
    fontsize = 9 if max(n_q, n_k) <= 30 else 7
    left, bottom = label_w / W, label_h / H
    grid = fig.add_gridspec(
        nr,
        nc,
        left=left,
        right=1 - 1.0 / W,
        bottom=bottom,
        top=1 - 0.8 / H,
        wspace=0.08,
        hspace=0.15,
    )
    image = None
    for r, li in enumerate(layer_ids):
        for c, hi in enumerate(head_ids):
            ax = fig.add_subplot(grid[r, c])
            A = per_layer[li][hi]  # (queries, keys)
            image = ax.imshow(
                A, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest"
            )
            ax.set_xticks(range(n_k))
            ax.set_yticks(range(n_q))
            if r == nr - 1:
                ax.set_xticklabels(cols, rotation=90, fontsize=fontsize)
                ax.set_xlabel(xlabel, fontsize=9)
            else:
                ax.set_xticklabels([])
            if c == 0:
                ax.set_yticklabels(rows, fontsize=fontsize)
                ax.set_ylabel(f"layer {li}\n{ylabel}", fontsize=9)
            else:
                ax.set_yticklabels([])
            ax.tick_params(length=0)
            if r == 0:
                ax.set_title(f"head {hi}", fontsize=10)
    cax = fig.add_axes([1 - 0.85 / W, bottom, 0.18 / W, 1 - bottom - 0.8 / H])
    bar = fig.colorbar(image, cax=cax)
    bar.set_label("attention weight (each row sums to 1)", fontsize=9)
    fig.suptitle(title or name, fontsize=12, y=1 - 0.25 / H, va="top")
    return _save(fig, path)


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
    _png_path(path)
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
    fig = _figure(width, 8.5)
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
    return _save(fig, path)


# -- learning-rate schedule ------------------------------------------------------------------
def plot_schedule(curves, path, *, steps: int = 20000, title: str | None = None) -> Path:
    """``lr(s) = lr_factor * d_model^-0.5 * min(s^-0.5, s * warmup^-1.5)`` for s = 1 .. steps,
    one curve per ``(d_model, warmup, lr_factor)``; each peak (at s = warmup) is marked."""
    _png_path(path)
    from scratchformer.optim.schedule import NoamSchedule  # noqa: PLC0415

    np = backend.np
    curves = list(curves)
    if not curves:
        raise PlotError("give at least one (d_model, warmup, lr_factor) curve")
    if steps < 2:
        raise PlotError(f"steps must be at least 2, got {steps}")
    fig = _figure(9, 5.5)
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
    return _save(fig, path)


# -- training curves ----------------------------------------------------------------------------
#: panel -> [(record kind, key, legend label)]. The metrics log of ``scratchformer.train``
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

    Raises PlotError naming the file for a missing file, a line that is not a JSON
    object, or a log with no records.
    """
    path = Path(path)
    if not path.is_file():
        raise PlotError(f"no metrics log at {path}")
    records = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
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
    _png_path(path)
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
    fig = _figure(6 * ncols, 3.6 * nrows + 0.5)
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
    return _save(fig, path)
