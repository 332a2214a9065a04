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

Moments are kept per named parameter (the names of ``model.parameters()``), so a tied
matrix that appears once there has one pair of moments. Parameters are updated in place.
"""

from __future__ import annotations

import math

from scratchformer import backend
from scratchformer.errors import ScratchformerError


class OptimizerStateError(ScratchformerError):
    """An optimizer state dict does not fit the parameters it is loaded into."""


class Adam:
    """``Adam(model.parameters(), beta1=0.9, beta2=0.98, eps=1e-9)``.

    ``params``: ``{name: array}``, live references (updated in place).
    ``step(grads, lr)``: one update from ``{name: gradient}`` with learning rate ``lr``.
    """

    def __init__(
        self,
        params: dict,
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
        self.params = dict(params)
        self.beta1, self.beta2, self.eps, self.weight_decay = beta1, beta2, eps, weight_decay
        self.t = 0  # optimizer steps taken
        xp = backend.xp
        self.m = {k: xp.zeros_like(p) for k, p in self.params.items()}  # first moments
        self.v = {k: xp.zeros_like(p) for k, p in self.params.items()}  # second moments

    def step(self, grads: dict, lr: float) -> None:
        """Apply one Adam update with learning rate ``lr`` to every parameter, in place.

        ``grads`` must hold a gradient for every parameter name (same shapes).
        """
        missing = sorted(set(self.params) - set(grads))
        if missing:
            raise OptimizerStateError(f"no gradient for parameters {missing[:8]}")
        self.t += 1
        b1, b2, t = self.beta1, self.beta2, self.t
        # Fold both bias corrections into scalars: m_hat = m / c1, sqrt(v_hat) = sqrt(v) / c2,
        # so lr * m_hat / (sqrt(v_hat) + eps) = (lr c2 / c1) * m / (sqrt(v) + eps c2).
        c1 = 1.0 - b1**t
        c2 = math.sqrt(1.0 - b2**t)
        step_size, eps2 = lr * c2 / c1, self.eps * c2
        xp = backend.xp
        # Everything in place: m, v, theta and one scratch array (a view of a buffer the
        # size of the largest parameter), so a step allocates nothing.
        for name, theta in self.params.items():
            g = grads[name]
            m, v = self.m[name], self.v[name]
            tmp = self._scratch(theta)
            m *= b1
            xp.multiply(g, 1.0 - b1, out=tmp)
            m += tmp  # m = b1 m + (1 - b1) g
            v *= b2
            xp.multiply(g, g, out=tmp)
            tmp *= 1.0 - b2
            v += tmp  # v = b2 v + (1 - b2) g^2
            xp.sqrt(v, out=tmp)
            tmp += eps2
            xp.divide(m, tmp, out=tmp)
            tmp *= step_size  # lr * m_hat / (sqrt(v_hat) + eps)
            if self.weight_decay:
                theta *= 1.0 - lr * self.weight_decay  # decoupled: uses theta before the step
            theta -= tmp

    def _scratch(self, like):
        """A scratch array of ``like``'s shape and dtype: a view of one flat buffer per
        dtype, as large as the largest parameter of that dtype."""
        bufs = self.__dict__.setdefault("_buffers", {})
        buf = bufs.get(like.dtype)
        if buf is None or buf.size < like.size:
            n = max(int(p.size) for p in self.params.values() if p.dtype == like.dtype)
            buf = bufs[like.dtype] = backend.xp.empty(max(n, int(like.size)), dtype=like.dtype)
        return buf[: like.size].reshape(like.shape)

    # -- state ------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Host copies of the moments plus the step count and hyper-parameters.

        ``{"t": int, "beta1": ..., "beta2": ..., "eps": ..., "weight_decay": ...,
        "m": {name: ndarray}, "v": {name: ndarray}}``
        """
        return {
            "t": self.t,
            "beta1": self.beta1,
            "beta2": self.beta2,
            "eps": self.eps,
            "weight_decay": self.weight_decay,
            "m": {k: backend.asnumpy(a).copy() for k, a in self.m.items()},
            "v": {k: backend.asnumpy(a).copy() for k, a in self.v.items()},
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore moments and step count (hyper-parameters keep their current values).

        Raises OptimizerStateError naming parameters that are missing, unexpected or of
        a different shape.
        """
        for key in ("t", "m", "v"):
            if key not in state:
                raise OptimizerStateError(f"optimizer state has no {key!r} entry")
        for moment in ("m", "v"):
            stored = state[moment]
            missing = sorted(set(self.params) - set(stored))
            unexpected = sorted(set(stored) - set(self.params))
            if missing or unexpected:
                raise OptimizerStateError(
                    f"optimizer moments {moment!r} do not match the parameters: "
                    f"missing {missing[:8]}, unexpected {unexpected[:8]}"
                )
            for k, p in self.params.items():
                if tuple(stored[k].shape) != tuple(p.shape):
                    raise OptimizerStateError(
                        f"optimizer moment {moment}[{k!r}] has shape {tuple(stored[k].shape)}, "
                        f"parameter has {tuple(p.shape)}"
                    )
        for moment in ("m", "v"):
            own = getattr(self, moment)
            for k, p in self.params.items():
                own[k][...] = backend.asarray(state[moment][k], dtype=p.dtype)
        self.t = int(state["t"])
