"""The end of a run: the paper's checkpoint averaging, the final model chosen between
the average and the last checkpoint on the validation set, then the test set judged by
both, as the task is used (decoded, sampled or classified); and the progress display of
a long stage.

The average takes the newest ``train.average_last`` checkpoints saved in the last
``AVERAGE_SPAN`` (20%) of the run's steps: the paper averages the last checkpoints of a
converged run, and checkpoints from early in a short run pull the average back towards
a worse model (a 1,000-step reverse run: 55% exact match averaged over its whole length,
79% for the last checkpoint). Whichever of the average and the last checkpoint has the
lower validation cross-entropy (``nll``, the loss without label smoothing; the average
on a tie) is the final model, ``checkpoints/final.npz``, the file every command and doc
names; its metadata and the run's report say which it is and show both scores."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from scratchformer.app.checkpoint import average_checkpoints, list_checkpoints, save_checkpoint
from scratchformer.app.progress import Ticker, progress_bar
from scratchformer.app.train import report
from scratchformer.app.train.rundir import AVERAGED_NAME, FINAL_NAME

#: the share of a run's steps, at its end, whose checkpoints the final average takes
AVERAGE_SPAN = 0.2


def averaging_window(found: list, last: int, step: int) -> list:
    """The ``(step, path)`` of ``found`` the final average takes: the newest ``last`` of
    those saved after ``(1 - AVERAGE_SPAN) * step`` (the last checkpoint always)."""
    recent = [(s, p) for s, p in found if s > (1 - AVERAGE_SPAN) * step]
    return (recent or found[-1:])[-last:] if last >= 1 else []


def no_average(ckpt_dir: Path, last: int, step: int) -> str:
    """Why a run at ``step`` made no average (``average_model`` returned none), in words:
    averaging is off, or the last ``AVERAGE_SPAN`` of the steps holds one checkpoint."""
    if last < 1:
        return "no average: averaging is off (train.average_last = 0)"
    if last == 1:
        return "no average: train.average_last = 1 takes the last checkpoint alone"
    after = int((1 - AVERAGE_SPAN) * step)
    found = list_checkpoints(ckpt_dir) if ckpt_dir.is_dir() else []
    held = [s for s, _ in found if s > (1 - AVERAGE_SPAN) * step] or [step]
    return (
        f"no average: the average takes the checkpoints of the last {AVERAGE_SPAN:.0%} of the "
        f"steps (after step {after}), and only step {held[-1]}'s was saved there: save more "
        "often (--checkpoint-every) to have one"
    )


def average_model(task, config, ckpt_dir: Path, last: int, step: int, meta: dict):
    """The paper's checkpoint averaging: the mean of the checkpoints of ``ckpt_dir`` in
    the ``averaging_window``, saved as averaged.npz with ``meta`` (and the files
    averaged): ``task``'s model for ``config``. Returns ``(model, steps, path)``;
    ``(None, [], None)`` when the window holds the last checkpoint alone (nothing to
    average; an averaged.npz of an earlier ending of the run is removed) or averaging is
    off (``last`` 0)."""
    found = list_checkpoints(ckpt_dir) if ckpt_dir.is_dir() else []
    window = averaging_window(found, last, step)
    if len(window) < 2:
        (ckpt_dir / AVERAGED_NAME).unlink(missing_ok=True)
        return None, [], None
    paths = [p for _, p in window]
    model = task.build_model(config)
    model.load_state_dict(average_checkpoints(paths))
    meta = {**meta, "averaged_from": [p.name for p in paths]}
    out = save_checkpoint(ckpt_dir / AVERAGED_NAME, model, step=step, meta=meta)
    return model, [s for s, _ in window], out


@dataclass
class Final:
    """The final model of a run: "averaged" or "last", the validation cross-entropy of
    each candidate judged, and its file (rank 0's; None elsewhere)."""

    which: str = "last"
    nll: dict = field(default_factory=dict)
    path: Path | None = None
    #: what the run's lines call the validation cross-entropy: "nll" beside a smoothed
    #: "loss", or "loss" itself when the loss is not smoothed (the classifier, the LM)
    name: str = "nll"

    def describe(self) -> str:
        """``the averaged model (dev nll 0.5851; last checkpoint 0.5903)``."""
        name = {"averaged": "the averaged model", "last": "the last checkpoint"}[self.which]
        other = "last" if self.which == "averaged" else "averaged"
        scores = f"dev {self.name} {self.nll[self.which]:.4f}" if self.which in self.nll else ""
        if other in self.nll:
            label = "last checkpoint" if other == "last" else "averaged"
            scores += f"; {label} {self.nll[other]:.4f}"
        return f"{name} ({scores})" if scores else name


def choose_final(task, model, averaged, *, step: int, train, valid: list, meta: dict,
                 ckpt_dir: Path, world=None, name: str = "nll") -> Final:
    """The final model: the averaged one of ``averaged`` (``average_model``'s result) or
    the last checkpoint's ``model``, whichever has the lower validation cross-entropy
    (the average on a tie), judged by rank 0 as validation is (``train.eval_limit``
    examples; the last checkpoint's score is its validation record at ``step`` in
    ``valid`` when there is one), saved as ``final.npz`` with ``meta`` and the choice.
    Every rank of ``world`` returns the choice; ``name``: what the run calls the
    cross-entropy (``Final.name``)."""
    avg_model, avg_steps, _ = averaged
    chosen = Final(name=name)
    if world is None or world.main:

        def nll(m):
            return task.evaluate(m, "valid", train.max_tokens, train.eval_limit)["nll"]

        at_end = [r for r in valid if r.get("step") == step and "nll" in r]
        chosen.nll["last"] = at_end[-1]["nll"] if at_end else nll(model)
        if avg_model is not None:
            chosen.nll["averaged"] = nll(avg_model)
            if chosen.nll["averaged"] <= chosen.nll["last"]:
                chosen.which = "averaged"
        best = avg_model if chosen.which == "averaged" else model
        record = {"model": chosen.which, "valid_nll": chosen.nll}
        if chosen.which == "averaged":
            record["averaged_steps"] = avg_steps
        chosen.path = save_checkpoint(
            ckpt_dir / FINAL_NAME, best, step=step, meta={**meta, "final": record}
        )
    if world is not None and world.size > 1:
        chosen.which, chosen.nll = world.broadcast((chosen.which, chosen.nll))
    return chosen


def shared_average(averaged, world, task, config):
    """Rank 0's ``average_model`` result on every rank of ``world``, for ranks that judge
    the test set together: the others read no file; the averaged parameters are sent
    from rank 0 (one broadcast of the flat buffer). The path is rank 0's alone."""
    if world.size == 1:
        return averaged
    model, steps, path = averaged if world.main else (None, None, None)
    has_model, steps = world.broadcast((model is not None, steps))
    if has_model:
        model = model if world.main else task.build_model(config)
        world.broadcast_(model.flatten().params)
    return model, steps, path


def final_evaluation(
    task, model, averaged, chosen: Final, *, step: int, train, seed: int, show, log, world=None
):
    """Judge the test set with the last checkpoint's ``model`` and the averaged one of
    ``averaged`` (``average_model``'s result); print the final model's examples.
    ``chosen``: which is the final model (``choose_final``); ``train``: the run's
    ``[train]`` settings; ``show``: a ``Show`` (how stages and lines are shown); ``log``:
    writes a record to the metrics log; ``world``: the ranks that judge together (every
    rank calls this; rank 0 shows and logs what the others get too).

    Returns ``(metrics of the final model, its examples)``. With ``train.test`` off
    nothing is judged.
    """
    avg_model, avg_steps, _ = averaged
    if not train.test:
        show.echo("\ntest set: not judged (train.test = false)")
        return None, []

    def judge(m, which: str):
        return show.staged(
            f"test set, {which}",
            task.sizes()["test"],
            lambda tick: task.test(m, train.max_tokens, train.examples, seed, tick, world),
        )

    show.echo(f"\ntest set: {task.sizes()['test']} examples never seen in training")
    m, examples = judge(model, "last checkpoint")
    final = {"last": (m, examples)}
    rows = [("last", f"last checkpoint (step {step})", m)]
    log({"kind": "test", "step": step, "model": "last", "final": chosen.which == "last", **m})
    if avg_model is not None:
        m_avg, ex_avg = judge(avg_model, "averaged model")
        final["averaged"] = (m_avg, ex_avg)
        log(
            {"kind": "test", "step": step, "model": "averaged",
             "final": chosen.which == "averaged", **m_avg}
        )
        steps = ", ".join(map(str, avg_steps))
        rows.append(("averaged", f"average of {len(avg_steps)} checkpoints ({steps})", m_avg))
    m, examples = final[chosen.which]
    for ex in examples:
        show.echo(task.format_example(ex))
    for which, label, mm in rows:
        mark = "  <- the final model" if which == chosen.which else ""
        show.echo(f"  {label}: {report.metrics_text(mm, task.shown_test)}{mark}")
    if "bleu_signature" in m:
        show.echo(f"  sacreBLEU signature: {m['bleu_signature']}")
    if "bleu_missing" in m:
        show.echo(f"  (no BLEU: {m['bleu_missing']})")
    return m, examples


def finish(trainer, valid: list):
    """The end of ``trainer``'s run, on every rank: the average (rank 0 writes it, the
    others receive it), the final model chosen and written, the test set judged.
    Returns ``(test metrics, examples, averaged.npz's path, the Final)``."""
    t, w = trainer.cfg.train, trainer.world
    average = shared_average(
        average_model(
            trainer.task, trainer.model_config, trainer.ckpt_dir, t.average_last,
            trainer.step, trainer.meta(),
        ) if w.main else None,
        w, trainer.task, trainer.model_config,
    )
    chosen = choose_final(
        trainer.task, trainer.model, average, step=trainer.step, train=t, valid=valid,
        meta=trainer.meta(), ckpt_dir=trainer.ckpt_dir, world=w,
        name="nll" if trainer.smoothed else "loss",
    )
    why = ""
    if average[0] is None and w.main:
        why = "; " + no_average(trainer.ckpt_dir, t.average_last, trainer.step)
    trainer.echo(f"final model: {chosen.describe()}{why}")
    test, examples = final_evaluation(
        trainer.task, trainer.model, average, chosen, step=trainer.step, train=t,
        seed=trainer.cfg.seed, show=Show(trainer.progress, trainer.echo), log=trainer.log,
        world=w,
    )
    return test, examples, (average[2], average[1]), chosen


@dataclass
class Show:
    """How a run shows its long stages: ``progress`` bars, or lines through ``echo``."""

    progress: bool
    echo: Callable

    def staged(self, what: str, total: int, stage):
        """``stage(tick)`` with its progress shown (``tick(n)``: n more examples done): a
        progress bar, or without one a line every 10 s, so no stage is a silent stretch."""
        if self.progress:
            counter = progress_bar(total, what, "example")
        else:
            counter = Ticker(total, what, self.echo)
        try:
            return stage(counter.update)
        finally:
            counter.close()
