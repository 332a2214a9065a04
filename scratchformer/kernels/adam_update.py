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

from scratchformer import device
from scratchformer.backend import xp
from scratchformer.kernels.cases import Case, randn
from scratchformer.kernels.table import Implementation, Schema, new_table
from scratchformer.ops import adam as _op

SCHEMA = Schema(
    inputs=("theta", "g", "m", "v", "t", "lr", "beta1", "beta2", "eps", "weight_decay"),
    writes=("theta", "m", "v"),
)


def cases(r, dt):
    def state(n):
        return (randn(r, (n,), dt), randn(r, (n,), dt), 0.1 * randn(r, (n,), dt),
                abs(randn(r, (n,), dt)))  # fmt: skip

    n_long = 3 * device.pass_block(1 << 20) + 7  # more than one block where blocks apply
    return [
        Case("step 1", (*state(37), 1, 1e-3)),
        Case("step 500, paper's betas", (*state(37), 500, 7e-4, 0.9, 0.98, 1e-9)),
        Case("weight decay 0.01", (*state(37), 3, 1e-3, 0.9, 0.999, 1e-8, 0.01)),
        Case(f"{n_long} entries", (*state(n_long), 4, 1e-3)),
    ]


def blocked_update(theta, g, m, v, t, lr, beta1=0.9, beta2=0.98, eps=1e-9, weight_decay=0.0):
    """The update with the bias corrections folded in, block by block (see the module doc)."""
    c1 = 1.0 - beta1**t
    c2 = math.sqrt(1.0 - beta2**t)
    step_size, eps2, decay = lr * c2 / c1, eps * c2, 1.0 - lr * weight_decay
    n = theta.size
    block = device.pass_block(n)
    tmp = xp.empty(min(block, n), dtype=theta.dtype)  # the one scratch array
    for i in range(0, n, block):
        j = min(i + block, n)
        _block(theta[i:j], g[i:j], m[i:j], v[i:j], tmp[: j - i],
               beta1, beta2, step_size, eps2, decay)  # fmt: skip


def _block(theta, g, m, v, tmp, b1, b2, step_size, eps2, decay) -> None:
    """m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
    theta = decay * theta - step_size * m / (sqrt(v) + eps2), with ``tmp`` as scratch."""
    m *= b1
    xp.multiply(g, 1.0 - b1, out=tmp)
    m += tmp
    v *= b2
    xp.multiply(g, g, out=tmp)
    tmp *= 1.0 - b2
    v += tmp
    xp.sqrt(v, out=tmp)
    tmp += eps2
    xp.divide(m, tmp, out=tmp)
    tmp *= step_size
    if decay != 1.0:
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
