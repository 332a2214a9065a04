"""The training loop, once, for every task: the paper's recipe, importable and resumable.

    from scratchformer.app.train import TrainConfig, Trainer
    result = Trainer(TrainConfig.load("copy")).run()
    result.test                       # the final model's test metrics

``Trainer`` keeps the run: the data and the position in it, the run directory,
checkpoints, the lock, signals and logging; the engine's ``Stepper`` (engine/step.py)
keeps the model, its flat buffers, Adam, the schedule and the precision policy, and
takes the steps. One optimizer step ``s`` (counted from 1):

    1. draw ``accum_steps`` token-budget batches (the data order is a function of
       ``(seed, epoch)``; the position in it is part of the saved state)
    2. for each micro-batch i: forward with dropout (generator seeded by
       ``(seed, s, i)``), backward of ``n_i * loss_i`` (n_i = its targets)
    3. divide every gradient by ``sum_i n_i``: the gradient of the mean loss over the
       union of the micro-batches, exactly as if they were one batch (with several
       processes, each takes its share of every micro-batch and one all-reduce sums
       their gradients and counts first: ``distributed.py``)
    4. clip the global gradient norm, ``lr = schedule(s)``, one Adam step
    5. at the next record, stop with an error naming the step if the loss or the
       gradient norm is not finite (in mixed precision an overflow skips the step
       instead: the loss scale is halved, and the record counts it)

Because every source of randomness is a function of ``(seed, step)`` or
``(seed, epoch)``, a checkpoint holding the parameters, Adam's moments, the step and
the data position resumes bit for bit: ``N`` steps + resume + ``N`` steps gives the
same losses and parameters as ``2N`` steps in one run. ``time_limit`` stops a run early
after the step that passes it (validated and checkpointed as a last step); ``--resume``
then continues it. Ctrl-C or SIGTERM stops it after the step in flight, checkpointed
(``interrupts``).

Outputs in the run directory (``runs/<name>`` by default): ``config.json``,
``metrics.jsonl`` (one JSON record per line), ``checkpoints/checkpoint_<step>.npz``,
``best.npz`` (the best model by ``train.best_metric``: ``best``), ``averaged.npz`` (the
mean of the last ``average_last``), ``final.npz`` (the final model) and, with
``train.tensorboard``, TensorBoard's event files (``board``). The end of a run judges
the test set as the task is used (decoded, sampled or classified), with the last
checkpoint, the average and the best checkpoints.
"""

from __future__ import annotations

import time
from pathlib import Path

from tqdm.auto import tqdm

from scratchformer.app import distributed
from scratchformer.app.checkpoint import checkpoint_name, list_checkpoints, save_checkpoint
from scratchformer.app.data.batching import TokenBatchSampler
from scratchformer.app.errors import Interrupted, TrainingDiverged
from scratchformer.app.progress import clock, terminal
from scratchformer.app.train import board, final, report
from scratchformer.app.train.best import Best, check_scoring, validate
from scratchformer.app.train.config import TrainConfig
from scratchformer.app.train.interrupts import Interrupts, agree, ending
from scratchformer.app.train.limits import (
    check_accumulation,
    check_training_memory,
    local_processes,
)
from scratchformer.app.train.records import (
    Divergence,
    Window,
    dropout_seed,
    overflow_problem,
    stop_message,
    train_record,
)
from scratchformer.app.train.report import TrainResult
from scratchformer.app.train.resume import resume_run, share_state
from scratchformer.app.train.rundir import (
    LOCK_NAME,
    RunLock,
    append_record,
    best_files,
    clear_for_fresh_run,
    event_files,
    prune_checkpoints,
    refuse_foreign_files,
    refuse_links_out,
    remove_temporaries,
    write_config,
)
from scratchformer.app.train.tasks import TASKS
from scratchformer.app.train.tasks.base import line_limit
from scratchformer.engine import backend, device
from scratchformer.engine.step import Stepper


def _quiet(*args) -> None:
    """The ``echo`` of ranks other than 0."""


#: without a progress bar, the longest stretch of training steps left without a line: a
#: ``  training: step/steps (elapsed, time left)`` line is written after the step that
#: reaches it
TICK_SECONDS = 10.0


def say(*args) -> None:
    """The default ``echo``: print at once, so that a log file follows the run."""
    print(*args, flush=True)


class Trainer:
    """Holds the task, model, optimizer and position of one run.

    ``Trainer(cfg).run()`` trains to ``cfg.train.steps``; ``resume`` (a checkpoint path,
    or "latest" for the newest in the run directory) continues a run exactly;
    ``overwrite`` lets a fresh run replace the files of an earlier one in its directory;
    ``progress``: a progress bar on stderr where stderr is a terminal (elsewhere, and
    with ``progress=False``, a log line every ``log_every`` steps, and a line saying
    how far training is wherever ``TICK_SECONDS`` would otherwise pass without one).
    """

    def __init__(
        self, cfg: TrainConfig, *, resume=None, overwrite=False, progress=True, echo=say, world=None
    ):
        # ``world``: the processes that train together (``distributed.py``); rank 0 alone
        # writes and speaks, the others compute their share of every batch
        self.world = w = world or distributed.world()
        # a bar only where it can be watched: a log file gets lines (progress.terminal)
        self.progress = progress and w.main and terminal()
        self.cfg, self.echo = cfg, (echo if w.main else _quiet)
        for note in cfg.notes:
            self.echo(note)
        self.run_dir = cfg.out_dir
        self.ckpt_dir = self.run_dir / "checkpoints"
        self.metrics_path = self.run_dir / "metrics.jsonl"

        lines = line_limit(cfg.model)
        self.task = TASKS[cfg.task.name](cfg.task, lines) if w.main else None
        w.broadcast(None)  # the other ranks build the task after rank 0, from its caches
        if self.task is None:
            self.task = TASKS[cfg.task.name](cfg.task, lines)
        t, o = cfg.train, cfg.optim
        self.model_config = self.task.configure(cfg.model, cfg.seed)
        check_training_memory(  # before any parameter is allocated
            self.task.model_spec(), self.model_config, t.max_tokens, local_processes(w.size)
        )
        self.sampler = TokenBatchSampler(
            self.task.widths("train"), t.max_tokens, cfg.seed, t.max_sentences or None
        )
        check_accumulation(t.accum_steps, len(self.sampler))
        self.model = self.task.build_model(self.model_config)
        outputs = getattr(self.model, "num_classes", self.model_config.vocab_size)
        self.divergence = Divergence(outputs)  # a finite loss that explodes stops the run
        self.smoothed = bool(self.model_config.eps_ls)  # the loss shown is not the NLL
        self.best = Best(t.best_metric)  # best.npz and early stopping (rank 0's counts)
        self.board = None  # TensorBoard's event file, while the run writes one (rank 0)
        self.valid: list = []  # the validation records of this process
        self.stepper = Stepper(self.model, o, t, self.model_config.d_model, w)
        self.flat = self.stepper.flat  # every parameter in one array, every gradient too
        # Position: optimizer steps done, and the next batch of the data order.
        self.step, self.epoch, self.batch_index = 0, 0, 0
        self.tokens_seen = 0
        self.seconds_before = 0.0  # training wall time before this process (set on resume)
        self.t_start = time.perf_counter()  # of this process
        self.tokens_seen_here = 0  # by this process
        self.aside_seconds = 0.0  # this process's validations and checkpoints
        self.last_checkpoint: Path | None = None
        self.saved: list = []  # [(step, path)] of the checkpoints resumed or written
        self.window = Window()  # the sums of the next "train" record (saved for resume)
        self.losses: list = []  # [(step, loss)] of the steps checked (``_check_steps``)
        self.checked_step = 0  # the last step whose loss was read and checked
        self.lock = None
        self.interrupts = Interrupts(w.main, w.size)  # the run's signal handlers, while it runs
        if w.main:
            check_scoring(t.best_metric)  # sacreBLEU for a dev BLEU: said before any work
            board.check_installed(t.tensorboard)
            refuse_foreign_files(self.run_dir)  # a folder with files of ours it did not write
            refuse_links_out(self.run_dir)  # or with links out of it at the names it writes
            # locked before anything in the directory changes; released when ``run`` ends
            self.lock = RunLock(self.run_dir).acquire(echo)
            try:  # refused: the directory is let go at once (the exception may be kept)
                if resume:
                    resume_run(self, resume, overwrite)
                else:
                    clear_for_fresh_run(self.run_dir, overwrite)
                remove_temporaries(self.run_dir, echo)
            except BaseException:
                self.lock.release()
                raise
        share_state(self)
        if w.size > 1:  # a rank that ends the job clears rank 0's name from the lock
            holder = w.broadcast(self.lock.holder if w.main else None)
            if not w.main:
                path = self.run_dir / LOCK_NAME
                w.before_abort.append(lambda: RunLock.clear_holder(path, holder))

    # -- the run directory ------------------------------------------------------------------
    # -- state -------------------------------------------------------------------------------
    def train_state(self) -> dict:
        return {
            "step": self.step,
            "epoch": self.epoch,
            "batch_index": self.batch_index,
            "tokens_seen": self.tokens_seen,
            "seed": self.cfg.seed,
            "seconds": self.seconds_before + time.perf_counter() - self.t_start,
            "window": self.window.state(),
            "best": self.best.state(),
            "data": self.task.fingerprint(),
            "ranks": self.world.size,
            **self.stepper.state(),
        }

    def meta(self) -> dict:
        # the data's fingerprint too: averaging refuses checkpoints of other data
        return {
            **self.task.meta(),
            "train_config": self.cfg.to_dict(),
            "data": self.task.fingerprint(),
        }

    def save(self) -> Path:
        """Checkpoint the run (rank 0 writes); never of a non-finite state (the losses of
        the steps since the last check, ``nonfinite_state``) nor of ranks whose
        parameters differ."""
        since = self.checked_step
        self._check_steps()
        bad = self.stepper.nonfinite()
        if bad:
            self.checked_step = since  # it happened at some step after the last check
            self._diverged(bad)
        self.world.check_equal(self.flat.params, "parameters")
        if not self.world.main:
            self.last_checkpoint = self.ckpt_dir / checkpoint_name(self.step)
            self.saved.append((self.step, self.last_checkpoint))
            return self.last_checkpoint
        if self.board is not None:  # what a resume from this checkpoint will not redo
            self.board.flush()
        path = save_checkpoint(
            self.ckpt_dir / checkpoint_name(self.step),
            self.model,
            step=self.step,
            optimizer=self.stepper.optimizer,
            meta=self.meta(),
            train_state=self.train_state(),
        )
        self.last_checkpoint = path
        self.saved.append((self.step, path))
        prune_checkpoints(self.ckpt_dir, self.cfg.train)
        return path

    def log(self, record: dict) -> None:
        if self.world.main:
            append_record(self.metrics_path, record)
            if self.board is not None:
                self.board.record(record)

    # -- one step ----------------------------------------------------------------------------
    def next_batch(self):
        """The next micro-batch of the data order; moves to the next epoch when needed."""
        batches = self.sampler.epoch(self.epoch)
        if self.batch_index >= len(batches):
            self.epoch, self.batch_index = self.epoch + 1, 0
            batches = self.sampler.epoch(self.epoch)
        idx = distributed.share(batches[self.batch_index], self.world)
        self.batch_index += 1
        return self.task.batch("train", idx) if len(idx) else None  # None: an empty share

    def train_step(self) -> dict:
        """One optimizer step over ``accum_steps`` micro-batches (see the module doc).
        Its loss, NLL and norm stay on the device: read at the next record or save, where
        a value that is not finite, or has exploded, is reported."""
        cfg = self.cfg
        s = self.step + 1
        batches = [self.next_batch() for _ in range(cfg.train.accum_steps)]
        r = self.world.rank
        rngs = [device.generator(dropout_seed(cfg.seed, s, i, r)) for i in range(len(batches))]
        rec = self.stepper.step(s, batches, rngs)
        self.step = s
        self.tokens_seen += rec["tokens"]
        return rec

    def _check_steps(self, at_record: bool = False) -> list:
        """Read the losses of the steps since the last check (one transfer; see
        ``Window.flush``) and stop the run if one, or the last gradient norm, is not
        finite, or its steps overflow float16 (``overflow_problem``; ``at_record``: the
        window's share too). Returns them, ``[(step, loss, nll, norm)]``; the run's
        ``losses`` grow by them."""
        read = self.window.flush(self.world)
        self.losses += [(s, loss) for s, loss, _, _, skipped, _ in read if not skipped]
        problem = self.divergence.judge(read)
        if problem:
            self._diverged(*problem)
        scale = self.stepper.loss_scale() if read else None
        why = scale is not None and overflow_problem(self.window, scale, self.cfg.train, at_record)
        if why:
            self._diverged(why, read[-1][0], True)
        self.checked_step = self.step
        return read

    def _diverged(
        self, what: str, step: int | None = None, finite: bool = False, first: int | None = None
    ):
        """Stop: ``what`` is not finite (or, ``finite``, has exploded: ``Divergence``) at
        ``step`` (the loss above its bound since step ``first``, default ``step``), or
        (None) at a step after the last check. The line (``stop_message``) names the last
        good checkpoint and the advice."""
        kept = [(s, p) for s, p in self.saved if not self.world.main or p.is_file()]
        msg = stop_message(what, step, first, finite, kept, self.step, self.checked_step)
        self.log({"kind": "error", "step": self.step if step is None else step, "message": msg})
        raise TrainingDiverged(msg)

    # -- the run -----------------------------------------------------------------------------
    def run(self, final_eval: bool = True) -> TrainResult:
        """Train to ``train.steps`` (or the time limit), validating and checkpointing on
        the way; then, with ``final_eval``, judge the test set."""
        limits = backend.blas_threads(self.cfg.train.threads)
        try:
            with limits, Interrupts(self.world.main, self.world.size) as self.interrupts:
                return self._run(final_eval)
        except Interrupted as e:
            if self.world.main and not e.message:  # stopped where it was
                e.message = ending(self, e.signum, self.interrupts.phase)
            raise
        finally:
            if self.board is not None:
                self.board.close()
                self.board = None
            if self.lock:
                self.lock.release()

    def _run(self, final_eval: bool) -> TrainResult:
        cfg = self.cfg
        if self.world.main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            write_config(self.run_dir, cfg.to_dict())
            if cfg.train.tensorboard:  # a new file for this process, from its first step
                self.board = board.Board(self.run_dir, self.step, self.echo)
        lines = report.header(
            cfg, self.task, self.model, len(self.sampler), self.run_dir, self.world.size,
            self.seconds_before,
        )
        for line in [*lines, *self.task.notes()]:  # the run, then what the data told
            self.echo(line)
        if self.step:
            self.echo(f"resuming {cfg.name} at step {self.step} from {self.last_checkpoint}")
        t_start = self.t_start = time.perf_counter()
        self.interrupts.phase = "steps"
        first = self.step
        losses, valid, stopped = self._loop(t_start)
        train_seconds = time.perf_counter() - t_start
        if self.interrupts.signum:  # the step in flight finished and was saved
            signum = self.interrupts.signum
            raise Interrupted(signum, ending(self, signum, "saved") if self.world.main else "")
        if self.last_checkpoint is None:
            self.save()
        self.interrupts.phase = "end"
        # rank 0 alone reads the directory; the others are told what it holds
        kept = [p for _, p in list_checkpoints(self.ckpt_dir)] if self.world.main else None
        kept = self.world.broadcast(kept)
        test, examples, averaged, chosen = None, [], (None, []), None
        if final_eval:  # every rank judges: the ranks share the test set's decoding
            test, examples, averaged, chosen = final.finish(self, valid)
        elapsed = time.perf_counter() - t_start
        # tokens/s of the steps alone: validation and saving are left out
        speed = self.tokens_seen_here / max(train_seconds - self.aside_seconds, 1e-9)
        self.echo(
            f"done: step {self.step}, {self.step - first} steps in {clock(train_seconds)} "
            f"({speed:,.0f} tokens/s), {clock(elapsed)} with evaluation"
        )
        more = best_files(self.ckpt_dir) + event_files(self.run_dir) if self.world.main else []
        for line in report.files_written(self.run_dir, kept, averaged, chosen, self.best, more):
            self.echo(line)
        files = [self.run_dir / "config.json", self.metrics_path, *kept]
        files += [chosen.path] if chosen is not None and chosen.path is not None else []
        files += more
        return TrainResult(
            step=self.step,
            losses=losses,
            valid=valid,
            test=test,
            examples=examples,
            checkpoint=self.last_checkpoint,
            run_dir=self.run_dir,
            elapsed=elapsed,
            stopped=stopped,
            files=files + ([averaged[0]] if averaged[0] else []),
        )

    def _loop(self, t_start: float):
        """Steps until ``train.steps`` or the time limit; ``(losses, valid records, why it
        stopped early or "")``. Nothing of a step is read back from the device here: its
        loss is read, with the others since the last record, when the next one is made
        (or a checkpoint saved), and so is the progress bar's."""
        t = self.cfg.train
        self.valid = valid = []
        # a resumed run that stopped early has nothing to train (train.patience: more)
        stopped = self.best.stop_line(t.patience) if self.best.exhausted(t.patience) else ""
        if stopped:
            self.echo(stopped + " (raise train.patience to train on)")
        self.losses, self.checked_step = [], self.step
        first = self.step
        self.tokens_seen_here, self.aside_seconds = 0, 0.0
        window = self.window
        self.said = t_start  # when the last line was written (a log's heartbeat)
        bar = tqdm(
            total=t.steps,
            initial=self.step,
            disable=not self.progress,
            unit=" steps",  # "12.5 steps/s"
            dynamic_ncols=True,
        )
        try:
            while self.step < t.steps and not stopped:
                rec = self.train_step()
                s = self.step
                self.tokens_seen_here += rec["tokens"]
                window.add(rec)
                bar.update(1)
                time_up = bool(t.time_limit) and time.perf_counter() - t_start >= t.time_limit
                # every rank stops after the same step: a signal any rank received, or
                # rank 0's clock
                signum, time_up = agree(self.world, self.interrupts.signum, time_up)
                if time_up:
                    more = " more" if self.seconds_before else ""  # as the plan said
                    stopped = f"time limit of {t.time_limit:g} s{more} reached after step {s}"
                last = s == t.steps or bool(stopped)
                t_aside = time.perf_counter()
                early = self._step_end(s, rec, last, bar, t_start)
                if early and not stopped:
                    stopped = early
                if not self.progress and time.perf_counter() - self.said >= TICK_SECONDS:
                    here = time.perf_counter() - t_start
                    line = report.progress_line(s, first, t.steps, here, self.seconds_before, t)
                    self._line(bar, line)
                window = self.window  # a new one after a record
                if signum:  # the step's own records, then saved (interrupts.py)
                    self.interrupts.signum = signum
                    if self.last_checkpoint != self.ckpt_dir / checkpoint_name(s):
                        self.save()
                    break
                aside = time.perf_counter() - t_aside
                window.t0 += aside  # tokens/s: not validation, saving
                self.aside_seconds += aside
                if stopped:
                    self._line(bar, stopped + ("" if early else " (continue with --resume)"))
                    break
        finally:
            bar.close()
        return self.losses, valid, stopped

    def _step_end(self, s: int, rec: dict, last: bool, bar, t_start: float) -> str:
        """What the end of step ``s`` writes: its "train" record every ``log_every``
        steps, a validation every ``eval_every`` (``best.validate``), a checkpoint every
        ``checkpoint_every`` (each also at the ``last`` step, and at a validation that
        stops the run early). Returns why it stops early, or ''."""
        t = self.cfg.train
        logged = (t.log_every and s % t.log_every == 0) or last
        if logged:
            train_record(self, s, rec, bar, t_start)
        early = ""
        if (t.eval_every and s % t.eval_every == 0) or last:
            early = validate(self, s, lambda line: self._line(bar, line))
        if early and not logged:  # the step that ends the run has its record, as a last
            train_record(self, s, rec, bar, t_start)
        if (t.checkpoint_every and s % t.checkpoint_every == 0) or last or early:
            self.save()
        return early

    def _line(self, bar, line: str) -> None:
        """A line of the run's log: above the progress bar, or through ``echo``."""
        self.said = time.perf_counter()
        if self.progress:
            bar.write(line)
        else:
            self.echo(line)


def train(
    cfg: TrainConfig | None = None,
    *,
    resume=None,
    overwrite=False,
    progress=True,
    echo=say,
    final_eval=True,
) -> TrainResult:
    """Train a run to ``cfg.train.steps`` (the default run when ``cfg`` is None)."""
    cfg = cfg or TrainConfig.default()
    trainer = Trainer(cfg, resume=resume, overwrite=overwrite, progress=progress, echo=echo)
    return trainer.run(final_eval=final_eval)


__all__ = ["TrainResult", "Trainer", "train"]
