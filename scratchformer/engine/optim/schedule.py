"""Learning-rate schedules, as functions of the optimizer step ``s`` (counted from 1).

The paper (section 5.3), with ``w`` warmup steps:

    lr(s) = lr_factor * d_model^-0.5 * min(s^-0.5, s * w^-1.5)

a linear rise for ``w`` steps to ``lr_factor * (d_model * w)^-0.5``, then decay as
``s^-0.5``. With d_model = 512, w = 4000: lr(1) = 1.7469e-7, lr(4000) = 6.98771e-4,
lr(16000) = 3.49386e-4.

The alternative: a linear warmup to a constant peak, ``lr(s) = lr * min(1, s / w)``.
"""

from __future__ import annotations

import math

from scratchformer.engine.errors import ScratchformerError


class Schedule:
    """``schedule(s) -> lr`` for optimizer step ``s >= 1``."""

    name = "schedule"

    def __call__(self, step: int) -> float:
        raise NotImplementedError

    def to_dict(self) -> dict:
        return {"name": self.name, **vars(self)}

    @staticmethod
    def _check_step(step: int) -> None:
        if step < 1:
            raise ScratchformerError(
                f"learning-rate schedules count optimizer steps from 1, got {step}"
            )


class NoamSchedule(Schedule):
    """The paper's schedule: ``lr_factor * d_model^-0.5 * min(s^-0.5, s * warmup^-1.5)``."""

    name = "noam"

    def __init__(self, d_model: int, warmup: int = 4000, lr_factor: float = 1.0):
        if d_model <= 0 or warmup <= 0:
            raise ScratchformerError(f"need d_model > 0 and warmup > 0, got {d_model}, {warmup}")
        self.d_model, self.warmup, self.lr_factor = d_model, warmup, lr_factor

    def __call__(self, step: int) -> float:
        self._check_step(step)
        return self.lr_factor * self.d_model**-0.5 * min(step**-0.5, step * self.warmup**-1.5)

    @property
    def peak(self) -> float:
        """The largest learning rate, reached at ``s = warmup``."""
        return self.lr_factor / math.sqrt(self.d_model * self.warmup)


class ConstantSchedule(Schedule):
    """Linear warmup to a constant: ``lr * min(1, s / warmup)`` (``warmup=0``: constant)."""

    name = "constant"

    def __init__(self, lr: float, warmup: int = 0):
        if lr <= 0 or warmup < 0:
            raise ScratchformerError(f"need lr > 0 and warmup >= 0, got {lr}, {warmup}")
        self.lr, self.warmup = lr, warmup

    def __call__(self, step: int) -> float:
        self._check_step(step)
        if self.warmup == 0:
            return self.lr
        return self.lr * min(1.0, step / self.warmup)


SCHEDULES = {"noam": NoamSchedule, "constant": ConstantSchedule}


def make_schedule(name: str, *, d_model: int, warmup: int, lr_factor: float = 1.0, lr=None):
    """Build a schedule by name: ``"noam"`` (uses d_model, warmup, lr_factor) or
    ``"constant"`` (uses lr, warmup)."""
    if name == "noam":
        return NoamSchedule(d_model, warmup, lr_factor)
    if name == "constant":
        if lr is None:
            raise ScratchformerError("the 'constant' schedule needs a learning rate (optim.lr)")
        return ConstantSchedule(lr, warmup)
    raise ScratchformerError(
        f"unknown learning-rate schedule {name!r}: expected one of {sorted(SCHEDULES)}"
    )
