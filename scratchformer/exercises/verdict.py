"""``exercise train``'s verdict: the whole model's gradients on one batch with the
learner's passes in place, against the engine's, every parameter, in float64 and in
float32.

Training curves of two runs differ by chance (other summation orders, an accuracy
measured on a few hundred strings), so they decide nothing. One batch decides: the
default run's model and its first batch, the loss's gradient of every parameter; and
for Adam, two updates of those parameters.

- The model is not at its initialisation: every parameter is drawn away from its
  initial value first (``drawn_away``). At initialisation every LayerNorm's gamma is 1
  and every beta and bias 0, so a pass that uses ``dout`` where ``dout * gamma``
  belongs, or drops a bias's term, gives the right gradients there.
- float64, dropout on with the same masks in both: equal to rounding (``AGREE``).
- float32, the dtype the model trains in, dropout off (a float32 mask is drawn apart
  from float64's): the learner's gradients against the float64 truth, within float32's
  rounding (``AGREE32``); a NaN there fails.

Not equal: each exercise is plugged in alone, and those that make the gradients differ
alone are named.
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
#: the largest relative difference of a float32 gradient from the float64 truth taken
#: for float32's rounding: the engine's own float32 gradients are within 1e-5 of float64's
#: (5e-6 at most, Adam's update, on the default run's batch), a wrong term is off by its
#: own size
AGREE32 = 1e-3
#: the dropout generator's seed of the batch, and the parameters' draw
SEED = 1234
#: how far each parameter is drawn from its initial value: a vector (a gamma, a beta, a
#: bias) by this much, a matrix (a weight, an embedding) by this much of its own spread
AWAY = 0.3


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
    return b, drawn_away(task.build_model(model_config).astype(xp.float64)), model_config


def drawn_away(model, seed: int = SEED):
    """``model`` with every parameter moved off its initial value (``AWAY``), so that
    every parameter matters to every gradient: gammas no longer 1, betas and biases
    no longer 0. An embedding's padding row stays zero, a constant of the model."""
    np = backend.np
    r = backend.host_rng(seed)
    for _, m in model.named_modules():
        pad = getattr(m, "pad_id", None)
        for p in m.params.values():
            host = backend.asnumpy(p)
            scale = AWAY if p.ndim == 1 else AWAY * float(np.std(host))
            step = scale * r.standard_normal(p.shape)
            if pad is not None and p.ndim == 2 and 0 <= pad < p.shape[0]:
                step[pad] = 0.0
            p += backend.asarray(step, dtype=p.dtype)
    return model


def _gradients(model, b, learner=None, names=(), dtype="float64", dropout=True) -> dict:
    """Every parameter's gradient of the loss on ``b``, the model in ``dtype``, with the
    learner's passes of the exercises ``names`` in place (``learner``: an
    isolate.Session, whose stand-ins run them in the learner's process), and the
    parameters after two Adam steps."""
    if learner is not None and hasattr(learner, "anew"):
        learner.anew()  # each exercise's time limit, for this gradient
    m = copy.deepcopy(model)
    if dtype != "float64":
        m.astype(getattr(xp, dtype))
    rng = device.generator(SEED) if dropout else None
    with learner.plugged(names) if names else contextlib.nullcontext():
        m.zero_grad()
        loss, cache = m.loss_forward(*b.inputs, b.targets, rng=rng)
        m.loss_backward(cache)
        found = {k: backend.asnumpy(g).copy() for k, g in m.gradients().items()}
        flat = FlatParameters({k: p.copy() for k, p in m.parameters().items()})
        adam = Adam(flat, 0.9, 0.98, 1e-9)
        for lr in (1e-3, 2e-3):
            flat.grads[...] = xp.concatenate([xp.asarray(found[k]).reshape(-1) for k in flat.names])
            adam.step(lr)
        found["(Adam's update)"] = backend.asnumpy(flat.params).copy()
    return found


def _differ(mine: dict, ref: dict, tol: float = AGREE) -> list[tuple[str, float]]:
    """``[(parameter, relative difference)]`` beyond ``tol``; NaN or inf: ``inf``."""
    found = []
    for k in ref:
        a = mine[k]
        if a.shape != ref[k].shape:
            err = 1.0
        elif not bool(backend.np.isfinite(a).all()):
            err = float("inf")
        else:
            err = relative_error(a, ref[k])
        if err > tol:
            found.append((k, err))
    return found


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
    bad = _differ(_gradients(model, b, learner, names), ref)
    how: dict = {}  # how the gradients were taken where they differ
    if not bad:  # float32, dropout off, against the float64 truth without dropout
        how = {"dtype": "float32", "dropout": False}
        ref = _gradients(model, b, dropout=False)
        bad = _differ(_gradients(model, b, learner, names, **how), ref, AGREE32)
    blamed = []
    if bad and len(names) > 1:
        tol = AGREE32 if how else AGREE
        for name in names:
            if _differ(_gradients(model, b, learner, [name], **how), ref, tol):
                blamed.append(name)
    elif bad:
        blamed = list(names)
    unreached = [] if bad else [name for name in failing if name in names]
    bad.sort(key=lambda kv: -kv[1])
    return {"agree": not bad, "worst": bad[:5], "count": len(bad), "total": len(ref),
            "blamed": blamed, "unreached": unreached, "float32": bool(bad and how)}


def lines(v: dict) -> list[str]:
    """What ``exercise train`` prints of the verdict."""
    if v.get("error"):
        return [f"verdict: your code stopped the check of the whole model: {v['error']}"]
    if v.get("notes"):
        return [f"verdict: no verdict of your passes: {note}" for note in v["notes"]]
    if v["agree"]:
        out = [
            f"verdict: with your backward passes, every one of the {v['total'] - 1} parameter "
            f"gradients of one batch (every parameter drawn away from its initial value; "
            f"float64, dropout on) and Adam's update equal the engine's (to {AGREE:.0e}), "
            f"and in float32 the float64 truth (to {AGREE32:.0e}): your passes are right in "
            "the whole model"
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
    if v.get("float32"):
        out = [
            f"verdict: with your backward passes, {v['count']} of {v['total']} gradients of one "
            f"batch in float32 (dropout off, Adam's update counted as one) differ from the "
            f"float64 truth by more than float32's rounding ({AGREE32:.0e}), though they are "
            "right in float64; the largest:"
        ]
    else:
        out = [
            f"verdict: with your backward passes, {v['count']} of {v['total']} gradients of one "
            f"batch (float64, Adam's update counted as one) differ from the engine's; the "
            "largest:"
        ]
    out += [f"  {k:<40} " + ("NaN or inf" if err == float("inf") else
                             f"relative difference {err:.1e}") for k, err in v["worst"]]
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


__all__ = ["AGREE", "AGREE32", "batch_and_model", "drawn_away", "lines", "verdict"]
