"""``exercise train``'s verdict: the whole model's gradients on one batch with the
learner's passes in place, against the engine's, in float64, every parameter.

Training curves of two runs differ by chance (other summation orders, an accuracy
measured on a few hundred strings), so they decide nothing. One batch decides: the
default run's model and its first batch, dropout on with the same masks in both, the
loss's gradient of every parameter; and for Adam, two updates of those parameters. Equal
to rounding (``AGREE``): the learner's passes are the engine's. Not equal: each passing
exercise is plugged in alone, and those that make the gradients differ alone are named.
"""

from __future__ import annotations

import contextlib
import copy

from scratchformer.app.data.batching import TokenBatchSampler
from scratchformer.app.train.tasks import TASKS
from scratchformer.app.train.tasks.base import line_limit
from scratchformer.engine import backend, device
from scratchformer.engine.backend import xp
from scratchformer.engine.nn.flat import FlatParameters
from scratchformer.engine.optim.adam import Adam
from scratchformer.engine.parity import relative_error

#: the largest relative difference (max|a-b|/max|b| per parameter, float64) of a
#: gradient taken for rounding alone: the engine's faster forms sum in another order
AGREE = 1e-8
#: the dropout generator's seed of the batch
SEED = 1234


def batch_and_model(cfg):
    """The first batch of the run ``cfg`` and its model, in float64, made as the
    Trainer makes them (nothing is written: the run's folder is not touched)."""
    task = TASKS[cfg.task.name](cfg.task, line_limit(cfg.model))
    model_config = task.configure(cfg.model, cfg.seed)
    t = cfg.train
    sampler = TokenBatchSampler(
        task.widths("train"), t.max_tokens, cfg.seed, t.max_sentences or None
    )
    b = task.batch("train", sampler.epoch(0)[0])
    return b, task.build_model(model_config).astype(xp.float64), model_config


def _gradients(model, b, learner=None, names=()) -> dict:
    """Every parameter's gradient of the loss on ``b``, with the learner's passes of the
    exercises ``names`` in place (``learner``: an isolate.Session, whose stand-ins run
    them in the learner's process), and the parameters after two Adam steps."""
    m = copy.deepcopy(model)
    with learner.plugged(names) if names else contextlib.nullcontext():
        m.zero_grad()
        loss, cache = m.loss_forward(*b.inputs, b.targets, rng=device.generator(SEED))
        m.loss_backward(cache)
        found = {k: backend.asnumpy(g).copy() for k, g in m.gradients().items()}
        flat = FlatParameters({k: p.copy() for k, p in m.parameters().items()})
        adam = Adam(flat, 0.9, 0.98, 1e-9)
        for lr in (1e-3, 2e-3):
            flat.grads[...] = xp.concatenate([xp.asarray(found[k]).reshape(-1) for k in flat.names])
            adam.step(lr)
        found["(Adam's update)"] = backend.asnumpy(flat.params).copy()
    return found


def _differ(mine: dict, ref: dict) -> list[tuple[str, float]]:
    return [
        (k, err)
        for k in ref
        if (err := relative_error(mine[k], ref[k]) if mine[k].shape == ref[k].shape else 1.0)
        > AGREE
    ]


def verdict(b, model, learner, names, failing=()) -> dict:
    """``{"agree": bool, "worst": [(parameter, rel. difference)], "count": n differing,
    "total": n compared, "blamed": [exercise names], "unreached": [exercise names]}`` for
    the learner's passes of the exercises ``names`` on the batch ``b`` and ``model``
    (``batch_and_model``). Everything here runs in this process, the checker's; only the
    learner's functions run in theirs (``learner``: an isolate.Session). ``unreached``:
    those of ``failing`` (their checks fail) when the gradients are right all the same:
    the model does not call them while the learner's other passes are in place (an
    attention core of one's own computes its own softmax backward), or they are wrong
    only on inputs the model does not give them."""
    names = list(names)
    ref = _gradients(model, b)
    mine = _gradients(model, b, learner, names)
    bad = _differ(mine, ref)
    blamed = []
    if bad and len(names) > 1:
        for name in names:
            if _differ(_gradients(model, b, learner, [name]), ref):
                blamed.append(name)
    elif bad:
        blamed = list(names)
    unreached = [] if bad else [name for name in failing if name in names]
    bad.sort(key=lambda kv: -kv[1])
    return {"agree": not bad, "worst": bad[:5], "count": len(bad), "total": len(ref),
            "blamed": blamed, "unreached": unreached}


def lines(v: dict) -> list[str]:
    """What ``exercise train`` prints of the verdict."""
    if v.get("error"):
        return [f"verdict: your code stopped the check of the whole model: {v['error']}"]
    if v.get("notes"):
        return [f"verdict: no verdict of your passes: {note}" for note in v["notes"]]
    if v["agree"]:
        out = [
            f"verdict: with your backward passes, every one of the {v['total'] - 1} parameter "
            f"gradients of one batch (float64, dropout on) and Adam's update equal the "
            f"engine's (to {AGREE:.0e}): your passes are right in the whole model"
        ]
        if v.get("unreached"):
            names, n = ", ".join(v["unreached"]), len(v["unreached"])
            out.append(
                f"  though {names} {'fails its check' if n == 1 else 'fail their checks'}: "
                "no error reaches the model's gradients here (the model does not call it while "
                "your other passes are in place, as your attention core computes its own "
                "softmax backward, or it is wrong only on inputs the model does not give it); "
                f"fix it all the same: scratchformer exercise check {v['unreached'][0]}"
            )
        return out
    out = [
        f"verdict: with your backward passes, {v['count']} of {v['total']} gradients of one "
        f"batch (float64, Adam's update counted as one) differ from the engine's; the "
        "largest:"
    ]
    out += [f"  {k:<40} relative difference {err:.1e}" for k, err in v["worst"]]
    failing = [n for n in v["blamed"] if n in v.get("failing", ())]
    passing = [n for n in v["blamed"] if n not in failing]
    if failing:
        out.append(
            f"what makes them differ, plugged in alone: {', '.join(failing)} (its check fails "
            f"too: scratchformer exercise check {failing[0]})"
        )
    if passing:
        out.append(
            f"what makes them differ, plugged in alone: {', '.join(passing)}, though it "
            "passes its check: the model gives it inputs the check does not (tell us which)"
        )
    if not v["blamed"]:
        out.append("no one of your passes does it alone: two of them together do")
    return out


__all__ = ["AGREE", "lines", "verdict"]
