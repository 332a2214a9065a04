"""The Adam exercise: write the update of one optimizer step, with bias correction, in
place over flat arrays, and have it graded against the engine's ``Adam`` over several
steps (the bias correction of step t must use that t).

The learner writes ``adam_update(theta, g, m, v, t, lr, beta1, beta2, eps)``, the
reference update of optim/adam.py; while a model trains with it, it is put in place with
``optim.adam.use_update`` (with the decoupled weight decay applied before it when a run
has one), so ``Adam.step`` calls it on the flat parameter, gradient and moment buffers.
"""

from __future__ import annotations

import contextlib
import inspect
import textwrap
from dataclasses import dataclass

from scratchformer.engine import backend
from scratchformer.engine.backend import xp
from scratchformer.engine.gradcheck import GradCheckRow, GradReport, rel_error
from scratchformer.engine.nn.flat import FlatParameters
from scratchformer.engine.optim.adam import Adam, adam_update, use_update
from scratchformer.exercises.guard import guarded
from scratchformer.exercises.spec import (
    DRAWN,
    TOL,
    Exercise,
    Mistake,
    draw_seed,
    drawn_case,
    file_of,
    needs,
    rule,
    source,
    stub,
)

_IMPORTS = """\
import math

from scratchformer.engine import backend
from scratchformer.engine.backend import xp"""


def _learner_update(update):
    """The engine's update signature around a learner's ``update``: the decoupled
    weight decay, which the exercise leaves out, applied first (it uses theta before
    the step)."""

    def full(theta, g, m, v, t, lr, beta1=0.9, beta2=0.98, eps=1e-9, weight_decay=0.0):
        if weight_decay:
            theta *= 1.0 - lr * weight_decay
        update(theta, g, m, v, t, lr, beta1, beta2, eps)

    return full


@dataclass(frozen=True)
class _Run:
    label: str
    size: int
    lrs: tuple
    beta1: float
    beta2: float
    eps: float
    seed: int


RUNS = (
    _Run("6 steps, betas 0.9 / 0.98, eps 1e-4", 40, (0.01, 0.02, 0.03, 0.02, 0.01, 0.005),
         0.9, 0.98, 1e-4, 0),
    _Run("4 steps, betas 0.8 / 0.95, eps 1e-6", 24, (0.05, 0.04, 0.03, 0.02), 0.8, 0.95, 1e-6, 1),
)


def _runs() -> tuple:
    """The designed runs, then (while ``drawing``) two of sizes, step counts and
    hyperparameters drawn from the run's seed."""
    seed = draw_seed()
    if seed is None:
        return RUNS
    r, drawn = backend.host_rng(seed), []
    for n in range(2):
        steps, size = int(r.integers(2, 6)), int(r.integers(1, 30))
        lrs = tuple(float(x) for x in r.uniform(0.001, 0.05, steps))
        b1, b2 = round(float(r.uniform(0.7, 0.95)), 3), round(float(r.uniform(0.9, 0.999)), 3)
        eps = float(10.0 ** r.uniform(-8, -4))
        label = f"{DRAWN}: {steps} steps, n {size}, betas {b1} / {b2}, eps {eps:.0e}"
        drawn.append(_Run(label, size, lrs, b1, b2, eps, 50 + n + seed))
    return RUNS + tuple(drawn)


def _start(run: _Run, dtype: str):
    """The run's parameters and gradients: entries of sizes from 1e-4 to 1 (eps and the
    bias correction matter), a few exact zeros."""
    r = backend.host_rng(run.seed)
    theta = r.standard_normal(run.size)
    scale = 10.0 ** r.uniform(-4, 0, run.size)
    grads = [r.standard_normal(run.size) * scale for _ in run.lrs]
    for g in grads:
        g[:2] = 0.0
    return backend.asarray(theta, dtype=dtype), [backend.asarray(g, dtype=dtype) for g in grads]


def _stack(states: list) -> dict:
    return {k: xp.stack([s[k] for s in states]) for k in ("theta", "m", "v")}


@dataclass
class AdamExercise(Exercise):
    name: str = "adam"
    title: str = "Adam's update with bias correction"
    summary: str = "one optimizer step over flat buffers, t counted from 1"
    kind: str = "optimizer"
    section: str = "adam"
    hints: tuple = ()
    mistakes: tuple = ()
    gradients: tuple = ("theta", "m", "v")

    @property
    def functions(self) -> tuple:
        return ("adam_update",)

    def engine(self) -> dict:
        return {"adam_update": adam_update}

    def used_by(self, model) -> str:
        return "every optimizer step (Adam.step)"

    def _head(self) -> str:
        labels = "".join(f"\n    {label}" for label in self.case_labels())
        return (
            f'"""Exercise adam: {self.title}. Write ``adam_update`` below.\n\n'
            "Adam (Kingma and Ba, 2015), the paper's optimizer: for every parameter theta\n"
            "with gradient g, at optimizer step t (1 at the first step):\n\n"
            "    m     = beta1 m + (1 - beta1) g          v     = beta2 v + (1 - beta2) g^2\n"
            "    m_hat = m / (1 - beta1^t)                v_hat = v / (1 - beta2^t)\n"
            "    theta = theta - lr m_hat / (sqrt(v_hat) + eps)\n\n"
            "    scratchformer exercise check adam      grade it\n"
            "    scratchformer exercise hint adam       the next hint\n"
            "    scratchformer exercise solution adam   the engine's code\n\n"
            f"The engine's code: scratchformer/engine/optim/adam.py ({self.link()}).\n"
            "What you write becomes the update of Adam.step while a model trains with it.\n"
            "The checker runs it step after step from zero moments and compares theta, m\n"
            f"and v after every step with the engine's Adam:{labels}\n"
            '"""\n\n'
            f"from __future__ import annotations\n\n{_IMPORTS}\n\n"
            'EXERCISE = "adam"\n\n\n'
        )

    def _given(self) -> str:
        text = textwrap.dedent(inspect.getsource(Adam.step))
        title = "given: how Adam.step calls the update, yours in training (for reading)"
        return f"{rule(title)}\n# scratchformer/engine/optim/adam.py, class Adam:\n{text.rstrip()}"

    def file_text(self) -> str:
        body = stub(
            "adam_update(theta, g, m, v, t, lr, beta1=0.9, beta2=0.98, eps=1e-9)",
            """\
One Adam step, in place.

theta (n,)  every parameter, one flat array: update it in place
g     (n,)  its gradient (read only)
m, v  (n,)  the first and second moments, zeros before step 1: update them in place
t     int   this step's number, 1 at the first step
lr, beta1, beta2, eps   floats

Return nothing: the caller keeps theta, m and v (so ``m = ...`` would lose the
update; write into the arrays: ``m *= ...``, ``m += ...``, or ``m[...] = ...``).""",
            "adam_update",
        )
        return f"{self._head()}{self._given()}\n\n{rule('yours: the update')}\n{body}"

    def solution_text(self) -> str:
        return f"{self._head()}{self._given()}\n\n{rule('the engine: the update')}\n" + "\n\n".join(
            source(f) for f in [adam_update, *needs(_IMPORTS, [adam_update])[1]]
        )

    def case_labels(self) -> list[str]:
        return [run.label for run in _runs()]

    def outputs(self, code: dict, dtype: str = "float64", limit: int | None = None) -> list:
        fn = code["adam_update"]
        path = file_of(fn)
        results = []
        for run in _runs()[:limit]:
            theta, grads = _start(run, dtype)
            m, v = xp.zeros_like(theta), xp.zeros_like(theta)
            states = []
            for t, (g, lr) in enumerate(zip(grads, run.lrs), start=1):

                def make(g=g, t=t, lr=lr, run=run, state=(theta, m, v)):
                    g = g.copy()  # theta, m and v are the update's to write; g only to read
                    return {"g": g}, lambda: fn(*state[:1], g, *state[1:], t, lr, run.beta1,
                                                run.beta2, run.eps)

                with drawn_case(run.label):
                    guarded(make, path, "adam_update")
                states.append({"theta": theta.copy(), "m": m.copy(), "v": v.copy()})
            results.append(_stack(states))
        return results

    def reference(self, dtype: str = "float64") -> list:
        """What the engine's ``Adam`` leaves after every step of every run."""
        results = []
        for run in _runs():
            theta, grads = _start(run, dtype)
            flat = FlatParameters({"theta": theta})
            adam = Adam(flat, run.beta1, run.beta2, run.eps)
            states = []
            for g, lr in zip(grads, run.lrs):
                flat.grads[...] = g
                adam.step(lr)
                states.append({"theta": flat.params.copy(), "m": adam.m.copy(), "v": adam.v.copy()})
            results.append(_stack(states))
        return results

    def numeric(self, code: dict) -> list:
        """Per run, a row per array: the learner's states against the engine's Adam's,
        with ``rel_error`` over every step and entry (float64)."""
        found = []
        for run, got, want in zip(_runs(), self.outputs(code), self.reference()):
            report = GradReport(tol=TOL)
            for name in self.gradients:
                a = backend.asnumpy(got[name]).reshape(-1).astype(float)
                n = backend.asnumpy(want[name]).reshape(-1).astype(float)
                err = rel_error(a, n)
                report.rows.append(
                    GradCheckRow(
                        name,
                        tuple(want[name].shape),
                        err,
                        float(abs(a - n).max()),
                        a.size,
                        a.size,
                        err < TOL,
                        indices=list(range(a.size)),
                        numeric=n,
                        analytic=a,
                    )
                )
            found.append((run.label, report))
        return found

    @contextlib.contextmanager
    def plug(self, code: dict):
        with use_update(_learner_update(code["adam_update"])):
            yield


def _adam(theta, g, m, v, t, lr, beta1=0.9, beta2=0.98, eps=1e-9, *, step=0, correct=True,
          eps_inside=False, in_place=True):
    """The textbook update with one thing wrong (the mistakes)."""
    if in_place:
        m *= beta1
        m += (1.0 - beta1) * g
        v *= beta2
        v += (1.0 - beta2) * g * g
    else:  # the caller's moments never change
        m = beta1 * m + (1.0 - beta1) * g
        v = beta2 * v + (1.0 - beta2) * g * g
    s = t + step
    m_hat = m / (1.0 - beta1**s) if correct else m
    v_hat = v / (1.0 - beta2**s) if correct else v
    denominator = xp.sqrt(v_hat + eps) if eps_inside else xp.sqrt(v_hat) + eps
    theta -= lr * m_hat / denominator


def _mistake(name, says, hint, **wrong) -> Mistake:
    def update(theta, g, m, v, t, lr, beta1=0.9, beta2=0.98, eps=1e-9):
        _adam(theta, g, m, v, t, lr, beta1, beta2, eps, **wrong)

    return Mistake(name, says, hint, {"adam_update": update})


_SECTION = "(docs/derivations.md#adam)"

ADAM = AdamExercise(
    hints=(
        "Update the moments first, in place: m = beta1 m + (1 - beta1) g as m *= beta1 "
        "then m += (1 - beta1) * g; v likewise with g * g.",
        "The moments start at zero, so early on they are too small by the factor "
        "1 - beta^t (t = 1 at the first step): divide it out, with this step's t.",
        "eps is added to sqrt(v_hat), outside the square root; then theta -= lr * m_hat "
        "/ (sqrt(v_hat) + eps), in place.",
    ),
    mistakes=(
        _mistake(
            "bias-correction-late",
            "the bias correction of the wrong step: t + 1 instead of t",
            f"at step t the moments have absorbed t gradients: divide by 1 - beta^t with "
            f"the t you are given, 1 at the first step {_SECTION}",
            step=1,
        ),
        _mistake(
            "bias-correction-early",
            "the bias correction of the wrong step: t - 1 (the first step divides by zero)",
            f"t is 1 at the first step: 1 - beta^t is then 1 - beta, never 0 {_SECTION}",
            step=-1,
        ),
        _mistake(
            "no-bias-correction",
            "no bias correction: m and v used as they are",
            f"m and v start at zero and are biased towards it: divide by 1 - beta1^t and "
            f"1 - beta2^t {_SECTION}",
            correct=False,
        ),
        _mistake(
            "eps-inside-sqrt",
            "eps inside the square root: sqrt(v_hat + eps)",
            f"Adam adds eps to sqrt(v_hat), outside the root {_SECTION}",
            eps_inside=True,
        ),
        _mistake(
            "moments-rebound",
            "the moments rebound (m = ...), not updated in place: they never accumulate",
            f"the caller keeps m and v between steps: write into them (m *= ..., m += ...) "
            f"{_SECTION}",
            in_place=False,
        ),
    ),
)

__all__ = ["ADAM", "AdamExercise", "adam_update"]
