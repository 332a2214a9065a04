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

from scratchformer.engine import backend
from scratchformer.engine.backend import xp
from scratchformer.engine.errors import ScratchformerError
from scratchformer.engine.ops.loss import cross_entropy
from scratchformer.engine.optim import Adam, clip_grad_norm, make_schedule
from scratchformer.engine.optim.scaler import LossScaler


def nonfinite_state(optimizer) -> str:
    """'' when the parameters and both Adam moments are finite, else what is not (a step
    can leave them infinite while its own loss was still finite: no checkpoint of that)."""
    flat = optimizer.flat
    stores = {
        "parameter": flat.params,
        "Adam first moment of": optimizer.m,
        "Adam second moment of": optimizer.v,
    }
    for what, array in stores.items():
        bad = flat.first_nonfinite(array)
        if bad:
            return f"the {what} {bad} (and maybe others)"
    return ""


def accumulate_gradients(
    model, batches, rngs=None, world=None, scale=None
) -> tuple[float, float, int, int]:
    """Zero the gradients, then leave in them the gradient of the mean loss over the union
    of ``batches`` (``TaskBatch``es; their targets together), as one batch would, and
    over the batches of every rank of ``world`` (a ``distributed.World``; None: this
    process alone).

    Micro-batch i has mean loss ``L_i`` over ``n_i`` targets. Back-propagating ``n_i * L_i``
    adds ``n_i * dL_i``; summing over the micro-batches and the ranks (one all-reduce of
    the flat gradient) and dividing by ``n = sum_i n_i`` gives ``d(sum_i n_i L_i / n)``,
    the gradient of the union's mean loss. (Averaging the micro-batch means instead would
    over-weight the short micro-batches.) A batch may be None: this rank's share of it
    is empty, and it adds nothing.

    ``rngs``: one dropout generator per micro-batch, or None (dropout off). ``scale``:
    the loss scale of mixed precision (a 0-d array of the device), by which every
    gradient is then multiplied too; None: 1.

    Nothing is read back from the device: the batches are host arrays (the model checks
    and moves them), their counts come from the host (``n_targets``), and the losses stay
    on the device. Returns ``(loss, nll, n, tokens)``: the union's mean loss and mean NLL
    per target as float64 0-d arrays of the backend (with several ranks, this rank's
    part of each: their sum over the ranks is the mean), n and tokens host integers over
    every rank.
    """
    flat = model.flatten()
    flat.grads.fill(0)
    loss_sum = nll_sum = 0.0
    n_total = tokens = 0
    for i, b in enumerate(batches):
        if b is None:
            continue
        rng = rngs[i] if rngs is not None else None
        loss, cache = model.loss_forward(*b.inputs, b.targets, rng=rng)
        n = b.n_targets
        dloss = float(n) if scale is None else scale * float(n)  # of the summed loss
        model.loss_backward(cache, dloss=dloss)
        loss_sum = loss_sum + loss.astype(xp.float64) * n  # float64, as a host sum would be
        nll_sum = nll_sum + cross_entropy.read(cache.loss, "nll_sum").astype(xp.float64)
        n_total += n
        tokens += b.n_tokens
    if world is not None:
        world.sum_(flat.grads)
        n_total, tokens = (int(v) for v in world.sum_floats([n_total, tokens]))
    if n_total == 0:
        raise ScratchformerError("the micro-batches hold no targets")
    flat.grads *= 1.0 / n_total
    return loss_sum / n_total, nll_sum / n_total, n_total, tokens



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
        )
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
                        "tokens": tokens}
            ok = scaler.check(grad_norm, self.flat.grads)
            scale = scaler.scale
            self.optimizer.step(lr, apply=ok)
            scaler.update(ok)
        return {"step": s, "loss": loss, "nll": nll, "lr": lr, "grad_norm": grad_norm,
                "tokens": tokens, "skipped": backend.xp.logical_not(ok),
                "loss_scale": scale}

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


__all__ = ["Stepper", "accumulate_gradients", "nonfinite_state"]
