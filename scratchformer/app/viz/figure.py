"""The figure plumbing every plot shares: a matplotlib ``Figure`` on the Agg canvas (never
pyplot, so no display is needed and a user's interactive backend is left alone), PNG
paths, saving, and reading a PNG's size.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from scratchformer.app import writer
from scratchformer.engine import backend
from scratchformer.engine.errors import ScratchformerError

DPI = 100
MAX_PIXELS = 40_000_000  # an attention figure larger than this is refused, not drawn


class PlotError(ScratchformerError):
    """A plot cannot be drawn from the arguments given (unknown head, empty log, ...)."""


def new_figure(width: float, height: float):
    """A Figure on an Agg canvas (no display, no pyplot); a clear error without matplotlib."""
    try:
        # optional (the plot extra): imported only when a figure is drawn
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415
        from matplotlib.figure import Figure  # noqa: PLC0415
    except ImportError:
        raise PlotError(
            "plots need matplotlib: pip install 'scratchformer[plot]' (or pip install matplotlib)"
        ) from None
    except ValueError as e:  # matplotlib checks $MPLBACKEND as it is imported
        if "backend" not in str(e):
            raise
        raise PlotError(
            f"MPLBACKEND={os.environ.get('MPLBACKEND', '')} is not a backend matplotlib knows "
            "(plots are written as PNG files and need none): unset MPLBACKEND"
        ) from None
    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def png_path(where) -> Path:
    """The path of ``where`` (a path, or a ``writer.Plan``'s Target), which must name a PNG."""
    path = where.path if isinstance(where, writer.Target) else Path(where)
    if path.suffix.lower() != ".png":
        raise PlotError(f"plots are written as PNG: {path} should end in .png")
    return path


def save_png(fig, where) -> Path:
    """``fig`` as a PNG at ``where`` (a path, or a ``writer.Plan``'s checked Target)."""
    target = where if isinstance(where, writer.Target) else writer.Target(Path(where))
    png_path(target.path)
    return writer.write_figure(target, fig, dpi=DPI)


def figure_array(fig):
    """``fig`` drawn, as an (height, width, 3) uint8 RGB array (host NumPy)."""
    fig.canvas.draw()
    return backend.np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()


def png_size(path) -> tuple[int, int]:
    """``(width, height)`` in pixels from a PNG's IHDR chunk; PlotError if not a PNG."""
    with open(path, "rb") as f:
        head = f.read(24)
    if len(head) < 24 or head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        raise PlotError(f"{path} is not a PNG file")
    return struct.unpack(">II", head[16:24])
