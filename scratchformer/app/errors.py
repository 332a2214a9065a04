"""The application's error types: a run that diverged, and a command stopped by a
signal (the engine's errors, which the application shares, are engine/errors.py)."""

from __future__ import annotations

import signal

from scratchformer.engine.errors import ScratchformerError


class TrainingDiverged(ScratchformerError):
    """The loss or the gradient became NaN or infinite; training stopped."""


def signal_name(signum: int) -> str:
    """``Ctrl-C`` for SIGINT, else the signal's own name (``SIGTERM``)."""
    if signum == signal.SIGINT:
        return "Ctrl-C"
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class Interrupted(KeyboardInterrupt):
    """A command stopped by a signal (Ctrl-C is SIGINT). ``code`` is the shell's exit code
    of such an end, 128 + the signal's number; ``message`` says what was kept and what
    comes next ('' for a process that has nothing to say, a rank other than 0);
    ``at_once``: a second signal, or one outside the steps of a run, stopped it where it
    was (nothing in flight finished)."""

    def __init__(self, signum: int, message: str = "", at_once: bool = False):
        super().__init__(signum)
        self.signum, self.message, self.at_once = signum, message, at_once

    @property
    def code(self) -> int:
        return 128 + self.signum


__all__ = ["Interrupted", "TrainingDiverged", "signal_name"]
