"""scratchformer: the Transformer of "Attention Is All You Need", from scratch on NumPy,
with hand-derived backward passes proven by finite differences."""

from scratchformer import backend, device
from scratchformer.backend import set_backend
from scratchformer.models import PRESETS, Transformer, TransformerConfig

__version__ = "0.1.0"

__all__ = [
    "PRESETS",
    "Transformer",
    "TransformerConfig",
    "__version__",
    "backend",
    "device",
    "set_backend",
]
