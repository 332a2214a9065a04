"""The best checkpoint and early stopping, as fairseq keeps ``checkpoint_best.pt`` and
stops a run by ``--patience``.

Every validation scores the model on the dev set by ``train.best_metric``:

    nll         the validation's teacher-forced cross-entropy (lower is better); every task
    bleu, chrf  sacreBLEU's scores of the first ``train.best_sentences`` dev sentences,
                decoded greedily (higher is better); translate
    accuracy    the classifier's dev accuracy (higher is better); classify

The validations of the run's schedule (every ``train.eval_every`` steps, and its last
step) are judged, not those made because a session stopped (a time limit, a signal),
which a run never stopped does not make. A score better than every earlier one
(strictly: a tie is no improvement) writes the
model to ``checkpoints/best.npz`` (parameters only; ``meta["best"]`` holds the metric,
the step and the dev scores there); nothing is written otherwise. When the metric is not
nll, the best model by dev nll is kept too, as ``best_nll.npz``, so that one run tells
which of the two choices scores better on the test set. ``train.patience`` validations
in a row without a better score stop the run (0: never), checkpointed as a last step.

The state (each tracked metric's best step and the dev scores there, and the validations
since the metric last improved) is part of every checkpoint's training state: a resumed
run goes on from it bit for bit (JSON floats read back exactly), writes the same
``best.npz`` and stops at the same step.
"""

from __future__ import annotations

import math

from scratchformer.app.bleu import check_installed
from scratchformer.app.checkpoint import CheckpointError, read_header, save_checkpoint
from scratchformer.app.train import report
from scratchformer.app.train.rundir import BEST_NAME, best_files

#: metric -> whether higher is better
HIGHER = {"nll": False, "bleu": True, "chrf": True, "accuracy": True}
#: the metrics scored by decoding dev sentences (``Task.dev_scores``)
DECODED = ("bleu", "chrf")
#: how the run's lines name a metric (nll: "nll", or "loss" where the loss is not smoothed)
LABELS = {"bleu": "BLEU", "chrf": "chrF", "accuracy": "accuracy"}


def best_name(metric: str, primary: str) -> str:
    """The file of the best model by ``metric``: best.npz for the run's own
    ``train.best_metric`` (``primary``), best_<metric>.npz for the others it tracks."""
    return BEST_NAME if metric == primary else f"best_{metric}.npz"


def label(metric: str, loss_name: str = "nll") -> str:
    """``dev BLEU``; nll as the run's lines call it (``loss_name``)."""
    return f"dev {LABELS.get(metric, loss_name)}"


def score_text(metric: str, score: float) -> str:
    if metric == "accuracy":
        return f"{100 * score:.2f}%"
    return f"{score:.2f}" if metric in DECODED else f"{score:.4f}"


class Best:
    """The best dev scores of a run (see the module doc). ``metric``: the run's
    ``train.best_metric``; ``state``: what ``state()`` returned, from a checkpoint."""

    def __init__(self, metric: str, state: dict | None = None):
        self.metric = metric
        #: the metrics whose best model is kept: the run's own, and nll beside it
        self.tracked = (metric,) + (("nll",) if metric != "nll" else ())
        self.best: dict = {}  # metric -> {"step": s, "scores": {metric: score at s}}
        self.since = 0  # validations since ``metric`` last improved
        if state is not None:
            self._load(state)

    def _load(self, state) -> None:
        try:
            best, since = state["best"], state["since"]
            ok = state["metric"] == self.metric and isinstance(since, int) and since >= 0
            for m, b in best.items():
                ok = ok and m in self.tracked and isinstance(b["step"], int)
                ok = ok and all(isinstance(v, float) for v in b["scores"].values())
        except (KeyError, TypeError, AttributeError):
            ok = False
        if not ok:
            raise CheckpointError(f"the checkpoint's train_state.best is not valid ({state!r:.80})")
        self.best = {m: {"step": b["step"], "scores": dict(b["scores"])} for m, b in best.items()}
        self.since = since

    def state(self) -> dict:
        """What a checkpoint saves (JSON: floats read back exactly)."""
        best = {m: {"step": b["step"], "scores": dict(b["scores"])} for m, b in self.best.items()}
        return {"metric": self.metric, "best": best, "since": self.since}

    def update(self, step: int, scores: dict) -> list[str]:
        """Judge the validation of ``step`` (``scores``: metric -> its dev score): the
        tracked metrics it improves, whose best model it now is."""
        better = []
        for m in self.tracked:
            s = scores.get(m)
            if s is None or not math.isfinite(s):
                continue
            old = self.best.get(m)
            if old is None or (s > old["scores"][m] if HIGHER[m] else s < old["scores"][m]):
                self.best[m] = {"step": step, "scores": {k: float(v) for k, v in scores.items()}}
                better.append(m)
        self.since = 0 if self.metric in better else self.since + 1
        return better

    def exhausted(self, patience: int) -> bool:
        return bool(patience) and self.since >= patience

    def stop_line(self, patience: int, loss_name: str = "nll") -> str:
        """Why the run stops early, naming its best validation."""
        b = self.best[self.metric]
        return (
            f"stopped early: {label(self.metric, loss_name)} has not improved for {self.since} "
            f"validation{'s' if self.since != 1 else ''} (train.patience = {patience}); the best, "
            f"{score_text(self.metric, b['scores'][self.metric])}, was at step {b['step']}"
        )

    def note(self, step: int, better: list, patience: int, loss_name: str = "nll") -> str:
        """What a dev line adds: the best files written, or the best so far."""
        if self.metric in better:
            names = ", ".join(best_name(m, self.metric) for m in better)
            return f" | best so far: wrote {names}"
        b = self.best.get(self.metric)
        if b is None:
            return ""
        more = f", {self.since} of patience {patience}" if patience else ""
        written = f"; wrote {best_name('nll', self.metric)}" if better else ""
        score = score_text(self.metric, b["scores"][self.metric])
        return f" | best {score} at step {b['step']}{more}{written}"


def check_scoring(metric: str) -> None:
    """A decoded metric needs sacreBLEU: refused at the start, not at the first
    validation."""
    if metric in DECODED:
        check_installed()


def dev_scores(m: dict, metric: str) -> dict:
    """The dev scores a validation's record ``m`` gives the tracked metrics."""
    return {k: float(m[k]) for k in ("nll", metric) if m.get(k) is not None}


def validate(trainer, s: int, line) -> str:
    """The validation at step ``s`` (every rank calls it; rank 0 judges and writes):
    teacher-forced metrics, the dev sentences decoded when ``train.best_metric`` needs
    them (the ranks share the decoding), the record, the line (``line(text)``), the best
    models written and TensorBoard's scalars and attention image. Returns why the run
    stops early ('' when it goes on), the same on every rank."""
    t, w, task = trainer.cfg.train, trainer.world, trainer.task
    show = report.Show(trainer.progress, trainer.echo)
    m = None
    if w.main:
        n_valid = task.sizes()["valid"]
        m = show.staged(
            "validation",
            min(n_valid, t.eval_limit or n_valid),
            lambda tick: task.evaluate(
                trainer.model, "valid", t.max_tokens, t.eval_limit, progress=tick
            ),
        )
    if t.best_metric in DECODED:
        n = min(task.sizes()["valid"], t.best_sentences or task.sizes()["valid"])
        decoded = show.staged(
            "dev sentences, greedy",
            n,
            lambda tick: task.dev_scores(trainer.model, t.best_sentences, tick, w),
        )
        if w.main:
            m.update(decoded)
    stop = ""
    if w.main:
        stop = _judge(trainer, s, m, line)
    return w.broadcast(stop) if w.size > 1 else stop


def _judge(trainer, s: int, m: dict, line) -> str:
    """Rank 0's part of ``validate``: record, line, best files, TensorBoard."""
    t, best = trainer.cfg.train, trainer.best
    rec = {"kind": "valid", "step": s, **m}
    # judged on the run's own schedule only: a validation made because a session stopped
    # (time limit, signal) is not one an uninterrupted run makes
    judged = bool(t.eval_every and s % t.eval_every == 0) or s == t.steps
    better = best.update(s, dev_scores(m, t.best_metric)) if judged else []
    for metric in better:
        save_best(trainer, metric, s)
    trainer.valid.append(rec)
    trainer.log(rec)
    name = "nll" if trainer.smoothed else "loss"
    text = report.valid_line(s, t.steps, m, trainer.task.shown_valid, trainer.smoothed)
    if "decode_seconds" in m:
        text += (
            f" | BLEU {m['bleu']:.2f}, chrF {m['chrf']:.2f} (greedy, {m['decoded']} sentences, "
            f"{m['decode_seconds']:.1f} s)"
        )
    line(text + (best.note(s, better, t.patience, name) if judged else ""))
    if trainer.board is not None:
        trainer.board.attention(s, trainer.task, trainer.model)
        trainer.board.flush()
    return best.stop_line(t.patience, name) if judged and best.exhausted(t.patience) else ""


def save_best(trainer, metric: str, step: int):
    """The model of ``step``, the best by ``metric``, as its best file (parameters only,
    through a temporary file renamed into place)."""
    b = trainer.best.best[metric]
    meta = {**trainer.meta(), "best": {"metric": metric, "step": step, "scores": b["scores"]}}
    return save_checkpoint(
        trainer.ckpt_dir / best_name(metric, trainer.best.metric), trainer.model, step=step,
        meta=meta,
    )


def kept_best(ckpt_dir, best: Best) -> dict:
    """``metric -> (step, path)`` of the best files that hold the models ``best``
    records: a file of another step (written by steps a resumed run abandoned and has
    not validated again) is left out."""
    found = {}
    for metric, b in best.best.items():
        path = ckpt_dir / best_name(metric, best.metric)
        try:
            header = read_header(path) if path.is_file() else {}
        except CheckpointError:
            header = {}
        if header.get("step") == b["step"]:
            found[metric] = (b["step"], path)
    return found


def abandoned_best(ckpt_dir, step: int, train) -> list:
    """On resume at ``step``: the best files written after it (by steps the resumed run
    takes again) that it will not write again, as it validates elsewhere or stops
    before: they hold models of no step this run reaches, and go. (A file the run will
    write again is kept meanwhile: the steps repeat exactly, and so do its bytes.)"""
    gone = []
    for path in best_files(ckpt_dir):
        try:
            at = read_header(path).get("step")
        except CheckpointError:
            at = None
        validated = isinstance(at, int) and (at == train.steps or bool(
            train.eval_every and at % train.eval_every == 0
        ))
        again = validated and at <= train.steps
        if at is None or (at > step and not again):
            path.unlink()
            gone.append(path)
    return gone


__all__ = [
    "DECODED",
    "HIGHER",
    "Best",
    "abandoned_best",
    "best_name",
    "check_scoring",
    "kept_best",
    "label",
    "save_best",
    "score_text",
    "validate",
]
