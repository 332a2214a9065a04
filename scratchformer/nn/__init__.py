"""Modules: own parameters and gradients, wire ops together, return caches."""

from scratchformer.nn.attention import MultiHeadAttention
from scratchformer.nn.layers import (
    AddNorm,
    Dropout,
    Embedding,
    LayerNorm,
    Linear,
    PositionalEncoding,
    PositionwiseFeedForward,
)
from scratchformer.nn.module import Module, ModuleList
from scratchformer.nn.transformer import Decoder, DecoderLayer, Encoder, EncoderLayer

__all__ = [
    "AddNorm",
    "Decoder",
    "DecoderLayer",
    "Dropout",
    "Embedding",
    "Encoder",
    "EncoderLayer",
    "LayerNorm",
    "Linear",
    "Module",
    "ModuleList",
    "MultiHeadAttention",
    "PositionalEncoding",
    "PositionwiseFeedForward",
]
