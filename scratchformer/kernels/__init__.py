"""The kernel seam: one module per op, each holding the op's schema, its parity cases and
its implementations (the readable reference of ops/ first, then faster NumPy forms,
fused GPU kernels, a learner's own backward) registered in its table.

The modules (nn/) and models call an op through its module here, never ops/ directly:

    out, cache = kernels.layernorm.forward(x, gamma, beta, eps)
    dx, dgamma, dbeta = kernels.layernorm.backward(dout, cache)

so the implementation can change without a line of nn/ or ops/ changing. A cache is
opaque: it records the implementation that made it, and the backward dispatches on that
record; what others need from it comes from the op's declared accessors
(``kernels.attention_core.weights(cache)``). Tables hold leaf ops: composition (dense
attention = the paper's logits, then the attention core) happens where they are
called, so one core implementation serves every attention variant. An in-place form
runs only where the caller donates its input (``forward(..., donate=True)``);
``poison_donated()`` fills donated inputs with NaN after use, so a reuse shows.

What a table calls is its chosen implementation (``table.py``); ``reference()`` (or
``SCRATCHFORMER_KERNELS=reference``) forces the references everywhere. Every
registered implementation is checked against its reference by one harness
(``kernels.parity``) and by the op gradient tests (finite differences).

The seam's other half, the device primitives the ops themselves call (scatter-add, row
dot products, the dropout generator), sits below ops/ in scratchformer/device/.
"""

from __future__ import annotations

from scratchformer.kernels import (
    adam_update,
    add_norm_exit,
    attention_core,
    cross_entropy,
    dot_product_logits,
    dropout,
    embedding,
    emulated,
    gelu,
    label_smoothed_nll,
    layernorm,
    linear,
    log_softmax,
    positional,
    relu,
    shaw_logits,
    shaw_values,
    skew_logits,
    softmax,
    tanh,
)
from scratchformer.kernels.table import (
    COMPOSITE,
    REFERENCE,
    TABLES,
    Implementation,
    KernelError,
    OpCache,
    OpTable,
    Schema,
    env_error,
    poison_donated,
    poisoning,
    reference,
    reference_forced,
    set_reference,
)
from scratchformer.kernels.table import use as _use

emulated.register(TABLES)  # float16 on NumPy, for mixed precision (kernels/emulated.py)


def table(name) -> OpTable:
    """The table of the op ``name`` (``"attention_core"``, ``"layernorm"``, ...); a table
    is returned as it is."""
    if isinstance(name, OpTable):
        return name
    try:
        return TABLES[name]
    except KeyError:
        raise KernelError(f"no op named {name!r}: expected one of {sorted(TABLES)}") from None


def use(op, name: str):
    """Put the implementation ``name`` of the op ``op`` (a name or a table) in place for
    the duration of a ``with`` block."""
    return _use(table(op), name)


#: the activation modules by config name
ACTIVATIONS = {"relu": relu, "gelu": gelu}

__all__ = [
    "ACTIVATIONS",
    "COMPOSITE",
    "REFERENCE",
    "TABLES",
    "Implementation",
    "KernelError",
    "OpCache",
    "OpTable",
    "Schema",
    "adam_update",
    "add_norm_exit",
    "attention_core",
    "cross_entropy",
    "dot_product_logits",
    "dropout",
    "embedding",
    "env_error",
    "gelu",
    "label_smoothed_nll",
    "layernorm",
    "linear",
    "log_softmax",
    "poison_donated",
    "poisoning",
    "positional",
    "reference",
    "reference_forced",
    "relu",
    "set_reference",
    "shaw_logits",
    "shaw_values",
    "skew_logits",
    "softmax",
    "table",
    "tanh",
    "use",
]
