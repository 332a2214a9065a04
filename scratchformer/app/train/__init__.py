"""Training: one loop (``Trainer``) for every task, one configuration format.

    from scratchformer.app.train import TrainConfig, train
    result = train(TrainConfig.load("copy", {"train": {"steps": 500}}))
    result.test                                   # the final model's test metrics

See ``loop`` (the loop), ``config`` (the TOML format and its layers), ``tasks`` (the task
protocol and the tasks) and ``evaluation`` (teacher-forced metrics, decoding).
"""

from scratchformer.app.errors import TrainingDiverged
from scratchformer.app.train.config import LoopConfig, OptimConfig, TrainConfig, shipped_names
from scratchformer.app.train.evaluation import decode_outputs, teacher_forced
from scratchformer.app.train.loop import Trainer, TrainResult, train
from scratchformer.app.train.tasks import TASKS, Task, TaskBatch
from scratchformer.engine.errors import ConfigError
from scratchformer.engine.step import accumulate_gradients

__all__ = [
    "TASKS",
    "ConfigError",
    "LoopConfig",
    "OptimConfig",
    "Task",
    "TaskBatch",
    "TrainConfig",
    "TrainResult",
    "Trainer",
    "TrainingDiverged",
    "accumulate_gradients",
    "decode_outputs",
    "shipped_names",
    "teacher_forced",
    "train",
]
