"""scratchformer: the Transformer of "Attention Is All You Need", from scratch on NumPy,
with hand-derived backward passes proven by finite differences.

Two houses and the exercises:

    engine/      the autograd-free implementation: the backend, the ops and their
                 dispatcher, modules, models, Adam, decoding, the training step, gradient
                 checks. It imports nothing else of the package.
    app/         the command line and what it runs around the engine: the run loop, data,
                 checkpoints, export, plots, data parallelism, the one writer.
    exercises/   write the backward passes yourself, graded against the engine.

The front door below gives the names most scripts need (``from scratchformer import
Transformer, TransformerConfig, translate, train``).

The names below are loaded when first used (``scratchformer.Transformer``): importing
the package alone loads nothing else, so that the ``scratchformer`` program is guarded
against Ctrl-C from its first line on (``__main__``), before NumPy loads."""

__version__ = "0.1.0"

#: the front door's names, by the module that holds them (each imported when first used)
NAMES = {
    "engine.backend": ("backend",),
    "engine.device": ("device",),
    "engine.models": ("PRESETS", "EncoderClassifier", "LanguageModel", "Transformer",
                      "TransformerConfig"),
    "engine.decode": ("DecodeOptions", "beam_search", "generate", "greedy_decode",
                      "sample_decode"),
    "engine.gradcheck": ("check_directions", "check_model", "check_op"),
    "app.translate": ("translate", "translate_nbest"),
    "app.checkpoint": ("average_checkpoints", "load_checkpoint", "load_with_tokenizer",
                       "save_checkpoint"),
    "app.train": ("TrainConfig", "Trainer", "train"),
}
_WHERE = {name: module for module, names in NAMES.items() for name in names}

__all__ = sorted(["__version__", "set_backend", *_WHERE])


def __getattr__(name: str):
    """The package's names, each imported when first asked for (by ``import_module``: a
    ``from scratchformer import`` here would ask this function again)."""
    from importlib import import_module

    if name == "set_backend":
        value = import_module(f"{__name__}.engine.backend").set_backend
    elif name in _WHERE:
        module = import_module(f"{__name__}.{_WHERE[name]}")
        value = module if name in ("backend", "device") else getattr(module, name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted({*globals(), *__all__})
