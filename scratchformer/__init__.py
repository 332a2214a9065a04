"""scratchformer: the Transformer of "Attention Is All You Need", from scratch on NumPy,
with hand-derived backward passes proven by finite differences.

The names below are loaded when first used (``scratchformer.Transformer``): importing
the package alone loads nothing else, so that the ``scratchformer`` program is guarded
against Ctrl-C from its first line on (``__main__``), before NumPy loads."""

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


def __getattr__(name: str):
    """The package's names, each imported when first asked for (by ``import_module``: a
    ``from scratchformer import`` here would ask this function again)."""
    from importlib import import_module

    if name in ("backend", "device"):
        value = import_module(f"{__name__}.{name}")
    elif name == "set_backend":
        value = import_module(f"{__name__}.backend").set_backend
    elif name in ("PRESETS", "Transformer", "TransformerConfig"):
        value = getattr(import_module(f"{__name__}.models"), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted({*globals(), *__all__})
