"""Dynamic loss scaling for mixed precision (Micikevicius et al., 2018), decided on the
device: nothing here reads an array back to the host.

In float16 a gradient below about 6e-8 flushes to zero. Back-propagating ``S * loss``
instead of ``loss`` multiplies every gradient by ``S`` (the backward is linear in its
incoming gradient), lifting the small ones into range; dividing the float32 gradients by
``S`` before clipping and Adam gives the true gradients back. Too large an ``S`` makes a
float16 gradient overflow to inf: that step is skipped (no parameter, moment or Adam
step count changes) and ``S`` is halved. After ``window`` good steps in a row ``S`` is
doubled, so it stays near the largest that does not overflow.

    scaler = LossScaler(2.0**15, window=2000)
    model.loss_backward(cache, dloss=scaler.scale)     # gradients of S * loss
    scaler.unscale(flat.grads)                         # divided by S (float32)
    norm = clip_grad_norm(flat.grads, max_norm)        # inf or nan if one overflowed
    ok = scaler.check(norm, flat.grads)                # finite? (device); zeros if not
    optimizer.step(lr, apply=ok)                       # a skipped step changes nothing
    scaler.update(ok)                                  # halve, or count towards doubling

``scale``, ``good`` (good steps since the last change) and ``skipped`` (steps skipped in
all) are 0-d device arrays; ``state_dict`` reads them (at a checkpoint). Skipping hides
nothing: the run stops as diverged when the scale falls below ``train.min_loss_scale`` or
its steps are mostly skipped (``train.step.overflow_problem``).
Derivation: docs/derivations.md#mixed-precision-and-loss-scaling.
"""

from __future__ import annotations

from scratchformer.engine import backend
from scratchformer.engine.errors import ScratchformerError


class LossScaler:
    """The dynamic loss scale (see the module doc)."""

    def __init__(self, init: float = 2.0**15, window: int = 2000, growth=2.0, backoff=0.5):
        if not init > 0 or window < 1:
            raise ScratchformerError(
                f"loss scaling needs a positive first scale and a window >= 1, got {init}, {window}"
            )
        xp = backend.xp
        self.window, self.growth, self.backoff = int(window), float(growth), float(backoff)
        self.scale = xp.asarray(init, dtype=xp.float32)
        self.good = xp.zeros((), dtype=xp.int64)
        self.skipped = xp.zeros((), dtype=xp.int64)

    def unscale(self, grads) -> None:
        """``grads /= scale``, in place (the float32 gradients of the master weights)."""
        grads *= (1.0 / self.scale).astype(grads.dtype)

    @staticmethod
    def check(norm, grads):
        """Whether the step may be taken: its gradient norm is finite (a gradient that
        overflowed makes it inf or nan), a 0-d bool of the device. If not, the gradients
        are set to zero, so that the skipped step computes nothing from them."""
        xp = backend.xp
        ok = xp.isfinite(norm)
        xp.copyto(grads, 0.0, where=xp.logical_not(ok))
        return ok

    def update(self, ok) -> None:
        """After a step: halve the scale if it overflowed (``ok`` False), else count the
        good step and double the scale after ``window`` of them in a row."""
        xp = backend.xp
        grow = xp.logical_and(ok, self.good + 1 >= self.window)
        factor = xp.where(ok, xp.where(grow, self.growth, 1.0), self.backoff)
        self.scale = (self.scale * factor).astype(self.scale.dtype)
        self.good = xp.where(xp.logical_and(ok, xp.logical_not(grow)), self.good + 1, 0)
        self.skipped = self.skipped + xp.logical_not(ok)

    # -- state --------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Host values of the scale, the good-step count and the skipped steps (a read)."""
        return {
            "scale": float(self.scale),
            "good": int(self.good),
            "skipped": int(self.skipped),
            "window": self.window,
        }

    def load_state_dict(self, state: dict) -> None:
        xp = backend.xp
        try:
            self.scale = xp.asarray(float(state["scale"]), dtype=xp.float32)
            self.good = xp.asarray(int(state["good"]), dtype=xp.int64)
            self.skipped = xp.asarray(int(state["skipped"]), dtype=xp.int64)
        except (KeyError, TypeError, ValueError):
            raise ScratchformerError(
                f"the checkpoint's loss-scale state is not valid ({state!r:.80})"
            ) from None


__all__ = ["LossScaler"]
