"""Models: the encoder-decoder Transformer, the decoder-only language model, the encoder
classifier, and their configuration presets."""

from scratchformer.engine.models.classifier import ClassificationHead, EncoderClassifier
from scratchformer.engine.models.config import PRESETS, TransformerConfig
from scratchformer.engine.models.lm import LanguageModel
from scratchformer.engine.models.transformer import Transformer

__all__ = [
    "PRESETS",
    "ClassificationHead",
    "EncoderClassifier",
    "LanguageModel",
    "Transformer",
    "TransformerConfig",
]
