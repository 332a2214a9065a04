"""Data: vocabularies, tokenizers, padded batches, token-budget batching, built-in tasks."""

from scratchformer.data.batching import (
    Batch,
    BatchingError,
    TokenBatchSampler,
    batch_by_size,
    collate,
    example_widths,
    fixed_batches,
    padding_fraction,
    random_batches,
)
from scratchformer.data.tasks import TASKS, TaskConfig, TaskData, TaskError, make_task
from scratchformer.data.tokenizers import (
    TOKENIZERS,
    CharTokenizer,
    Tokenizer,
    WhitespaceTokenizer,
    tokenizer_from_dict,
)
from scratchformer.data.vocab import SPECIALS, Vocab, VocabError

__all__ = [
    "SPECIALS",
    "TASKS",
    "TOKENIZERS",
    "Batch",
    "BatchingError",
    "CharTokenizer",
    "TaskConfig",
    "TaskData",
    "TaskError",
    "TokenBatchSampler",
    "Tokenizer",
    "Vocab",
    "VocabError",
    "WhitespaceTokenizer",
    "batch_by_size",
    "collate",
    "example_widths",
    "fixed_batches",
    "make_task",
    "padding_fraction",
    "random_batches",
    "tokenizer_from_dict",
]
