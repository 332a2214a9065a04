"""The engine's and the application's modules in either layout of the package, for the
benchmarks that measure two trees (``PYTHONPATH=<other tree>``): ``scratchformer.engine.X``
and ``scratchformer.app.X``, or, in a tree from before the engine had a folder,
``scratchformer.X``.

The layout is read from the folder of the ``scratchformer`` that is imported, never by
trying an import: an editable install's finder serves a module the tree on PYTHONPATH
lacks from the installed tree, so ``import scratchformer.engine`` can succeed in an
older tree and measure the wrong code.
"""

from __future__ import annotations

import importlib
from pathlib import Path


def split() -> bool:
    """Whether the imported package has the engine in a folder of its own."""
    import scratchformer

    return (Path(scratchformer.__file__).resolve().parent / "engine").is_dir()


def engine(name: str):
    """The engine's module ``name`` ("models", "ops.linear", "decode.common")."""
    prefix = "scratchformer.engine." if split() else "scratchformer."
    return importlib.import_module(prefix + name)


def app(name: str):
    """The application's module ``name`` ("checkpoint", "export")."""
    return importlib.import_module(("scratchformer.app." if split() else "scratchformer.") + name)
