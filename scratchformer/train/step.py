"""One optimizer step's pieces: gradients accumulated over micro-batches, the dropout
seed of each micro-batch, the running sums logged between two "train" records, and the
check that the state after a step is finite."""

from __future__ import annotations

import math
import time

from scratchformer import backend
from scratchformer.errors import ScratchformerError


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


def accumulate_gradients(model, batches, rngs=None, world=None) -> tuple[float, float, int, int]:
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

    ``rngs``: one dropout generator per micro-batch, or None (dropout off).
    Returns ``(mean loss, mean NLL per target, n, tokens)`` of the union.
    """
    flat = model.flatten()
    flat.grads.fill(0)
    loss_sum = nll_sum = 0.0
    n_total = tokens = 0
    for i, b in enumerate(batches):
        if b is None:
            continue
        rng = rngs[i] if rngs is not None else None
        arrays = [backend.asarray(a) for a in (*b.inputs, b.targets)]
        loss, cache = model.loss_forward(*arrays, rng=rng)
        n = cache.loss.n_tokens
        model.loss_backward(cache, dloss=float(n))  # the gradient of the summed loss
        loss_sum += float(loss) * n
        nll_sum += cache.loss.nll_sum
        n_total += n
        tokens += b.n_tokens
    if world is not None:
        world.sum_(flat.grads)
        loss_sum, nll_sum, n_total, tokens = world.sum_floats([loss_sum, nll_sum, n_total, tokens])
        n_total, tokens = int(n_total), int(tokens)
    if n_total == 0:
        raise ScratchformerError("the micro-batches hold no targets")
    flat.grads *= 1.0 / n_total
    return loss_sum / n_total, nll_sum / n_total, n_total, tokens


def dropout_seed(seed: int, step: int, micro: int, rank: int = 0) -> int:
    """A 63-bit seed for the dropout generator of micro-batch ``micro`` of step ``step``
    on rank ``rank`` (each rank's share has masks of its own)."""
    words = [seed, step, micro] + ([rank] if rank else [])
    ss = backend.np.random.SeedSequence(words)
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
            "nll": self.nll / self.steps,  # without label smoothing: ppl = exp(nll)
            "ppl": math.exp(min(self.nll / self.steps, 700.0)),
            "lr": rec["lr"],
            "grad_norm": rec["grad_norm"],  # before clipping, of the last step
            "tokens_per_s": self.tokens_per_s(),
            "tokens_seen": tokens_seen,
        }


__all__ = ["Window", "accumulate_gradients", "dropout_seed"]
