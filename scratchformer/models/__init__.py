"""Models: the encoder-decoder Transformer and its configuration presets."""

from scratchformer.models.config import PRESETS, TransformerConfig
from scratchformer.models.transformer import Transformer

__all__ = ["PRESETS", "Transformer", "TransformerConfig"]
