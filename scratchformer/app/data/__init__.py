"""Data: vocabularies, tokenizers, padded batches, token-budget batching, the built-in
string tasks, translation pairs and monolingual corpora."""

from scratchformer.app.data.batching import (
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
from scratchformer.app.data.pairs import (
    STRING_RULES,
    DataError,
    Pairs,
    string_pairs,
    translation_pairs,
)
from scratchformer.app.data.text import CorpusError, load_labelled, load_lines, words
from scratchformer.app.data.tokenizers import (
    TOKENIZERS,
    CharTokenizer,
    Tokenizer,
    WhitespaceTokenizer,
    tokenizer_from_dict,
)
from scratchformer.app.data.vocab import SPECIALS, Vocab, VocabError

__all__ = [
    "SPECIALS",
    "STRING_RULES",
    "TOKENIZERS",
    "Batch",
    "BatchingError",
    "CharTokenizer",
    "CorpusError",
    "Pairs",
    "DataError",
    "TokenBatchSampler",
    "Tokenizer",
    "Vocab",
    "VocabError",
    "WhitespaceTokenizer",
    "batch_by_size",
    "collate",
    "example_widths",
    "fixed_batches",
    "load_labelled",
    "load_lines",
    "padding_fraction",
    "random_batches",
    "string_pairs",
    "tokenizer_from_dict",
    "translation_pairs",
    "words",
]
