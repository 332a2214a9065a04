"""Global gradient-norm clipping.

    ||g|| = sqrt(sum over every parameter of sum(g^2))
    if ||g|| > max_norm:  g <- g * max_norm / ||g||      (every entry, in place)

One norm over all parameters (not per tensor), so clipping only rescales the update and
never changes its direction. ``g`` is the flat gradient (``FlatParameters.grads``, where
a tied matrix has one slice), so both are one pass over one array.
"""

from __future__ import annotations

from scratchformer.engine.backend import xp


def global_grad_norm(g):
    """``sqrt(sum(g^2))`` of the flat gradient ``g``, a float64 0-d array of the backend
    (``inf`` or ``nan`` when a gradient is not finite). A dot product: no ``g * g``
    temporary."""
    return xp.sqrt((g @ g).astype(xp.float64))


def clip_grad_norm(g, max_norm: float | None):
    """Scale the flat gradient ``g`` in place so that its norm is at most ``max_norm``:
    ``g *= max_norm / max(||g||, max_norm)``, computed on the device (nothing is read back; a
    factor of 1 leaves ``g`` exactly as it was).

    Returns the norm before clipping (a 0-d array: read it when it is reported).
    ``max_norm`` None or <= 0 only measures. A norm that is not finite leaves ``g`` as
    it is (the caller's check of the norm stops the run).
    """
    norm = global_grad_norm(g)
    if max_norm and max_norm > 0:
        factor = max_norm / xp.maximum(norm, max_norm)  # 1 exactly when within; float64
        factor = xp.where(xp.isfinite(norm), factor, 1.0)  # not finite: left as it is
        g *= factor.astype(g.dtype)
    return norm
