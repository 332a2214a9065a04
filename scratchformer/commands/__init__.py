"""The ``scratchformer`` sub-commands, one module each (see ``scratchformer.cli``)."""

from __future__ import annotations

import sys

from tqdm.auto import tqdm


def progress_bar(total: int, what: str, unit: str):
    """A progress bar on stderr for a stage that may take a while (its ``update(n)``
    counts work done); it disappears when the stage ends."""
    return tqdm(
        total=total,
        desc=what,
        unit=unit,
        leave=False,
        file=sys.stderr,
        mininterval=1.0,
        dynamic_ncols=True,
    )


def plural(n: int, word: str) -> str:
    """``1 sentence``, ``2 sentences``."""
    return f"{n} {word}{'' if n == 1 else 's'}"
