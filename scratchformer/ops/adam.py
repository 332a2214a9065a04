"""Adam's update (Kingma and Ba, 2015), with optional decoupled weight decay (AdamW).

For every parameter ``theta`` with gradient ``g``, at optimizer step ``t`` (counted from 1):

    m     = beta1 * m + (1 - beta1) * g               first moment
    v     = beta2 * v + (1 - beta2) * g^2             second moment
    m_hat = m / (1 - beta1^t)                         bias correction
    v_hat = v / (1 - beta2^t)
    theta = theta - lr * m_hat / (sqrt(v_hat) + eps) - lr * lambda * theta_old

This is an update, not a forward/backward pair: it writes ``theta``, ``m`` and ``v``,
the optimizer's own arrays (any shape, all alike; the optimizer passes its flat
buffers). The weight decay uses the parameter before this step's update (Loshchilov and
Hutter, 2019), so it does not depend on the gradient's scale.

``apply`` (mixed precision): a 0-d bool of the device; where it is false the step is
skipped, ``theta``, ``m`` and ``v`` left exactly as they were (a step whose scaled
gradients overflowed). ``t`` may then be a 0-d array of the device too: the optimizer
counts the steps it took there, without reading the flag back.

Derivation: docs/derivations.md#adam.
"""

from __future__ import annotations

from scratchformer.backend import xp


def adam_update(theta, g, m, v, t, lr, beta1=0.9, beta2=0.98, eps=1e-9, weight_decay=0.0,
                apply=None):  # fmt: skip
    """One Adam step in place: theta, g, m, v arrays of one shape; t >= 1 the step."""
    m_new = beta1 * m + (1 - beta1) * g
    v_new = beta2 * v + (1 - beta2) * (g * g)
    m_hat = m_new / (1 - beta1**t)
    v_hat = v_new / (1 - beta2**t)
    theta_new = theta - lr * m_hat / (xp.sqrt(v_hat) + eps)
    if weight_decay:
        theta_new -= lr * weight_decay * theta
    if apply is not None:  # skipped: the old values stay
        m_new, v_new = xp.where(apply, m_new, m), xp.where(apply, v_new, v)
        theta_new = xp.where(apply, theta_new, theta)
    m[...], v[...], theta[...] = m_new, v_new, theta_new


__all__ = ["adam_update"]
