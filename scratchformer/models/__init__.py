"""Models: the encoder-decoder Transformer, the decoder-only language model, the encoder
classifier, and their configuration presets."""

from scratchformer.models.classifier import ClassificationHead, EncoderClassifier
from scratchformer.models.config import PRESETS, TransformerConfig
from scratchformer.models.lm import LanguageModel
from scratchformer.models.transformer import Transformer

__all__ = [
    "PRESETS",
    "ClassificationHead",
    "EncoderClassifier",
    "LanguageModel",
    "Transformer",
    "TransformerConfig",
]
