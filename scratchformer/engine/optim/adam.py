"""Adam (Kingma and Ba, 2015) with the paper's settings and optional decoupled weight decay.

For every parameter ``theta`` with gradient ``g``, at optimizer step ``t`` (counted from 1,
once per call to ``step``, never per parameter or per micro-batch):

    m     = beta1 * m + (1 - beta1) * g               first moment
    v     = beta2 * v + (1 - beta2) * g^2             second moment
    m_hat = m / (1 - beta1^t)                         bias correction
    v_hat = v / (1 - beta2^t)
    theta = theta - lr * m_hat / (sqrt(v_hat) + eps)
    theta = theta - lr * lambda * theta_old           decoupled weight decay (AdamW), lambda >= 0

The paper: beta1 = 0.9, beta2 = 0.98, eps = 1e-9, no weight decay. The weight decay uses
the parameter before this step's Adam update (Loshchilov and Hutter, 2019), so it is
independent of the gradient scale.

All of it runs over flat buffers (``nn/flat.py``): the parameters, the gradients and
each moment are one array, so a step is one update over four arrays, whatever the number
of tensors. A tied matrix is one parameter and has one slice of the moments. In
checkpoints the moments are stored per parameter name.

The update, side by side:

    adam_update     the reference: the formulas as written (m_hat, v_hat made)
    blocked_update  what runs: both bias corrections folded into two scalars
                    (``lr m_hat / (sqrt(v_hat) + eps) = (lr c2 / c1) m / (sqrt(v) + eps c2)``,
                    ``c1 = 1 - beta1^t``, ``c2 = sqrt(1 - beta2^t)``) and the passes made
                    block by block (``device.pass_block``: cache-sized on the CPU, every
                    pass of a block reading what the previous one wrote while it is still
                    there; the whole buffer on a GPU), one block-sized scratch array

The reference runs where the references are forced (``dispatch.reference()``);
``use_update`` puts another update in place (a learner's, in the exercises).

``apply`` (mixed precision): a 0-d bool of the device; where it is false the step is
skipped, ``theta``, ``m`` and ``v`` left exactly as they were (a step whose scaled
gradients overflowed). ``t`` may then be a 0-d array of the device too: the optimizer
counts the steps it took there, without reading the flag back.

Dimension key: ``n`` the parameters' count (any shape, all four arrays alike).
Derivation: docs/derivations.md#adam.
"""

from __future__ import annotations

import contextlib
import math

from scratchformer.engine import backend, device, dispatch
from scratchformer.engine.backend import xp
from scratchformer.engine.errors import ScratchformerError
from scratchformer.engine.nn.flat import FlatParameters


def adam_update(theta, g, m, v, t, lr, beta1=0.9, beta2=0.98, eps=1e-9, weight_decay=0.0,
                apply=None):
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


def blocked_update(theta, g, m, v, t, lr, beta1=0.9, beta2=0.98, eps=1e-9, weight_decay=0.0,
                   apply=None):
    """``adam_update`` with the bias corrections folded in, block by block (see the module
    doc). With ``apply`` (a 0-d bool of the device) the factors are chosen on the device:
    a skipped step multiplies the moments by 1, adds 0 and takes a step of size 0, so that
    nothing changes, bit for bit, and nothing is read back."""
    c1 = 1.0 - beta1**t
    c2 = math.sqrt(1.0 - beta2**t) if apply is None else xp.sqrt(1.0 - beta2**t)
    step_size, eps2, decay = lr * c2 / c1, eps * c2, 1.0 - lr * weight_decay
    b1, b2, a1, a2 = beta1, beta2, 1.0 - beta1, 1.0 - beta2
    if apply is not None:
        where = xp.where
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
               (b1, a1, b2, a2), step_size, eps2, decay)


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


#: the update every ``Adam.step`` runs (``use_update`` changes it for a while)
_UPDATE = {"fn": blocked_update}


@contextlib.contextmanager
def use_update(update):
    """Run ``update`` (``adam_update``'s signature) in every Adam step for the duration."""
    old, _UPDATE["fn"] = _UPDATE["fn"], update
    try:
        yield update
    finally:
        _UPDATE["fn"] = old


class OptimizerStateError(ScratchformerError):
    """An optimizer state dict does not fit the parameters it is loaded into."""


class Adam:
    """``Adam(model.flatten(), beta1=0.9, beta2=0.98, eps=1e-9)``.

    ``flat``: a ``FlatParameters``; ``step(lr)`` updates ``flat.params`` in place from
    ``flat.grads`` with learning rate ``lr``.
    """

    def __init__(
        self,
        flat: FlatParameters,
        beta1: float = 0.9,
        beta2: float = 0.98,
        eps: float = 1e-9,
        weight_decay: float = 0.0,
    ):
        if not 0.0 <= beta1 < 1.0 or not 0.0 <= beta2 < 1.0:
            raise ScratchformerError(f"Adam betas must be in [0, 1), got ({beta1}, {beta2})")
        if eps <= 0.0:
            raise ScratchformerError(f"Adam eps must be positive, got {eps}")
        if weight_decay < 0.0:
            raise ScratchformerError(f"weight_decay must be >= 0, got {weight_decay}")
        self.flat = flat
        self.beta1, self.beta2, self.eps, self.weight_decay = beta1, beta2, eps, weight_decay
        self.t = 0  # optimizer steps taken
        xp = backend.xp
        self.m = xp.zeros_like(flat.params)  # first moments
        self.v = xp.zeros_like(flat.params)  # second moments

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

    # -- state ------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Host copies of the moments plus the step count and hyper-parameters.

        ``{"t": int, "beta1": ..., "beta2": ..., "eps": ..., "weight_decay": ...,
        "m": {name: ndarray}, "v": {name: ndarray}}``
        """
        views = self.flat.views
        return {
            "t": int(self.t),
            "beta1": self.beta1,
            "beta2": self.beta2,
            "eps": self.eps,
            "weight_decay": self.weight_decay,
            "m": {k: backend.asnumpy(a).copy() for k, a in views(self.m).items()},
            "v": {k: backend.asnumpy(a).copy() for k, a in views(self.v).items()},
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore moments and step count (hyper-parameters keep their current values).

        Raises OptimizerStateError naming parameters that are missing, unexpected or of
        a different shape.
        """
        for key in ("t", "m", "v"):
            if key not in state:
                raise OptimizerStateError(f"optimizer state has no {key!r} entry")
        shapes = self.flat.shapes
        for moment in ("m", "v"):
            stored = state[moment]
            missing = sorted(set(shapes) - set(stored))
            unexpected = sorted(set(stored) - set(shapes))
            if missing or unexpected:
                raise OptimizerStateError(
                    f"optimizer moments {moment!r} do not match the parameters: "
                    f"missing {missing[:8]}, unexpected {unexpected[:8]}"
                )
            for k, shape in shapes.items():
                if tuple(stored[k].shape) != shape:
                    raise OptimizerStateError(
                        f"optimizer moment {moment}[{k!r}] has shape {tuple(stored[k].shape)}, "
                        f"parameter has {shape}"
                    )
        for moment in ("m", "v"):
            for k, own in self.flat.views(getattr(self, moment)).items():
                own[...] = backend.asarray(state[moment][k], dtype=own.dtype)
        self.t = int(state["t"])
