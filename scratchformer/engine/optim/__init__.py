"""Optimisation: Adam with the paper's betas, the warmup schedules, gradient clipping."""

from scratchformer.engine.optim.adam import Adam, OptimizerStateError
from scratchformer.engine.optim.clip import clip_grad_norm, global_grad_norm
from scratchformer.engine.optim.schedule import (
    SCHEDULES,
    ConstantSchedule,
    NoamSchedule,
    Schedule,
    make_schedule,
)

__all__ = [
    "SCHEDULES",
    "Adam",
    "ConstantSchedule",
    "NoamSchedule",
    "OptimizerStateError",
    "Schedule",
    "clip_grad_norm",
    "global_grad_norm",
    "make_schedule",
]
