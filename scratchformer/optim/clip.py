"""Global gradient-norm clipping.

    ||g|| = sqrt(sum over every parameter of sum(g^2))
    if ||g|| > max_norm:  g <- g * max_norm / ||g||      (every entry, in place)

One norm over all parameters (not per tensor), so clipping only rescales the update and
never changes its direction. ``g`` is the flat gradient (``FlatParameters.grads``, where
a tied matrix has one slice), so both are one pass over one array.
"""

from __future__ import annotations

import math


def global_grad_norm(g) -> float:
    """``sqrt(sum(g^2))`` of the flat gradient ``g`` (a Python float; ``inf`` or ``nan``
    when a gradient is not finite). A dot product: no ``g * g`` temporary."""
    return math.sqrt(float(g @ g))


def clip_grad_norm(g, max_norm: float | None) -> float:
    """Scale the flat gradient ``g`` in place so that its norm is at most ``max_norm``.

    Returns the norm before clipping. ``max_norm`` None or <= 0 only measures. A
    non-finite norm is returned as is and nothing is scaled (the caller stops the run).
    """
    norm = global_grad_norm(g)
    if max_norm and max_norm > 0 and math.isfinite(norm) and norm > max_norm:
        g *= max_norm / norm
    return norm
