"""The ``scratchformer`` sub-commands, one module each (see ``scratchformer.cli``)."""

from __future__ import annotations


def plural(n: int, word: str) -> str:
    """``1 sentence``, ``2 sentences``."""
    return f"{n} {word}{'' if n == 1 else 's'}"
