"""Adam's update read step by step: which of m, v and theta is first wrong, at which
step, and the one change of the update (an uncorrected moment, the bias correction of
another step, eps under the root, g for g^2, ...) that gives the learner's numbers.

Adam is no derivative, so it has no terms to sum (terms.py); its update is written once
more here with each of its parts behind a switch (``_update``), the textbook update with
every switch off. The catalogue (adam.py) keeps its mistakes; these name the rest.
"""

from __future__ import annotations

from scratchformer.engine import backend
from scratchformer.engine.backend import xp
from scratchformer.exercises.spec import LearnerError, Mistake, NotWritten, same

_LINK = "docs/derivations.md#adam"


def _update(theta, g, m, v, t, lr, beta1, beta2, eps, *, m_step=0, v_step=0,
            m_correct=True, v_correct=True, eps_inside=False, root=True, v_g=False,
            m_rate=True, v_rate=True, store=False, swap_betas=False):
    """The reference update (Kingma and Ba's Algorithm 1) with the switches given."""
    if swap_betas:
        beta1, beta2 = beta2, beta1
    m *= beta1
    m += ((1.0 - beta1) if m_rate else 1.0) * g
    v *= beta2
    v += ((1.0 - beta2) if v_rate else 1.0) * (g if v_g else g * g)
    m_hat = m / (1.0 - beta1 ** (t + m_step)) if m_correct else m
    v_hat = v / (1.0 - beta2 ** (t + v_step)) if v_correct else v
    if store:
        m[...] = m_hat
        v[...] = v_hat
    if eps_inside:
        denominator = xp.sqrt(v_hat + eps)
    else:
        denominator = (xp.sqrt(v_hat) if root else v_hat) + eps
    theta -= lr * m_hat / denominator


#: (what the learner's update does, the switches that do it)
VARIANTS = (
    ("m-hat uncorrected: m used for m_hat (no division by 1 - beta1^t)", {"m_correct": False}),
    ("v-hat uncorrected: v used for v_hat (no division by 1 - beta2^t)", {"v_correct": False}),
    ("m-hat and v-hat both uncorrected", {"m_correct": False, "v_correct": False}),
    ("the bias correction of step t+1 in m-hat and v-hat (t + 1 for t)",
     {"m_step": 1, "v_step": 1}),
    ("m-hat's bias correction of step t+1 (t + 1 for t)", {"m_step": 1}),
    ("v-hat's bias correction of step t+1 (t + 1 for t)", {"v_step": 1}),
    ("the bias correction of step t-1 in m-hat and v-hat (t - 1 for t)",
     {"m_step": -1, "v_step": -1}),
    ("eps inside the square root: sqrt(v_hat + eps), where it is sqrt(v_hat) + eps",
     {"eps_inside": True}),
    ("v-hat used without its square root: m_hat / (v_hat + eps)", {"root": False}),
    ("v updated with g where it takes g^2: v = beta2 v + (1 - beta2) g", {"v_g": True}),
    ("m updated with g, not (1 - beta1) g: m = beta1 m + g", {"m_rate": False}),
    ("v updated with g^2, not (1 - beta2) g^2: v = beta2 v + g^2", {"v_rate": False}),
    ("the bias-corrected m-hat and v-hat written back into m and v: the correction "
     "compounds from step to step (m and v keep the moments, m_hat and v_hat are "
     "this step's only)", {"store": True}),
    ("beta1 and beta2 swapped", {"swap_betas": True}),
)


_same = same


def _first_wrong(mine: dict, ref: dict, name: str) -> int | None:
    """The first step (from 1) at which ``name`` differs, or None."""
    a, b = backend.asnumpy(mine[name]), backend.asnumpy(ref[name])
    if a.shape != b.shape:
        return 1
    for step in range(a.shape[0]):
        if not _same(a[step], b[step]):
            return step + 1
    return None


def steps(mine: list, ref: list, labels: list) -> str:
    """"m right at every step, v wrong from step 1, ..." on the first input where
    anything is wrong."""
    for m, r, label in zip(mine, ref, labels):
        said = []
        for name in ("m", "v", "theta"):
            at = _first_wrong(m, r, name)
            said.append(f"{name} right at every step" if at is None else
                        f"{name} wrong from step {at}")
        if any("wrong" in s for s in said):
            return f"step by step against the engine's Adam: {', '.join(said)} (input: {label})"
    return ""


def diagnose(ex, mine: list, ref: list) -> list:
    """``[(Mistake, tensors)]``: the step-by-step comparison, and the one change of the
    update that gives the learner's m, v and theta at every step of every input."""
    labels = ex.case_labels()
    found = []
    said = steps(mine, ref, labels)
    wrong = [n for n in ("m", "v", "theta")
             if any(not _same(a[n], b[n]) for a, b in zip(mine, ref))]
    if said:
        found.append((Mistake("terms:adam-steps", said, f"the update in order, one line at "
                              f"a time ({_LINK})", {}), wrong))
    for i, (says, switches) in enumerate(VARIANTS):
        def update(theta, g, m, v, t, lr, beta1=0.9, beta2=0.98, eps=1e-9, _s=switches):
            _update(theta, g, m, v, t, lr, beta1, beta2, eps, **_s)

        try:
            theirs = ex.outputs(ex.with_code({"adam_update": update}))
        except (LearnerError, NotWritten):
            continue
        if all(_same(a[n], b[n]) for a, b in zip(mine, theirs) for n in ("m", "v", "theta")):
            found.append((Mistake(f"terms:adam-{i}", says, _LINK, {}), wrong))
            break
    return found


__all__ = ["VARIANTS", "diagnose", "steps"]
