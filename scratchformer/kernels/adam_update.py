"""adam_update: one step of Adam over the optimizer's flat buffers (ops/adam.py), in
place: it writes ``theta``, ``m`` and ``v``; no backward.

    reference   ops/adam.py: the formulas as written (m_hat, v_hat made)
    blocked     both bias corrections folded into two scalars
                (``lr m_hat / (sqrt(v_hat) + eps) = (lr c2 / c1) m / (sqrt(v) + eps c2)``,
                ``c1 = 1 - beta1^t``, ``c2 = sqrt(1 - beta2^t)``) and the passes made
                block by block (``device.pass_block``: cache-sized on the CPU, every pass
                of a block reading what the previous one wrote while it is still there;
                the whole buffer on a GPU), one block-sized scratch array: the default

Dimension key: ``n`` the parameters' count (any shape, all four arrays alike).
"""

from __future__ import annotations

import math

from scratchformer import backend, device
from scratchformer.backend import xp
from scratchformer.kernels.cases import Case, randn
from scratchformer.kernels.table import Implementation, Schema, new_table
from scratchformer.ops import adam as _op

SCHEMA = Schema(
    inputs=("theta", "g", "m", "v", "t", "lr", "beta1", "beta2", "eps", "weight_decay",
            "apply"),
    writes=("theta", "m", "v"),
)  # fmt: skip


def cases(r, dt):
    def state(n):
        return (randn(r, (n,), dt), randn(r, (n,), dt), 0.1 * randn(r, (n,), dt),
                abs(randn(r, (n,), dt)))  # fmt: skip

    n_long = 3 * device.pass_block(1 << 20) + 7  # more than one block where blocks apply
    xp = backend.xp
    t_device = xp.asarray(7)  # a step count kept on the device (mixed precision)
    return [
        Case("step 1", (*state(37), 1, 1e-3)),
        Case("step 500, paper's betas", (*state(37), 500, 7e-4, 0.9, 0.98, 1e-9)),
        Case("weight decay 0.01", (*state(37), 3, 1e-3, 0.9, 0.999, 1e-8, 0.01)),
        Case(f"{n_long} entries", (*state(n_long), 4, 1e-3)),
        Case("applied, t on the device", (*state(37), t_device, 1e-3, 0.9, 0.98, 1e-9, 0.01,
                                          xp.asarray(True))),
        Case("skipped", (*state(37), t_device, 1e-3, 0.9, 0.98, 1e-9, 0.01,
                         xp.asarray(False))),
    ]  # fmt: skip


def blocked_update(theta, g, m, v, t, lr, beta1=0.9, beta2=0.98, eps=1e-9, weight_decay=0.0,
                   apply=None):  # fmt: skip
    """The update with the bias corrections folded in, block by block (see the module doc).
    With ``apply`` (a 0-d bool of the device) the factors are chosen on the device: a
    skipped step multiplies the moments by 1, adds 0 and takes a step of size 0, so that
    nothing changes, bit for bit, and nothing is read back."""
    c1 = 1.0 - beta1**t
    c2 = math.sqrt(1.0 - beta2**t) if apply is None else backend.xp.sqrt(1.0 - beta2**t)
    step_size, eps2, decay = lr * c2 / c1, eps * c2, 1.0 - lr * weight_decay
    b1, b2, a1, a2 = beta1, beta2, 1.0 - beta1, 1.0 - beta2
    if apply is not None:
        where = backend.xp.where
        b1, b2 = where(apply, b1, 1.0), where(apply, b2, 1.0)
        a1, a2 = where(apply, a1, 0.0), where(apply, a2, 0.0)
        step_size, decay = where(apply, step_size, 0.0), where(apply, decay, 1.0)
        eps2 = where(apply, eps2, 1.0)  # skipped at t = 0: m / (sqrt(v) + eps2) stays finite
    n = theta.size
    block = device.pass_block(n)
    tmp = xp.empty(min(block, n), dtype=theta.dtype)  # the one scratch array
    for i in range(0, n, block):
        j = min(i + block, n)
        _block(theta[i:j], g[i:j], m[i:j], v[i:j], tmp[: j - i],
               (b1, a1, b2, a2), step_size, eps2, decay)  # fmt: skip


def _block(theta, g, m, v, tmp, betas, step_size, eps2, decay) -> None:
    """m = b1 m + a1 g;  v = b2 v + a2 g^2 (a1 = 1 - b1, a2 = 1 - b2 unless skipped);
    theta = decay * theta - step_size * m / (sqrt(v) + eps2), with ``tmp`` as scratch."""
    b1, a1, b2, a2 = betas
    m *= b1
    xp.multiply(g, a1, out=tmp)
    m += tmp
    v *= b2
    xp.multiply(g, g, out=tmp)
    tmp *= a2
    v += tmp
    xp.sqrt(v, out=tmp)
    tmp += eps2
    xp.divide(m, tmp, out=tmp)
    tmp *= step_size
    if not isinstance(decay, float) or decay != 1.0:
        theta *= decay  # decoupled: uses theta before the step
    theta -= tmp


TABLE = new_table("adam_update", SCHEMA, _op.adam_update, None, cases)
TABLE.register(
    Implementation(
        "blocked", blocked_update, default=True,
        note="bias corrections folded into two scalars; cache-sized blocks on the CPU",
    )
)  # fmt: skip
update = TABLE.update
