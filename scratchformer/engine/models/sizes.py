"""What a model costs before it is built: its parameters, read from the modules' own
declarations (``Module.parameter_shapes``, nothing allocated), and the memory of the
work done with it (training, loading, checking), so that a request that cannot fit is
refused in one line before any parameter exists.

    spec = {"class": "Transformer"}                    # or LanguageModel, EncoderClassifier
    model_class(spec)                                  # (Transformer, {})
    parameter_totals(spec, config)                     # (tensors, entries), any N
    training_bytes(spec, config, 4096)                 # bytes, before anything is built

A spec names a model class and what its constructor takes besides the config
(``{"class": "EncoderClassifier", "num_classes": 6}``); checkpoints store it.

Dimension key: ``D`` d_model, ``F`` d_ff, ``H`` heads, ``Dh`` d_k, ``Dv`` d_v, ``V``
vocabulary, ``L`` sequence length, ``P`` parameter entries.
"""

from __future__ import annotations

import dataclasses
import math

from scratchformer.engine import backend
from scratchformer.engine.errors import ConfigError
from scratchformer.engine.models.classifier import EncoderClassifier
from scratchformer.engine.models.config import TransformerConfig
from scratchformer.engine.models.lm import LanguageModel
from scratchformer.engine.models.transformer import Transformer

#: the model classes, by the name a spec (and a checkpoint) gives them
MODEL_CLASSES = {cls.__name__: cls for cls in (Transformer, LanguageModel, EncoderClassifier)}


def model_spec(model) -> dict:
    """The spec of a built model: its class's name and its constructor's other arguments."""
    name = type(model).__name__
    if name not in MODEL_CLASSES:
        raise ConfigError(f"a {name} is not one of the models {sorted(MODEL_CLASSES)}")
    spec = {"class": name}
    if isinstance(model, EncoderClassifier):
        spec["num_classes"] = model.num_classes
    return spec


def model_class(spec) -> tuple[type, dict]:
    """``(class, constructor arguments besides the config)`` of ``spec``; ConfigError
    naming what is wrong with it."""
    if not isinstance(spec, dict) or spec.get("class") not in MODEL_CLASSES:
        raise ConfigError(
            f"model class {spec!r} is not one of {sorted(MODEL_CLASSES)}"
            if not isinstance(spec, dict)
            else f"unknown model class {spec.get('class')!r}: expected one of "
            f"{sorted(MODEL_CLASSES)}"
        )
    kwargs = {k: v for k, v in spec.items() if k != "class"}
    if spec["class"] == "EncoderClassifier":
        n = kwargs.get("num_classes")
        if not isinstance(n, int) or isinstance(n, bool) or n < 2:
            raise ConfigError(f"model.num_classes must be an integer >= 2, got {n!r}")
        if set(kwargs) != {"num_classes"}:
            raise ConfigError(f"unexpected model arguments {sorted(set(kwargs) - {'num_classes'})}")
    elif kwargs:
        raise ConfigError(f"a {spec['class']} takes no model arguments, got {sorted(kwargs)}")
    return MODEL_CLASSES[spec["class"]], kwargs


def build_model(spec, config: TransformerConfig):
    """The model ``spec`` names, built for ``config`` (parameters allocated)."""
    cls, kwargs = model_class(spec)
    return cls(config, **kwargs)


def parameter_shapes(spec, config: TransformerConfig) -> dict[str, tuple]:
    """``{name: shape}`` of the model ``spec`` names (``Module.parameter_shapes``): names
    for every layer, so its time grows with the layers (use ``parameter_totals`` first)."""
    cls, kwargs = model_class(spec)
    return cls.parameter_shapes(config, **kwargs)


def _layer_totals(spec, config: TransformerConfig) -> list[tuple[int, int]]:
    """``(tensors, entries)`` with 1 and 1 layers, and what one more layer of the first
    stack and one more of the second (the decoder's) add."""

    def totals(n: int, n_dec: int) -> tuple[int, int]:
        shapes = parameter_shapes(spec, dataclasses.replace(config, N=n, N_dec=n_dec))
        return len(shapes), sum(math.prod(s) for s in shapes.values())

    base = totals(1, 1)
    return [base] + [tuple(b - a for a, b in zip(base, totals(*n))) for n in ((2, 1), (1, 2))]


def parameter_totals(spec, config: TransformerConfig) -> tuple[int, int]:
    """``(tensors, entries)`` of the model ``spec`` names, in a time that does not grow
    with the layer counts: its shapes are read with 1 and 2 layers per stack, and every
    layer of a stack adds the same (the totals are affine in ``N`` and in ``N_dec``)."""
    base, layer, dec_layer = _layer_totals(spec, config)
    extra = (config.N - 1, config.N_dec - 1)
    return tuple(base[i] + extra[0] * layer[i] + extra[1] * dec_layer[i] for i in range(2))


def largest_part(spec, config: TransformerConfig) -> str:
    """What makes the model large: ``"layers"`` (their count and widths), ``"positions"``
    (``max_len``: a learned table or the sinusoids) or ``"vocabulary"`` (the
    embeddings), whichever holds the most entries; a refusal's advice names it."""
    base, layer, dec_layer = _layer_totals(spec, config)
    c = config
    layers = c.N * layer[1] + c.N_dec * dec_layer[1]
    stacks = 2 if spec.get("class") == "Transformer" else 1
    positions = stacks * c.max_len * c.d_model
    vocabulary = (c.vocab_size + c.src_vocab) * c.d_model
    parts = {"layers": layers, "positions": positions, "vocabulary": vocabulary}
    return max(parts, key=parts.get)


def _itemsize() -> int:
    return backend.np.dtype(backend.get_dtype()).itemsize


def model_bytes(spec, config: TransformerConfig, copies: int = 2) -> int:
    """Bytes of the model built in the default dtype: ``copies`` arrays of every
    parameter's size (2: the parameters and their gradients, as every module holds), and
    the sinusoid table of each stack."""
    _, entries = parameter_totals(spec, config)
    stacks = 2 if spec.get("class") == "Transformer" else 1
    tables = stacks * config.max_len * config.d_model if config.positions == "sinusoidal" else 0
    return (copies * entries + tables) * _itemsize()


def activation_bytes(spec, config: TransformerConfig, tokens: int, length: int | None = None):
    """About the bytes one forward keeps for its backward, at its peak, on a batch of
    ``tokens`` positions (batch x padded length ``L``: ``length``, by default the longest
    a batch can have, ``min(tokens, max_len)``). Per
    position and layer: the queries, keys, values and heads' outputs ``H (2 Dh + 2 Dv)``,
    the attention logits and weights ``2 H L`` (and a dropout mask ``H L``), two
    ``D``-wide arrays per Add & Norm, the feed-forward network's ``2 F`` (and a dropout
    mask ``F``); a decoder layer adds a cross-attention and its Add & Norm; the output
    adds ``V`` (the logits, turned into probabilities in place), the embeddings and the
    backward's temporaries about ``8 D`` per stack. Against the peak tracemalloc measures
    in a forward and backward (tests/models/test_sizes.py): within 25%."""
    c = config
    D, F, H = c.d_model, c.d_ff, c.h
    d_k, d_v = c.d_k or D // H, c.d_v or D // H
    L = max(1, min(tokens, c.max_len) if length is None else length)
    attention = H * (2 * d_k + 2 * d_v) + (2 + (c.P_drop_attn > 0)) * H * L
    layer = attention + 2 * 2 * D + (2 + (c.P_drop_ffn > 0)) * F
    cross_layer = layer + attention + 2 * D
    if spec.get("class") == "Transformer":
        per_position = c.N * layer + c.N_dec * cross_layer + c.vocab_size + 16 * D
    elif spec.get("class") == "LanguageModel":
        per_position = c.N * layer + c.vocab_size + 8 * D
    else:  # the classifier: one head per sequence, not per position
        per_position = c.N * layer + 8 * D
    return int(tokens) * per_position * _itemsize()


def training_bytes(spec, config: TransformerConfig, tokens: int) -> int:
    """About the bytes of training the model on micro-batches of ``tokens`` positions:
    the parameters, their gradients and Adam's two moments (``4 P``), at the end of the
    run the averaged model and the float64 sum it is made from (about ``3 P`` more), and
    the activations of a micro-batch."""
    return model_bytes(spec, config, copies=7) + activation_bytes(spec, config, tokens)


def describe(spec, config: TransformerConfig) -> str:
    """``"a Transformer of 63.1 M parameters (N 6 + 6, d_model 512, d_ff 2048, h 8,
    vocabulary 37000, max_len 1024)"``: the model, in a refusal it is the cause of."""
    _, entries = parameter_totals(spec, config)
    c = config
    layers = f"N {c.N} + {c.N_dec}" if spec.get("class") == "Transformer" else f"N {c.N}"
    return (
        f"a {spec.get('class')} of {_count(entries)} parameters ({layers}, d_model "
        f"{c.d_model}, d_ff {c.d_ff}, h {c.h}, vocabulary {c.vocab_size}, max_len {c.max_len})"
    )


def _count(n: int) -> str:
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return str(n)


__all__ = [
    "MODEL_CLASSES",
    "activation_bytes",
    "build_model",
    "describe",
    "largest_part",
    "model_bytes",
    "model_class",
    "model_spec",
    "parameter_shapes",
    "parameter_totals",
    "training_bytes",
]
