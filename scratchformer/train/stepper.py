"""One optimizer step of a model: what the training loop asks of its model, apart from
the run around it (data, checkpoints, locks, signals, logging: ``Trainer``).

``Stepper`` holds the model, its flat parameter and gradient buffers, Adam, the
learning-rate schedule and the precision policy, and takes a step:

    1. for each micro-batch: forward with dropout, backward of ``n_i * S * loss_i``
       (``accumulate_gradients``; ``S`` the loss scale, 1 in float32)
    2. divide by ``sum_i n_i`` (and, in mixed precision, by ``S``): the gradient of the
       mean loss over the union of the micro-batches
    3. clip the global gradient norm; in mixed precision, a norm that is not finite
       (a float16 gradient overflowed) skips the step and halves ``S``
    4. ``lr = schedule(s)``, one Adam step on the float32 master weights

Nothing is read back from the device: the loss, the norm and (mixed precision) whether
the step was skipped stay device arrays until the run reads them at its next record.

The precision policy (``[train] precision``):

    float32   the parameters, the activations and every sum in float32 (the default)
    float16   mixed precision: the parameters (master weights), their gradients and
              Adam in float32; the activations computed in float16 (``backend.autocast``:
              each op's float16 implementation, on NumPy emulated as tensor cores
              compute, ops/float16.py); layer norm's statistics, the softmax's and
              the loss's sums in float32; dynamic loss scaling (optim/scaler.py)

Derivation: docs/derivations.md#mixed-precision-and-loss-scaling.
"""

from __future__ import annotations

from scratchformer import backend
from scratchformer.optim import Adam, clip_grad_norm, make_schedule
from scratchformer.optim.scaler import LossScaler
from scratchformer.train.step import accumulate_gradients, nonfinite_state


class Stepper:
    """``Stepper(model, optim, train)``: ``optim`` an OptimConfig, ``train`` the
    LoopConfig (its precision, loss-scale and clipping settings), ``d_model`` for the
    paper's schedule."""

    def __init__(self, model, optim, train, d_model: int, world=None):
        self.model, self.world = model, world
        self.flat = model.flatten()  # every parameter in one array, every gradient too
        self.optimizer = Adam(self.flat, optim.beta1, optim.beta2, optim.eps, optim.weight_decay)
        self.schedule = make_schedule(
            optim.schedule, d_model=d_model, warmup=optim.warmup, lr_factor=optim.lr_factor,
            lr=optim.lr,
        )  # fmt: skip
        self.clip_norm = optim.clip_norm
        self.compute = None if train.precision == "float32" else train.precision
        self.scaler = None
        if self.compute:
            self.scaler = LossScaler(train.loss_scale, train.loss_scale_window)

    def step(self, s: int, batches: list, rngs: list) -> dict:
        """Optimizer step ``s`` over ``batches`` (micro-batches, ``TaskBatch`` or None)
        with their dropout generators; its record, every array left on the device."""
        lr = self.schedule(s)
        scaler = self.scaler
        with backend.np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            with backend.autocast(self.compute):
                scale = None if scaler is None else scaler.scale
                loss, nll, _, tokens = accumulate_gradients(
                    self.model, batches, rngs, self.world, scale
                )
            if scaler is not None:
                scaler.unscale(self.flat.grads)
            grad_norm = clip_grad_norm(self.flat.grads, self.clip_norm)
            if scaler is None:
                self.optimizer.step(lr)
                return {"step": s, "loss": loss, "nll": nll, "lr": lr, "grad_norm": grad_norm,
                        "tokens": tokens}  # fmt: skip
            ok = scaler.check(grad_norm, self.flat.grads)
            scale = scaler.scale
            self.optimizer.step(lr, apply=ok)
            scaler.update(ok)
        return {"step": s, "loss": loss, "nll": nll, "lr": lr, "grad_norm": grad_norm,
                "tokens": tokens, "skipped": backend.xp.logical_not(ok),
                "loss_scale": scale}  # fmt: skip

    # -- checks and state ---------------------------------------------------------------------
    def nonfinite(self) -> str:
        """'' when the parameters and Adam's moments are finite, else what is not."""
        return nonfinite_state(self.optimizer)

    def loss_scale(self) -> float | None:
        """The loss scale now (a read: at a record or a save), None in float32."""
        return None if self.scaler is None else float(self.scaler.scale)

    def state(self) -> dict:
        """What a checkpoint keeps besides the parameters and Adam: the loss scale."""
        return {} if self.scaler is None else {"loss_scale": self.scaler.state_dict()}

    def load_state(self, train_state: dict) -> None:
        if self.scaler is not None and "loss_scale" in train_state:
            self.scaler.load_state_dict(train_state["loss_scale"])

    def share(self, world) -> None:
        """Every rank takes rank 0's parameters, moments, step count and loss scale."""
        opt = self.optimizer
        state = world.broadcast({"t": int(opt.t), **self.state()})
        opt.t = state["t"]
        self.load_state(state)
        for a in (self.flat.params, opt.m, opt.v):
            world.broadcast_(a)


__all__ = ["Stepper"]
