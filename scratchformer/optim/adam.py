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
each moment are one array, so a step is one call of the kernel seam's ``adam_update``
over four arrays, whatever the number of tensors (ops/adam.py is its reference; the
seam chooses its fastest form: on the CPU, passes in cache-sized blocks). A tied matrix
is one parameter and has one slice of the moments. In checkpoints the moments are
stored per parameter name.
"""

from __future__ import annotations

from scratchformer import backend, kernels
from scratchformer.errors import ScratchformerError
from scratchformer.nn.flat import FlatParameters


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
        kernels.adam_update.update(
            self.flat.params, self.flat.grads, self.m, self.v, self.t, lr,
            self.beta1, self.beta2, self.eps, self.weight_decay,
            *(() if apply is None else (apply,)),
        )  # fmt: skip

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
