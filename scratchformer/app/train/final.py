"""The end of a run: the paper's checkpoint averaging, the final model chosen on the
validation set among the last checkpoint, the average and the best checkpoints
(``train.best``), then the test set judged by each, as the task is used (decoded,
sampled or classified).

The average takes the newest ``train.average_last`` checkpoints saved in the last
``AVERAGE_SPAN`` (20%) of the run's steps: the paper averages the last checkpoints of a
converged run, and checkpoints from early in a short run pull the average back towards
a worse model (a 1,000-step reverse run: 55% exact match averaged over its whole length,
79% for the last checkpoint).

The final model, ``checkpoints/final.npz`` (the file every command and doc names), is
the candidate with the best dev score by ``train.best_metric`` (nll by default: the loss
without label smoothing) among the average, the last checkpoint, ``best.npz`` and, when
the metric is not nll, ``best_nll.npz``; on a tie the first of them in that order. The
last checkpoint's score is its last validation's, a best checkpoint's the validation that
made it; the average alone is scored here (by decoding dev sentences, for BLEU or chrF).
A best checkpoint of the last step is the last checkpoint, named so and not judged
twice. Its metadata and the run's lines say which won, with every candidate's score."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from scratchformer.app.checkpoint import (
    average_checkpoints,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
)
from scratchformer.app.train import report
from scratchformer.app.train.best import DECODED, HIGHER, best_name, kept_best, label, score_text
from scratchformer.app.train.report import Show
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


#: the candidates for the final model, in the order that settles a tie
ORDER = ("averaged", "last", "best", "best_nll")
#: the candidates that are best checkpoints -> the metric they are best by ("" = the run's)
BEST_KEYS = {"best": "", "best_nll": "nll"}


@dataclass
class Final:
    """The final model of a run: which candidate ("averaged", "last", "best",
    "best_nll"), the dev score by ``metric`` of each candidate judged, the step of each
    best checkpoint, and its file (rank 0's; None elsewhere)."""

    which: str = "last"
    nll: dict = field(default_factory=dict)  # candidate -> dev score by ``metric``
    path: Path | None = None
    #: what the run's lines call the validation cross-entropy: "nll" beside a smoothed
    #: "loss", or "loss" itself when the loss is not smoothed (the classifier, the LM)
    name: str = "nll"
    metric: str = "nll"  # train.best_metric: what the choice goes by
    steps: dict = field(default_factory=dict)  # best candidate -> its step
    same: dict = field(default_factory=dict)  # best checkpoint -> the candidate it is
    missing: list = field(default_factory=list)  # best files left out, in words

    @property
    def scores(self) -> dict:
        return self.nll

    def label(self, which: str, long: bool = False) -> str:
        """``the averaged model``, ``last checkpoint``, ``best by dev BLEU (step 2800)``."""
        if which in BEST_KEYS:
            metric = label(BEST_KEYS[which] or self.metric, self.name)
            if long:
                return f"the best checkpoint by {metric}, of step {self.steps[which]}"
            return f"best by {metric} (step {self.steps[which]})"
        if long:
            return {"averaged": "the averaged model", "last": "the last checkpoint"}[which]
        return {"averaged": "averaged", "last": "last checkpoint"}[which]

    def describe(self) -> str:
        """``the averaged model (dev nll 0.5851; last checkpoint 0.5903)``: the final
        model, its score and the others'."""
        parts = []
        if self.which in self.nll:
            parts.append(f"{label(self.metric, self.name)} {self._score(self.which)}")
        for other in ORDER:
            if other != self.which and other in self.nll:
                parts.append(f"{self.label(other)} {self._score(other)}")
        text = self.label(self.which, long=True)
        return f"{text} ({'; '.join(parts)})" if parts else text

    def why(self) -> str:
        """Why it won, and which best checkpoints are the last one."""
        text = ""
        if len(self.nll) > 1:
            how = "highest" if HIGHER[self.metric] else "lowest"
            text = f": the {how} {label(self.metric, self.name)}"
        for which, other in self.same.items():
            metric = BEST_KEYS[which] or self.metric
            what = "the last checkpoint" if other == "last" else f"the best by {label(self.metric)}"
            text += f"; the best by {label(metric, self.name)} is {what}"
        return text + "".join(f"; {m}" for m in self.missing)

    def _score(self, which: str) -> str:
        return score_text(self.metric, self.nll[which])


def _candidates(task, model, averaged, *, step, train, valid, ckpt_dir, best, chosen) -> dict:
    """Rank 0: candidate -> its model, each judged (``chosen.nll``) by the metric."""
    metric = chosen.metric

    def score(m):
        if metric in DECODED:
            return task.dev_scores(m, train.best_sentences)[metric]
        return task.evaluate(m, "valid", train.max_tokens, train.eval_limit)[metric]

    models = {"last": model}
    at_end = [r for r in valid if r.get("step") == step and metric in r]
    chosen.nll["last"] = at_end[-1][metric] if at_end else score(model)
    if averaged[0] is not None:
        models["averaged"] = averaged[0]
        chosen.nll["averaged"] = score(averaged[0])
    if best is None:
        return models
    kept = kept_best(ckpt_dir, best)
    for which, by in BEST_KEYS.items():
        by = by or best.metric
        if (which == "best_nll" and best.metric == "nll") or by not in best.best:
            continue
        b = best.best[by]
        chosen.steps[which] = b["step"]
        if b["step"] == step:
            chosen.same[which] = "last"
        elif by not in kept:
            chosen.missing.append(
                f"{best_name(by, best.metric)} left out: it holds no model of step {b['step']} "
                "(written by steps a resumed run abandoned)"
            )
        elif which == "best_nll" and chosen.steps.get("best") == b["step"]:
            chosen.same[which] = "best"  # one model, best by both: judged once
        else:
            models[which] = load_checkpoint(kept[by][1]).model
            chosen.nll[which] = b["scores"][metric]
    return models


def choose_final(task, model, averaged, *, step: int, train, valid: list, meta: dict,
                 ckpt_dir: Path, world=None, name: str = "nll", best=None):
    """The final model (see the module doc) among the last checkpoint's ``model``, the
    averaged one of ``averaged`` (``average_model``'s result) and the best checkpoints
    ``best`` (a ``train.best.Best``; None: none) records, judged by rank 0 by the dev
    metric of ``best`` (nll without one), saved as ``final.npz`` with ``meta`` and the
    choice. Returns ``(the Final, {candidate: model})`` on every rank of ``world`` (the
    best checkpoints' parameters sent from rank 0); ``name``: what the run calls the
    cross-entropy (``Final.name``)."""
    chosen = Final(name=name, metric=best.metric if best is not None else "nll")
    models = {}
    if world is None or world.main:
        models = _candidates(task, model, averaged, step=step, train=train, valid=valid,
                             ckpt_dir=ckpt_dir, best=best, chosen=chosen)
        higher, chosen.which = HIGHER[chosen.metric], ""
        for which in ORDER:  # the best score; on a tie, the first in ORDER
            if which in chosen.nll:
                s, top = chosen.nll[which], chosen.nll.get(chosen.which)
                if top is None or (s > top if higher else s < top):
                    chosen.which = which
        record = {"model": chosen.which, "metric": chosen.metric,
                  f"valid_{chosen.metric}": chosen.nll}
        if chosen.steps:
            record["best_steps"] = chosen.steps
        if chosen.which == "averaged":
            record["averaged_steps"] = averaged[1]
        chosen.path = save_checkpoint(
            ckpt_dir / FINAL_NAME, models[chosen.which], step=step,
            meta={**meta, "final": record},
        )
    if world is not None and world.size > 1:
        shared = (chosen.which, chosen.nll, chosen.steps, chosen.same, chosen.missing)
        chosen.which, chosen.nll, chosen.steps, chosen.same, chosen.missing = world.broadcast(
            shared
        )
        for which in ("best", "best_nll"):
            if which in chosen.nll:
                models[which] = shared_model(models.get(which), world, task, model.config)
    models["last"] = model
    if averaged[0] is not None:
        models["averaged"] = averaged[0]
    return chosen, models


def shared_model(model, world, task, config):
    """Rank 0's ``model`` on every rank of ``world`` (one broadcast of its flat buffer)."""
    model = model if world.main else task.build_model(config)
    world.broadcast_(model.flatten().params)
    return model


def shared_average(averaged, world, task, config):
    """Rank 0's ``average_model`` result on every rank of ``world``, for ranks that judge
    the test set together: the others read no file; the averaged parameters are sent
    from rank 0 (one broadcast of the flat buffer). The path is rank 0's alone."""
    if world.size == 1:
        return averaged
    model, steps, path = averaged if world.main else (None, None, None)
    has_model, steps = world.broadcast((model is not None, steps))
    if has_model:
        model = shared_model(model, world, task, config)
    return model, steps, path


def final_evaluation(
    task, models: dict, chosen: Final, *, step: int, train, seed: int, show, log, world=None,
    averaged_steps=(),
):
    """Judge the test set with each candidate of ``models`` (``choose_final``'s) in the
    order last, averaged, best, best_nll; print the final model's examples. ``chosen``:
    which is the final model; ``train``: the run's ``[train]`` settings; ``show``: a
    ``Show`` (how stages and lines are shown); ``log``: writes a record to the metrics
    log; ``world``: the ranks that judge together (every rank calls this; rank 0 shows
    and logs what the others get too).

    Returns ``(metrics of the final model, its examples)``. With ``train.test`` off
    nothing is judged.
    """
    if not train.test:
        show.echo("\ntest set: not judged (train.test = false)")
        return None, []
    show.echo(f"\ntest set: {task.sizes()['test']} examples never seen in training")
    judged, rows = {}, []
    for which in ("last", "averaged", "best", "best_nll"):
        if which not in models:
            continue
        if which == "last":
            text = f"last checkpoint (step {step})"
        elif which == "averaged":
            steps = ", ".join(map(str, averaged_steps))
            text = f"average of {len(averaged_steps)} checkpoints ({steps})"
        else:
            text = chosen.label(which)
        m, examples = show.staged(
            f"test set, {'averaged model' if which == 'averaged' else text.split(' (')[0]}",
            task.sizes()["test"],
            lambda tick, m=models[which]: task.test(
                m, train.max_tokens, train.examples, seed, tick, world
            ),
        )
        judged[which] = (m, examples)
        rows.append((which, text, m))
        extra = {"model_step": chosen.steps[which]} if which in chosen.steps else {}
        log({"kind": "test", "step": step, "model": which, "final": chosen.which == which,
             **extra, **m})
    m, examples = judged[chosen.which]
    for ex in examples:
        show.echo(task.format_example(ex))
    for which, text, mm in rows:
        mark = "  <- the final model" if which == chosen.which else ""
        show.echo(f"  {text}: {report.metrics_text(mm, task.shown_test)}{mark}")
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
    chosen, models = choose_final(
        trainer.task, trainer.model, average, step=trainer.step, train=t, valid=valid,
        meta=trainer.meta(), ckpt_dir=trainer.ckpt_dir, world=w,
        name="nll" if trainer.smoothed else "loss", best=trainer.best,
    )
    why = ""
    if average[0] is None and w.main:
        why = "; " + no_average(trainer.ckpt_dir, t.average_last, trainer.step)
    line = f"final model: {chosen.describe()}{chosen.why()}{why}"
    trainer.echo(line)
    if trainer.board is not None:
        trainer.board.text("final model", line, trainer.step)
    test, examples = final_evaluation(
        trainer.task, models, chosen, step=trainer.step, train=t,
        seed=trainer.cfg.seed, show=Show(trainer.progress, trainer.echo), log=trainer.log,
        world=w, averaged_steps=average[1],
    )
    return test, examples, (average[2], average[1]), chosen
