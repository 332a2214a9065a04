"""Modules: own parameters and gradients, wire ops together, return caches.

Importing the package registers every attention variant (nn.attention.ATTENTION_VARIANTS).
"""

from scratchformer.engine.nn.attention import (
    ATTENTION_VARIANTS,
    MultiHeadAttention,
    attention_variant,
    register_attention,
)
from scratchformer.engine.nn.layers import (
    AddNorm,
    Dropout,
    Embedding,
    LayerNorm,
    Linear,
    PositionalEncoding,
    PositionwiseFeedForward,
)
from scratchformer.engine.nn.local_attention import LocalMultiHeadAttention
from scratchformer.engine.nn.module import Module, ModuleList
from scratchformer.engine.nn.relative_attention import (
    RelativeMultiHeadAttention,
    SkewMultiHeadAttention,
)
from scratchformer.engine.nn.transformer import Decoder, DecoderLayer, Encoder, EncoderLayer

__all__ = [
    "ATTENTION_VARIANTS",
    "AddNorm",
    "Decoder",
    "DecoderLayer",
    "Dropout",
    "Embedding",
    "Encoder",
    "EncoderLayer",
    "LayerNorm",
    "Linear",
    "LocalMultiHeadAttention",
    "Module",
    "ModuleList",
    "MultiHeadAttention",
    "PositionalEncoding",
    "PositionwiseFeedForward",
    "RelativeMultiHeadAttention",
    "SkewMultiHeadAttention",
    "attention_variant",
    "register_attention",
]
