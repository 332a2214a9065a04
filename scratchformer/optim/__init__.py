"""Optimisation: Adam with the paper's betas, the warmup schedules, gradient clipping."""

from scratchformer.optim.adam import Adam, OptimizerStateError
from scratchformer.optim.clip import clip_grad_norm, global_grad_norm
from scratchformer.optim.schedule import (
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
