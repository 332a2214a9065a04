"""The run's records around the step (the step itself is the engine's, engine/step.py):
the dropout seed of each micro-batch, the running sums logged between two "train"
records (``Window``), the checks that mixed precision's skipped steps hide no divergence
and that the loss has not exploded (``Divergence``), and the line a stopped run ends
with."""

from __future__ import annotations

import math
import statistics
import time
from collections import deque

from scratchformer.app.train import report
from scratchformer.engine import backend
from scratchformer.engine.backend import xp
from scratchformer.engine.errors import ScratchformerError


def dropout_seed(seed: int, step: int, micro: int, rank: int = 0) -> int:
    """A 63-bit seed for the dropout generator of micro-batch ``micro`` of step ``step``
    on rank ``rank`` (each rank's share has masks of its own)."""
    words = [seed, step, micro] + ([rank] if rank else [])
    ss = backend.np.random.SeedSequence(words)
    return int(ss.generate_state(1, dtype=backend.np.uint64)[0] >> 1)


class Window:
    """The steps between two "train" records of the metrics log.

    Each step's loss and NLL stay on the device (``add``) until the record needs them:
    ``flush`` reads the pending ones back in one transfer (with several ranks, sums the
    ranks' parts), adds them to the window's host sums and returns them per step. A
    checkpoint saves the host sums (``state``, after a flush) and a resumed run starts
    from them (``Window(state)``): when checkpoints fall between two records, the next
    record then averages the same steps as in a run that was never stopped.

    Mixed precision: a step whose scaled gradients overflowed was skipped; its loss is
    left out of the sums and it is counted in ``skipped`` instead (and, past the first
    ``GRACE`` steps of the run, in ``late``: ``[taken, skipped]``, which the run judges:
    ``overflow_problem``). A window of skipped steps only records no loss.
    """

    #: the first steps of a run, whose skipped share is not judged: a first loss scale
    #: too large for the model is halved there until its steps fit
    GRACE = 100

    def __init__(self, state: dict | None = None):
        state = state or {}
        try:
            self.loss = float(state.get("loss", 0.0))
            self.nll = float(state.get("nll", 0.0))
            self.steps = int(state.get("steps", 0))
            self.skipped = int(state.get("skipped", 0))
            self.late = [int(x) for x in state.get("late", (0, 0))][:2]
        except (AttributeError, TypeError, ValueError):
            raise ScratchformerError(
                f"the checkpoint's train_state.window is not valid ({state!r:.80})"
            ) from None
        # [(step, loss, nll, gradient norm, skipped, loss scale)] on the device, not read
        self.pending = []
        self.tokens = 0  # of this process's steps alone: tokens/s is this process's speed
        self.t0 = time.perf_counter()

    def state(self) -> dict:
        """The sums the record averages (JSON numbers: a float's repr reads back exactly);
        ``flush`` first."""
        state = {"loss": self.loss, "nll": self.nll, "steps": self.steps}
        state |= {"skipped": self.skipped} if self.skipped else {}
        return state | ({"late": list(self.late)} if self.late[1] else {})

    def add(self, rec: dict) -> None:
        more = (rec.get("skipped", False), rec.get("loss_scale", 0.0))
        self.pending.append((rec["step"], rec["loss"], rec["nll"], rec["grad_norm"], *more))
        self.tokens += rec["tokens"]

    def flush(self, world=None) -> list[tuple]:
        """Read the pending steps' losses, NLLs, gradient norms and (mixed precision)
        skip flags and loss scales (one transfer; the losses summed over the ranks, the
        rest being the same on each) into the host sums; returns them, ``[(step, loss,
        nll, gradient norm, skipped, loss scale)]`` (a loss scale of 0: none)."""
        if not self.pending:
            return []
        steps = [p[0] for p in self.pending]
        values = xp.stack([xp.asarray(v, dtype=xp.float64) for p in self.pending for v in p[1:]])
        values = backend.asnumpy(values).reshape(len(steps), 5)
        losses = [float(v) for v in values[:, :2].reshape(-1)]
        if world is not None:
            losses = world.sum_floats(losses)
        self.pending = []
        read = [
            (s, losses[2 * i], losses[2 * i + 1], float(values[i, 2]), bool(values[i, 3]),
             float(values[i, 4]))
            for i, s in enumerate(steps)
        ]
        taken = [r for r in read if not r[4]]
        self.loss += sum(r[1] for r in taken)
        self.nll += sum(r[2] for r in taken)
        self.steps += len(taken)
        self.skipped += len(read) - len(taken)
        late = [r for r in read if r[0] > self.GRACE]
        self.late[0] += sum(not r[4] for r in late)
        self.late[1] += sum(r[4] for r in late)
        return read

    def tokens_per_s(self) -> float:
        return self.tokens / max(time.perf_counter() - self.t0, 1e-9)

    def record(self, step: int, epoch: int, rec: dict, tokens_seen: int) -> dict:
        """The "train" record of the window (``flush`` first); with mixed precision, the
        steps skipped since the last record and the loss scale after this step. A window
        whose every step was skipped has no loss, NLL or perplexity (no mean to give)."""
        r = {"kind": "train", "step": step, "epoch": epoch}
        if self.steps:
            r["loss"] = self.loss / self.steps  # the training objective, mean over the window
            r["nll"] = self.nll / self.steps  # without label smoothing: ppl = exp(nll)
            r["ppl"] = perplexity(self.nll / self.steps)
        r |= {
            "lr": rec["lr"],
            "grad_norm": float(rec["grad_norm"]),  # before clipping, of the last step
            "tokens_per_s": self.tokens_per_s(),
            "tokens_seen": tokens_seen,
        }
        if "loss_scale" in rec:
            r["skipped_steps"] = self.skipped
            r["loss_scale"] = float(rec["loss_scale"])
        return r


def train_record(trainer, s: int, rec: dict, bar, t_start: float) -> None:
    """``trainer``'s "train" record of the steps since the last, at step ``s`` (``rec``:
    its step's), logged, with its line (or the progress ``bar``'s fields); a new window."""
    t = trainer.cfg.train
    trainer._check_steps(at_record=True)
    r = trainer.window.record(s, trainer.epoch, rec, trainer.tokens_seen)
    # wall time since the run began (before a resume too)
    r["elapsed"] = trainer.seconds_before + time.perf_counter() - t_start
    trainer.log(r)
    bar.set_postfix(
        **({"loss": f"{r['loss']:.3f}"} if "loss" in r else {}),
        **({"nll": f"{r['nll']:.3f}"} if trainer.smoothed and "nll" in r else {}),
        lr=f"{r['lr']:.2e}",
        tok_s=f"{r['tokens_per_s']:,.0f}",
        refresh=False,
    )
    if not trainer.progress:
        shown = trainer.task.shown_train
        trainer._line(bar, report.train_line(r, t.steps, trainer.smoothed, shown))
    trainer.window = Window()


def overflow_problem(window: Window, scale: float, train, at_record: bool) -> str:
    """Why a mixed-precision run has diverged though it skips its bad steps, or '': its
    loss scale fell below ``train.min_loss_scale`` (halved at every overflow: nearly every
    step overflows float16), or, at a record (``at_record``), more than
    ``train.max_skipped_share`` of the window's steps past the first ``Window.GRACE`` were
    skipped. A skipped step changes nothing, so a run of them would otherwise end as if
    trained, its loss read from the few steps taken."""
    n, k = window.steps + window.skipped, window.skipped
    skipped = f"{k} of the last {n} steps skipped, their float16 gradients overflowing"
    if scale < train.min_loss_scale:
        return (
            f"the loss scale fell to {scale:.3g}, below train.min_loss_scale = "
            f"{train.min_loss_scale:g}, with {skipped}"
        )
    taken, late = window.late
    if at_record and late and late > train.max_skipped_share * (taken + late):
        return (
            f"{late} of the last {taken + late} steps after step {Window.GRACE} were skipped, "
            f"their float16 gradients overflowing (more than train.max_skipped_share = "
            f"{train.max_skipped_share:g}), the loss scale at {scale:.3g}"
        )
    return ""


def perplexity(nll: float) -> float | None:
    """``exp(nll)``, or None where it is beyond a float (nll > 709): a diverged model's
    perplexity is not a number to print, and no clamped one is written either."""
    return math.exp(nll) if nll <= 709.0 else None


class Divergence:
    """A finite training loss that explodes stops the run as a non-finite one does. It is
    judged on the losses the run reads anyway (``Window.flush``: at a "train" record and
    before every checkpoint), so it adds no read from the device. A step diverges when

    - its loss exceeds the loss of guessing uniformly among the model's ``K`` outputs,
      ``U = log K`` (label smoothing or not), by ``max(U, 10)`` nats: a model that sure
      of wrong answers (``p < e^-10`` on average) learns nothing more; or
    - for ``PERSIST`` steps in a row its loss exceeds ``U`` and ``SPIKE`` times the median
      of the ``RECENT`` steps before (at least ``MIN_HISTORY`` of them): a run that had
      learnt something and is now worse than guessing.

    The first rule alone fires on a fresh model, whose loss starts near ``U``. A spike of
    a step or two that recovers stops nothing."""

    RECENT, MIN_HISTORY, SPIKE, PERSIST = 200, 20, 4.0, 3

    def __init__(self, outputs: int):
        self.uniform = math.log(max(outputs, 2))
        self.limit = self.uniform + max(self.uniform, 10.0)
        self.recent: deque = deque(maxlen=self.RECENT)
        self.run = 0  # steps in a row above the second rule's bound
        self.first = 0  # the step the divergence ``check`` reports began

    def judge(self, read: list) -> tuple | None:
        """The first problem among the steps ``read`` (``Window.flush``'s): ``(what,
        step, finite, first)`` for ``Trainer._diverged``, or None. A loss or gradient
        norm that is not finite; a loss that ``check`` finds exploded. A step that mixed
        precision skipped (its gradients overflowed) is no problem: it changed nothing."""
        for s, loss, _, norm, skipped, _ in read:
            if skipped:
                continue
            if not math.isfinite(loss):
                return f"the training loss is {loss}", s, False, None
            if not math.isfinite(norm):
                return f"the gradient norm is {norm}", s, False, None
            exploded = self.check(s, loss)
            if exploded:
                return exploded, s, True, self.first
        return None

    def check(self, step: int, loss: float) -> str:
        """'' for a sound step; else why step ``step`` with ``loss`` diverged (since step
        ``first``)."""
        if loss > self.limit:
            self.first = step
            return (
                f"the training loss is {loss:.4g}, above {self.limit:.3g} (guessing uniformly "
                f"among {round(math.exp(self.uniform))} outputs scores {self.uniform:.3g})"
            )
        why = ""
        if len(self.recent) >= self.MIN_HISTORY:
            median = statistics.median(self.recent)
            if loss > max(self.uniform, self.SPIKE * median):
                self.run += 1
                if self.run >= self.PERSIST:
                    self.first = step - self.run + 1
                    why = (
                        f"the training loss is {loss:.4g} for {self.run} steps, worse than "
                        f"guessing uniformly ({self.uniform:.3g}) and {loss / median:.3g} "
                        f"times its median of the {len(self.recent)} steps before "
                        f"({median:.3g})"
                    )
            else:
                self.run = 0
        self.recent.append(loss)
        return why


def stop_message(
    what: str,
    at: int | None,
    first: int | None,
    finite: bool,
    kept: list,
    step: int,
    checked: int,
) -> str:
    """The line of a run stopped because ``what`` is not finite (or, ``finite``, has
    exploded) at step ``at`` (the loss above its bound since step ``first``, default
    ``at``), or (``at`` None) at a step after the last check, which ran at step
    ``checked``; ``step`` is the step the run reached, ``kept`` its checkpoints
    ``[(step, path)]``. Resuming would repeat the same steps exactly: the advice is a lower
    learning rate.

    The loss of step ``s`` is the model of step ``s - 1``'s: a checkpoint of a step
    ``>= first - 1`` holds a model whose loss diverged, so the last good checkpoint is
    the newest of a step ``<= first - 2`` (when ``at`` is None every loss read so far was
    sound, and so is every checkpoint)."""
    again = "lower the learning rate (--lr-factor, optim.lr) or lengthen the warmup (optim.warmup)"
    bound = math.inf if at is None else (at if first is None else first) - 2
    good = [p for s, p in kept if s <= bound]
    bad = [p.name for s, p in kept if s > bound]
    diverged = ""
    if bad:
        its = "holds" if len(bad) == 1 else "hold"
        diverged = f" ({', '.join(bad)} {its} the model that diverged)"
    last = (
        f"the last good checkpoint is {good[-1]}{diverged}, and resuming it repeats "
        f"these steps exactly: start again (--overwrite) and {again}"
        if good
        else f"no checkpoint was written before the divergence{diverged}; start again "
        f"(--overwrite) and {again}"
        if bad
        else f"no checkpoint was written; start again (--overwrite) and {again}"
    )
    if at is None and step > checked + 1:
        where = f"between steps {checked + 1} and {step}"
    elif at is not None and at < step:  # read at the record of a later step
        where, what = f"at step {step}", f"at step {at}, {what}"
    else:
        where = f"at step {step if at is None else at}"
    return f"training stopped {where}: {what} ({'diverged' if finite else 'not finite'}); {last}"


__all__ = [
    "Divergence",
    "Window",
    "dropout_seed",
    "overflow_problem",
    "perplexity",
    "stop_message",
    "train_record",
]
