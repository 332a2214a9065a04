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

from scratchformer.app.viz.attention import (
    ATTENTION_MAPS,
    AttentionMaps,
    attention_image,
    attention_maps,
    display_tokens,
    plot_attention,
)
from scratchformer.app.viz.curves import plot_curves, plot_positional, plot_schedule, read_metrics
from scratchformer.app.viz.figure import PlotError, png_size

__all__ = [
    "ATTENTION_MAPS",
    "AttentionMaps",
    "PlotError",
    "attention_image",
    "attention_maps",
    "display_tokens",
    "plot_attention",
    "plot_curves",
    "plot_positional",
    "plot_schedule",
    "png_size",
    "read_metrics",
]
