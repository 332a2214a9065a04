"""How a run ends when it is asked to: Ctrl-C (SIGINT) and SIGTERM.

    with Interrupts(main=True) as stop:      # the handlers are the run's while it lasts
        stop.phase = "steps"                 # while the steps run
        ... stop.signum                      # the first signal of the steps, or 0

While the steps run, the first signal is only noted: the step in flight finishes, with
what its end writes anyway (its record, validation or checkpoint when one falls due: a
resumed run then writes the same records as one never stopped), is checkpointed, and the
run ends with exit code 128 + the signal's number (130 for Ctrl-C, 143 for SIGTERM), its
lock released, saying what ``--resume`` will do. With several ranks every rank says at
the end of each step whether it was asked to stop (``agree``: one all-reduce of three
numbers), so all stop after the same step and rank 0 saves it; mpiexec forwards a signal
it receives to every rank.

A second signal stops at once: the step in flight is lost, a checkpoint being written
removes its temporary file, the lock is released. With several ranks only rank 0 acts on
it (then ends the others); before the first step (reading the data, the tokenizer) and
after the last (averaging, the test set) there is nothing in flight a checkpoint could
keep, and the first signal stops at once too.

``Interrupted`` (a ``KeyboardInterrupt``) carries the signal and a message saying what
was saved and what ``--resume`` does; the command line prints it and exits with its code.
"""

from __future__ import annotations

import os
import signal
import threading

from scratchformer.app.checkpoint import latest_checkpoint
from scratchformer.app.errors import Interrupted, signal_name
from scratchformer.app.train.rundir import earlier_run

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupts:
    """The run's handlers of SIGINT and SIGTERM (see the module doc), installed on
    entering and the previous ones put back on leaving; in a thread other than the main
    one (where Python runs signal handlers) it installs nothing.

    ``main``: this process is rank 0, which speaks and acts on a second signal;
    ``ranks``: how many run together (under mpiexec, which also acts on a second Ctrl-C,
    the line promises what both do).
    ``phase``: "steps" while a signal only asks to stop after the step in flight;
    anything else stops at once."""

    def __init__(self, main: bool = True, ranks: int = 1):
        self.main, self.ranks = main, ranks
        self.phase = "setup"
        self.signum = 0  # the first signal received during the steps; 0: none
        self._previous: dict = {}

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():
            for s in SIGNALS:
                self._previous[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous = {}

    def _handle(self, signum, frame) -> None:
        if self.phase != "steps":
            raise Interrupted(signum, at_once=True)
        if not self.signum:
            self.signum = signum
            if self.main:  # written at once: os.write is safe in a handler, print is not
                again = "Ctrl-C again" if signum == signal.SIGINT else "a second signal"
                at_once = "stops at once"
                if self.ranks > 1:  # mpiexec's "Press Ctrl-C again to force abort": the same
                    at_once = "stops every rank at once; the checkpoints saved stay"
                os.write(
                    2,
                    f"\n{signal_name(signum)}: stopping after the step in flight, which is "
                    f"saved ({again} {at_once})\n".encode(),
                )
            return
        if self.main:  # the others follow rank 0's end (it may wait for them meanwhile)
            raise Interrupted(self.signum, at_once=True)  # named by the first signal


def agree(world, signum: int, time_up: bool) -> tuple[int, bool]:
    """``(signal, time up)`` as every rank sees them at the end of a step: the signal
    any rank received (SIGINT before SIGTERM), and rank 0's clock for the time limit.
    One small all-reduce with several ranks; nothing with one."""
    if world.size == 1:
        return signum, time_up
    sigint, sigterm, up = world.sum_floats(
        [signum == signal.SIGINT, signum == signal.SIGTERM, time_up and world.main]
    )
    return (signal.SIGINT if sigint else signal.SIGTERM if sigterm else 0), up > 0


def ending(trainer, signum: int, phase: str) -> str:
    """What a signal leaves of ``trainer``'s run, in words, by the phase it came in:
    "saved" (the first during the steps: the step in flight saved), "steps" (a second
    one), "setup" (before the first step) or "end" (averaging, the test set)."""
    name, step = signal_name(signum), trainer.step
    advice = resume_advice(trainer.cfg, trainer.world.size)
    if phase == "saved" and step < trainer.cfg.train.steps:
        return f"stopped by {name} after step {step}, saved: {advice}"
    if phase in ("saved", "end"):  # the last step was trained and saved
        return (
            f"stopped by {name} after training (step {step}, saved): the test set was not "
            f"judged; {advice} and judges it"
        )
    if phase == "steps":
        return f"stopped at once by a second {name} after step {step}; {advice}"
    return f"stopped at once by {name} {before_training(step)}; {advice}"


def before_training(step: int) -> str:
    """``before training began`` (a fresh run), or went on from ``step`` (a resumed one)."""
    return f"before training went on from step {step}" if step else "before training began"


def resume_advice(cfg, ranks: int) -> str:
    """What ``scratchformer train ... --resume`` would do now with the run of ``cfg``,
    read from its directory: continue from its newest checkpoint, or nothing."""
    where = f"--run-dir {cfg.run_dir}" if cfg.run_dir else f"--name {cfg.name}"
    command = f"scratchformer train {where} --resume" + (f" --ranks {ranks}" if ranks > 1 else "")
    latest = latest_checkpoint(cfg.out_dir / "checkpoints")
    if latest is not None:
        return f"`{command}` continues from {latest}"
    if cfg.out_dir.is_dir() and earlier_run(cfg.out_dir):
        return "nothing to resume (no checkpoint was written): start again with --overwrite"
    return "nothing to resume (no checkpoint was written): start it again"


__all__ = [
    "SIGNALS",
    "Interrupted",
    "Interrupts",
    "agree",
    "before_training",
    "ending",
    "resume_advice",
]
