"""A training run bounded before it starts: its memory, estimated from the model's real
size (``scratchformer.engine.models.sizes``: the modules' own parameter declarations, nothing
allocated) and its micro-batches, and the counts a config or a flag can ask for (the
micro-batches of a step, the processes), refused in one line naming what to lower.
"""

from __future__ import annotations

import os

from scratchformer.engine import backend, memory
from scratchformer.engine.errors import ConfigError
from scratchformer.engine.models.sizes import (
    activation_bytes,
    describe,
    largest_part,
    model_bytes,
)

#: what to lower when the model itself does not fit, by what makes it large
MODEL_ADVICE = {
    "layers": "the model is too large: lower model.N (and model.N_dec), model.d_model or "
    "model.d_ff",
    "positions": "the model is too large: lower model.max_len",
    "vocabulary": "the model is too large: lower the vocabulary (task.vocab_size or "
    "task.max_vocab) or model.d_model",
}

#: the launchers' variables for the number of processes on this machine
_LOCAL_SIZE_VARS = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE")


def local_processes(size: int) -> int:
    """How many of the ``size`` processes of a run share this machine's memory: what the
    launcher says, else all of them (``--ranks`` starts them all here)."""
    for var in _LOCAL_SIZE_VARS:
        value = os.environ.get(var, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return size


def check_training_memory(spec: dict, config, tokens: int, processes: int = 1) -> None:
    """Refuse a run whose processes on this machine would need more memory than it has:
    each holds the parameters, their gradients, Adam's two moments and, at the end, the
    averaged model with its float64 sum (``7 P``), and the activations of a micro-batch
    of ``tokens`` positions (``sizes.training_bytes``). The advice names the model when
    the model alone does not fit, else the micro-batch."""
    free = memory.available_memory()
    model = processes * model_bytes(spec, config, copies=7)
    total = model + processes * activation_bytes(spec, config, tokens)
    if backend.backend_name() != "numpy" or free is None or total <= free:
        return
    advice = MODEL_ADVICE[largest_part(spec, config)] if model > free else "lower train.max_tokens"
    each = f", in each of {processes} processes" if processes > 1 else ""
    memory.need_memory(
        total,
        f"training {describe(spec, config)} on micro-batches of {tokens} tokens{each}",
        advice,
    )


def cores() -> int:
    """The processor cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def check_ranks(ranks: int) -> None:
    """``--ranks N`` starts N processes on this machine: at most one per core (more would
    only share the cores, each holding the whole model); refused in one line before
    mpiexec starts anything. Several machines: start the job with mpiexec itself."""
    have = cores()
    if ranks > have:
        raise ConfigError(
            f"--ranks {ranks} would start {ranks} processes on this machine, which has "
            f"{have} cores: give at most --ranks {have} (for several machines, start the "
            "job with mpiexec and a host file)"
        )


def check_accumulation(accum_steps: int, batches_per_epoch: int) -> None:
    """A step of more micro-batches than the training data holds would see examples
    several times within one step: refused, naming both counts."""
    if accum_steps > batches_per_epoch:
        raise ConfigError(
            f"train.accum_steps = {accum_steps} is more micro-batches per step than the "
            f"{batches_per_epoch} the training data makes: lower train.accum_steps (or "
            "train.max_tokens, for more and smaller micro-batches)"
        )


__all__ = [
    "MODEL_ADVICE",
    "check_accumulation",
    "check_ranks",
    "check_training_memory",
    "cores",
    "local_processes",
]
