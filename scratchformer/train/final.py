"""The end of a run: the paper's checkpoint averaging, then the test set judged by the
last checkpoint and by the average, as the task is used (decoded, sampled or
classified); and the progress display of a long stage."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from scratchformer.checkpoint import average_checkpoints, list_checkpoints, save_checkpoint
from scratchformer.progress import Ticker, progress_bar
from scratchformer.train import report


def average_model(task, config, ckpt_dir: Path, last: int, step: int, meta: dict):
    """The paper's checkpoint averaging: the mean of the newest ``last`` checkpoints of
    ``ckpt_dir`` (or of all there are, if fewer), saved as averaged.npz with ``meta``
    (and the files averaged), the run's final model: ``task``'s model for ``config``.
    Returns ``(model, steps, path)``; the model is None when it is the last checkpoint
    alone (nothing to compare), and everything None with averaging off (``last`` 0)."""
    found = list_checkpoints(ckpt_dir) if ckpt_dir.is_dir() else []
    if last < 1 or not found:
        return None, [], None
    paths = [p for _, p in found[-last:]]
    model = task.build_model(config)
    model.load_state_dict(average_checkpoints(paths))
    meta = {**meta, "averaged_from": [p.name for p in paths]}
    out = save_checkpoint(ckpt_dir / "averaged.npz", model, step=step, meta=meta)
    return (model if len(paths) > 1 else None), [s for s, _ in found[-last:]], out


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


def final_evaluation(task, model, averaged, *, step: int, train, seed: int, show, log, world=None):
    """Judge the test set with the last checkpoint's ``model`` and the averaged one of
    ``averaged`` (``average_model``'s result); print the final model's examples.
    ``train``: the run's ``[train]`` settings; ``show``: a ``Show`` (how stages and lines
    are shown); ``log``: writes a record to the metrics log; ``world``: the ranks that
    judge together (every rank calls this; rank 0 shows and logs what the others get too).

    Returns ``(metrics of the final model, its examples)``; the final model is the
    averaged one when there is one. With ``train.test`` off nothing is judged.
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
    m_last, examples = judge(model, "last checkpoint")
    m = m_last
    rows = [(f"last checkpoint (step {step})", m_last)]
    log({"kind": "test", "step": step, "model": "last", **m_last})
    if avg_model is not None:
        m, examples = judge(avg_model, "averaged model")
        log({"kind": "test", "step": step, "model": "averaged", **m})
        steps = ", ".join(map(str, avg_steps))
        rows.append((f"average of the last {len(avg_steps)} checkpoints ({steps})", m))
    for ex in examples:
        show.echo(task.format_example(ex))
    for label, mm in rows:
        show.echo(f"  {label}: {report.metrics_text(mm, task.shown_test)}")
    if "bleu_signature" in m:
        show.echo(f"  sacreBLEU signature: {m['bleu_signature']}")
    if "bleu_missing" in m:
        show.echo(f"  (no BLEU: {m['bleu_missing']})")
    return m, examples


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
