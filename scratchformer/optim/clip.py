"""Global gradient-norm clipping.

    ||g|| = sqrt(sum over every parameter tensor of sum(g^2))
    if ||g|| > max_norm:  g <- g * max_norm / ||g||      (every tensor, in place)

One norm over all parameters (not per tensor), so clipping only rescales the update and
never changes its direction. A tied matrix appears once in ``model.gradients()`` and so
counts once.
"""

from __future__ import annotations

import math


def global_grad_norm(grads: dict) -> float:
    """``sqrt(sum_k sum(g_k^2))`` over every gradient array in ``grads`` (a Python float;
    ``inf`` or ``nan`` when a gradient is not finite)."""
    total = 0.0
    for g in grads.values():
        flat = g.ravel()  # a view of a contiguous gradient
        total += float(flat @ flat)  # a dot product: no g * g temporary
    return math.sqrt(total)


def clip_grad_norm(grads: dict, max_norm: float | None) -> float:
    """Scale every gradient in place so the global norm is at most ``max_norm``.

    Returns the norm before clipping. ``max_norm`` None or <= 0 only measures. A
    non-finite norm is returned as is and nothing is scaled (the caller stops the run).
    """
    norm = global_grad_norm(grads)
    if max_norm and max_norm > 0 and math.isfinite(norm) and norm > max_norm:
        scale = max_norm / norm
        for g in grads.values():
            g *= scale
    return norm
