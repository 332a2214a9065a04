"""The tasks the training loop drives (see ``base`` for the protocol).

copy, reverse, sort   StringTask      encoder-decoder, generated strings
translate             TranslateTask   encoder-decoder, TSV sentence pairs, BLEU
lm                    LMTask          decoder-only language model, bits per character
classify              ClassifyTask    encoder + classification head, accuracy
"""

from scratchformer.app.train.tasks.base import Task, TaskBatch
from scratchformer.app.train.tasks.classify import ClassifySettings, ClassifyTask
from scratchformer.app.train.tasks.lm import LMSettings, LMTask
from scratchformer.app.train.tasks.seq2seq import (
    StringSettings,
    StringTask,
    TranslateSettings,
    TranslateTask,
)

#: ``[task] name`` -> the task class that serves it
TASKS: dict[str, type[Task]] = {
    kind: cls for cls in (StringTask, TranslateTask, LMTask, ClassifyTask) for kind in cls.kinds
}

__all__ = [
    "TASKS",
    "ClassifySettings",
    "ClassifyTask",
    "LMSettings",
    "LMTask",
    "StringSettings",
    "StringTask",
    "Task",
    "TaskBatch",
    "TranslateSettings",
    "TranslateTask",
]
