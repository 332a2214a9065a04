"""Attention maps: the weights of every layer and head, read from the backward caches of
one forward pass, drawn as heat maps with the tokens along the axes.

Dimension key: ``H`` heads, ``S`` source length, ``T`` target length.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from scratchformer.app.viz.figure import (
    DPI,
    MAX_PIXELS,
    PlotError,
    figure_array,
    new_figure,
    png_path,
    save_png,
)
from scratchformer.engine import backend

# -- attention ----------------------------------------------------------------------------
#: the attention maps of an encoder-decoder, by which attention they show: kind -> (title,
#: query axis, key axis)
ATTENTION_MAPS = {
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
        if kind not in ATTENTION_MAPS:
            raise PlotError(
                f"unknown attention kind {kind!r}: expected one of {list(ATTENTION_MAPS)}"
            )
        return getattr(self, kind)

    @property
    def heads(self) -> int:
        return int(self.decoder[0].shape[0])


def attention_maps(model, src_ids, tgt_in_ids) -> AttentionMaps:
    """Run ``model`` (evaluation: no dropout) on one sentence pair and collect the weights.

    ``src_ids`` (S,) and ``tgt_in_ids`` (T,) are sequences of ids, ``tgt_in`` starting with
    <bos>. The weights are the attention core's (before dropout), read from each
    attention's forward cache by its module (``MultiHeadAttention.weights``).
    """
    np = backend.np
    src = backend.asarray(np.asarray(src_ids, dtype=np.int64)[None, :])  # (1, S)
    tgt = backend.asarray(np.asarray(tgt_in_ids, dtype=np.int64)[None, :])  # (1, T)
    _, cache = model.forward(src, tgt)

    def weights(module, sub):
        A = module.weights(sub.sublayer)  # (1, H, ., .), or None
        if A is None:
            raise PlotError("attention maps are drawn for dense and relative attention only")
        return backend.asnumpy(A)[0].astype(np.float64)  # (H, ., .)

    enc, dec = model.encoder.layers, model.decoder.layers
    return AttentionMaps(
        encoder=[weights(m.self_attn, c.self_attn) for m, c in zip(enc, cache.encoder.layers)],
        decoder=[weights(m.self_attn, c.self_attn) for m, c in zip(dec, cache.decoder.layers)],
        cross=[weights(m.cross_attn, c.cross_attn) for m, c in zip(dec, cache.decoder.layers)],
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


def _attention_labels(kind: str, shape, src_tokens, tgt_in_tokens, tgt_out_tokens):
    """Tick labels ``(rows, cols)`` for maps of ``kind`` with ``shape`` (queries, keys).

    Rows: the source (encoder), the decoder input (decoder), the token each position
    predicts, ``tgt_out`` (cross). Columns: the source (encoder, cross), the decoder
    input (decoder). PlotError when the label counts do not match ``shape``.
    """
    src, t_in, t_out = (display_tokens(t) for t in (src_tokens, tgt_in_tokens, tgt_out_tokens))
    rows = {"encoder": src, "decoder": t_in, "cross": t_out}[kind]
    cols = src if kind in ("encoder", "cross") else t_in
    n_q, n_k = shape
    if (len(rows), len(cols)) != (n_q, n_k):
        raise PlotError(
            f"{len(rows)} x {len(cols)} token labels for {n_q} x {n_k} attention weights"
        )
    return rows, cols


def _attention_layout(rows, cols, nr: int, nc: int) -> tuple[float, float, float, float]:
    """``(W, H, label_w, label_h)`` in inches for ``nr`` x ``nc`` panels of len(rows) x
    len(cols) cells: each panel sized by its token count so tick labels stay legible
    (about 0.22 in a token), margins by the longest label. PlotError past MAX_PIXELS."""
    n_q, n_k = len(rows), len(cols)
    cell = 0.22
    pw, ph = max(2.4, n_k * cell + 0.6), max(2.0, n_q * cell + 0.4)
    label_w = 0.12 * max(len(str(t)) for t in rows) + 0.9
    label_h = 0.075 * max(len(str(t)) for t in cols) + 0.55
    W = label_w + nc * pw + 1.1
    H = label_h + nr * ph + 0.8
    if W * H * DPI**2 > MAX_PIXELS:
        raise PlotError(
            f"{nr} layers x {nc} heads of {n_q} x {n_k} tokens would make a "
            f"{int(W * DPI)} x {int(H * DPI)} pixel image: pick some with --layer/--head "
            "(layers=/heads=) or use a shorter sentence"
        )
    return W, H, label_w, label_h


def _attention_panel(ax, A, rows, cols, fontsize: int, *, xlabel=None, ylabel=None, title=None):
    """One heat map of ``A`` (queries, keys) on the fixed scale [0, 1]. Tick labels only
    on the outer panels: the columns' with ``xlabel`` (bottom row), the rows' with
    ``ylabel`` (left column). Returns the image, for the colour bar."""
    image = ax.imshow(A, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(len(cols)))
    ax.set_yticks(range(len(rows)))
    if xlabel is not None:
        ax.set_xticklabels(cols, rotation=90, fontsize=fontsize)
        ax.set_xlabel(xlabel, fontsize=9)
    else:
        ax.set_xticklabels([])
    if ylabel is not None:
        ax.set_yticklabels(rows, fontsize=fontsize)
        ax.set_ylabel(ylabel, fontsize=9)
    else:
        ax.set_yticklabels([])
    ax.tick_params(length=0)
    if title is not None:
        ax.set_title(title, fontsize=10)
    return image


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
    png_path(path)
    fig = attention_figure(
        maps, kind=kind, src_tokens=src_tokens, tgt_in_tokens=tgt_in_tokens,
        tgt_out_tokens=tgt_out_tokens, layers=layers, heads=heads, title=title,
    )
    return save_png(fig, path)


def attention_image(maps: AttentionMaps, **kw):
    """``plot_attention``'s figure as an (height, width, 3) uint8 RGB array (``kw``:
    ``attention_figure``'s), for TensorBoard's images."""
    return figure_array(attention_figure(maps, **kw))


def attention_figure(
    maps: AttentionMaps,
    *,
    kind: str,
    src_tokens,
    tgt_in_tokens,
    tgt_out_tokens,
    layers=None,
    heads=None,
    title: str | None = None,
):
    """The figure ``plot_attention`` saves (see there), not yet saved."""
    per_layer = maps.layers(kind)
    if not per_layer:
        raise PlotError(f"the model has no {ATTENTION_MAPS[kind][0]} layers (N = 0)")
    layer_ids = _pick(len(per_layer), layers, f"the {kind}", "layer")
    head_ids = _pick(int(per_layer[0].shape[0]), heads, "each layer", "head")
    name, ylabel, xlabel = ATTENTION_MAPS[kind]
    shape = per_layer[0].shape[1:]  # (queries, keys)
    rows, cols = _attention_labels(kind, shape, src_tokens, tgt_in_tokens, tgt_out_tokens)
    nr, nc = len(layer_ids), len(head_ids)
    W, H, label_w, label_h = _attention_layout(rows, cols, nr, nc)
    fig = new_figure(W, H)
    fontsize = 9 if max(shape) <= 30 else 7
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
            image = _attention_panel(
                fig.add_subplot(grid[r, c]),
                per_layer[li][hi],
                rows,
                cols,
                fontsize,
                xlabel=xlabel if r == nr - 1 else None,
                ylabel=f"layer {li}\n{ylabel}" if c == 0 else None,
                title=f"head {hi}" if r == 0 else None,
            )
    cax = fig.add_axes([1 - 0.85 / W, bottom, 0.18 / W, 1 - bottom - 0.8 / H])
    bar = fig.colorbar(image, cax=cax)
    bar.set_label("attention weight (each row sums to 1)", fontsize=9)
    fig.suptitle(title or name, fontsize=12, y=1 - 0.25 / H, va="top")
    return fig
