"""The end of a run: the paper's checkpoint averaging, then the test set judged by the
last checkpoint and by the average, as the task is used (decoded, sampled or
classified); and the progress display of a long stage."""

from __future__ import annotations

from scratchformer.checkpoint import average_checkpoints, list_checkpoints, save_checkpoint
from scratchformer.progress import Ticker, progress_bar
from scratchformer.train import report


def average_model(trainer):
    """The paper's checkpoint averaging: the mean of the last ``average_last``
    checkpoints (or of all there are, if fewer), saved as averaged.npz, the run's final
    model. Returns ``(model, steps, path)``; the model is None when it is the last
    checkpoint alone (nothing to compare), and everything None with averaging off."""
    n = trainer.cfg.train.average_last
    found = list_checkpoints(trainer.ckpt_dir) if trainer.ckpt_dir.is_dir() else []
    if n < 1 or not found:
        return None, [], None
    paths = [p for _, p in found[-n:]]
    model = trainer.task.build_model(trainer.model_config)
    model.load_state_dict(average_checkpoints(paths))
    meta = {**trainer.meta(), "averaged_from": [p.name for p in paths]}
    out = save_checkpoint(trainer.ckpt_dir / "averaged.npz", model, step=trainer.step, meta=meta)
    return (model if len(paths) > 1 else None), [s for s, _ in found[-n:]], out


def final_evaluation(trainer):
    """Judge the test set with the last checkpoint and (with ``average_last``) the
    average of the last checkpoints; print the final model's examples.

    Returns ``(metrics of the final model, its examples, averaged.npz or None)``; the
    final model is the averaged one when averaging is on. With ``train.test`` off only
    the average is made.
    """
    t, task, echo = trainer.cfg.train, trainer.task, trainer.echo
    avg_model, avg_steps, averaged = average_model(trainer)
    if not t.test:
        echo("\ntest set: not judged (train.test = false)")
        return None, [], averaged
    echo(f"\ntest set: {task.sizes()['test']} examples never seen in training")
    m_last, examples = _test(trainer, trainer.model, "last checkpoint")
    m = m_last
    rows = [(f"last checkpoint (step {trainer.step})", m_last)]
    trainer.log({"kind": "test", "step": trainer.step, "model": "last", **m_last})
    if avg_model is not None:
        m, examples = _test(trainer, avg_model, "averaged model")
        trainer.log({"kind": "test", "step": trainer.step, "model": "averaged", **m})
        steps = ", ".join(map(str, avg_steps))
        rows.append((f"average of the last {len(avg_steps)} checkpoints ({steps})", m))
    for ex in examples:
        echo(task.format_example(ex))
    for label, mm in rows:
        echo(f"  {label}: {report.metrics_text(mm, task.shown_test)}")
    if "bleu_signature" in m:
        echo(f"  sacreBLEU signature: {m['bleu_signature']}")
    if "bleu_missing" in m:
        echo(f"  (no BLEU: {m['bleu_missing']})")
    return m, examples, averaged


def _test(trainer, model, which: str):
    """``task.test`` of ``model``, shown as it advances."""
    t, task = trainer.cfg.train, trainer.task
    return staged(
        trainer,
        f"test set, {which}",
        task.sizes()["test"],
        lambda tick: task.test(model, t.max_tokens, t.examples, trainer.cfg.seed, tick),
    )


def staged(trainer, what: str, total: int, stage):
    """``stage(tick)`` with its progress shown (``tick(n)``: n more examples done): a
    progress bar, or without one a line every 10 s, so no stage is a silent stretch."""
    if trainer.progress:
        counter = progress_bar(total, what, "example")
    else:
        counter = Ticker(total, what, trainer.echo)
    try:
        return stage(counter.update)
    finally:
        counter.close()
