"""One optimizer step's pieces: gradients accumulated over micro-batches, the dropout
seed of each micro-batch, the running sums logged between two "train" records, and the
check that the state after a step is finite."""

from __future__ import annotations

import math
import time

from scratchformer import backend
from scratchformer.errors import ScratchformerError


def nonfinite_state(model, optimizer) -> str:
    """'' when the parameters and both Adam moments are finite, else what is not (a step
    can leave them infinite while its own loss was still finite: no checkpoint of that)."""
    stores = {
        "parameter": model.parameters(),
        "Adam first moment": optimizer.m,
        "Adam second moment": optimizer.v,
    }
    for what, arrays in stores.items():
        bad = [k for k, a in arrays.items() if not bool(backend.xp.isfinite(a).all())]
        if bad:
            return f"{len(bad)} {what} arrays ({bad[0]}, ...)"
    return ""


def accumulate_gradients(model, batches, rngs=None) -> tuple[float, float, int]:
    """Zero the gradients, then leave in them the gradient of the mean loss over the union
    of ``batches`` (``TaskBatch``es; their targets together), as one batch would.

    Micro-batch i has mean loss ``L_i`` over ``n_i`` targets. Back-propagating ``n_i * L_i``
    adds ``n_i * dL_i``; dividing the sum by ``n = sum_i n_i`` gives
    ``d(sum_i n_i L_i / n)``, the gradient of the union's mean loss. (Averaging the
    micro-batch means instead would over-weight the short micro-batches.)

    ``rngs``: one dropout generator per micro-batch, or None (dropout off).
    Returns ``(mean loss, mean NLL per target, n)``.
    """
    model.zero_grad()
    loss_sum = nll_sum = 0.0
    n_total = 0
    for i, b in enumerate(batches):
        rng = rngs[i] if rngs is not None else None
        arrays = [backend.asarray(a) for a in (*b.inputs, b.targets)]
        loss, cache = model.loss_forward(*arrays, rng=rng)
        n = cache.loss.n_tokens
        model.loss_backward(cache, dloss=float(n))  # the gradient of the summed loss
        loss_sum += float(loss) * n
        nll_sum += cache.loss.nll_sum
        n_total += n
    if n_total == 0:
        raise ScratchformerError("the micro-batches hold no targets")
    for g in model.gradients().values():
        g *= 1.0 / n_total
    return loss_sum / n_total, nll_sum / n_total, n_total


def dropout_seed(seed: int, step: int, micro: int) -> int:
    """A 63-bit seed for the dropout generator of micro-batch ``micro`` of step ``step``."""
    ss = backend.np.random.SeedSequence([seed, step, micro])
    return int(ss.generate_state(1, dtype=backend.np.uint64)[0] >> 1)


class Window:
    """Running sums over the steps between two "train" records of the metrics log.

    A checkpoint saves the sums (``state``) and a resumed run starts from them
    (``Window(state)``): when checkpoints fall between two records, the next record
    then averages the same steps as in a run that was never stopped.
    """

    def __init__(self, state: dict | None = None):
        state = state or {}
        try:
            self.loss = float(state.get("loss", 0.0))
            self.nll = float(state.get("nll", 0.0))
            self.steps = int(state.get("steps", 0))
        except (AttributeError, TypeError, ValueError):
            raise ScratchformerError(
                f"the checkpoint's train_state.window is not valid ({state!r:.80})"
            ) from None
        self.tokens = 0  # of this process's steps alone: tokens/s is this process's speed
        self.t0 = time.perf_counter()

    def state(self) -> dict:
        """The sums the record averages (JSON numbers: a float's repr reads back exactly)."""
        return {"loss": self.loss, "nll": self.nll, "steps": self.steps}

    def add(self, rec: dict) -> None:
        self.loss += rec["loss"]
        self.nll += rec["nll"]
        self.tokens += rec["tokens"]
        self.steps += 1

    def tokens_per_s(self) -> float:
        return self.tokens / max(time.perf_counter() - self.t0, 1e-9)

    def record(self, step: int, epoch: int, rec: dict, tokens_seen: int) -> dict:
        return {
            "kind": "train",
            "step": step,
            "epoch": epoch,
            "loss": self.loss / self.steps,  # the training objective, mean over the window
            "ppl": math.exp(min(self.nll / self.steps, 700.0)),
            "lr": rec["lr"],
            "grad_norm": rec["grad_norm"],  # before clipping, of the last step
            "tokens_per_s": self.tokens_per_s(),
            "tokens_seen": tokens_seen,
        }


__all__ = ["Window", "accumulate_gradients", "dropout_seed"]
