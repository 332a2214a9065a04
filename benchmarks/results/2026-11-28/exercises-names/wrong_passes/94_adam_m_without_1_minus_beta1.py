# ruff: noqa
"""Exercise adam: Adam's update with bias correction. Write ``adam_update`` below.

Adam (Kingma and Ba, 2015), the paper's optimizer: for every parameter theta
with gradient g, at optimizer step t (1 at the first step):

    m     = beta1 m + (1 - beta1) g          v     = beta2 v + (1 - beta2) g^2
    m_hat = m / (1 - beta1^t)                v_hat = v / (1 - beta2^t)
    theta = theta - lr m_hat / (sqrt(v_hat) + eps)

    scratchformer exercise check adam      grade it
    scratchformer exercise hint adam       the next hint
    scratchformer exercise solution adam   the engine's code

The engine's code: scratchformer/engine/optim/adam.py (docs/derivations.md#adam (on the docs site: derivations.html#adam)).
What you write becomes the update of Adam.step while a model trains with it.
The checker runs it step after step from zero moments and compares theta, m
and v after every step with the engine's Adam:
    6 steps, betas 0.9 / 0.98, eps 1e-4
    4 steps, betas 0.8 / 0.95, eps 1e-6
"""

from __future__ import annotations

import math

from scratchformer.engine import backend
from scratchformer.engine.backend import xp

EXERCISE = "adam"


# -- given: how Adam.step calls the update, yours in training (for reading) ----------------
# scratchformer/engine/optim/adam.py, class Adam:
def step(self, lr: float, apply=None) -> None:
    """Apply one Adam update with learning rate ``lr`` to every parameter, in place.

    ``apply`` (mixed precision): a 0-d bool of the device; the step is taken only
    where it is true (else nothing changes), and the step count ``t`` is then kept on
    the device, so that nothing is read back (``state_dict`` reads it)."""
    if apply is None:
        self.t += 1
    else:
        xp = backend.xp
        self.t = xp.asarray(self.t, dtype=xp.int64) + apply  # counts the steps taken
    update = adam_update if dispatch.reference_forced() else _UPDATE["fn"]
    update(self.flat.params, self.flat.grads, self.m, self.v, self.t, lr,
           self.beta1, self.beta2, self.eps, self.weight_decay,
           *(() if apply is None else (apply,)))

# -- yours: the update ---------------------------------------------------------------------
def adam_update(theta, g, m, v, t, lr, beta1=0.9, beta2=0.98, eps=1e-9):
    """One Adam step, in place.

    theta (n,)  every parameter, one flat array: update it in place
    g     (n,)  its gradient (read only)
    m, v  (n,)  the first and second moments, zeros before step 1: update them in place
    t     int   this step's number, 1 at the first step
    lr, beta1, beta2, eps   floats

    Return nothing: the caller keeps theta, m and v (so ``m = ...`` would lose the
    update; write into the arrays: ``m *= ...``, ``m += ...``, or ``m[...] = ...``).
    """
    m *= beta1
    m += g
    v *= beta2
    v += (1 - beta2) * g * g

    m_hat = m / (1 - beta1**t)
    v_hat = v / (1 - beta2**t)
    theta -= lr * m_hat / (xp.sqrt(v_hat) + eps)
