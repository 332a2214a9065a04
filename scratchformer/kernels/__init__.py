"""The kernel seam: one table per op, each holding the readable reference pair of ops/
and the implementations registered beside it (faster NumPy forms, fused GPU kernels, a
learner's own backward), with the same signatures and caches.

The modules (nn/) call an op through its table, never ops/ directly:

    out, cache = kernels.layernorm.forward(x, gamma, beta, eps)
    dx, dgamma, dbeta = kernels.layernorm.backward(dout, cache)

so the implementation can change without a line of nn/ or ops/ changing. What a table
calls is its chosen implementation (``OpTable.chosen``): the reference, unless a
default is registered for the active backend or one is put in place with ``use``;
``reference()`` (or ``SCRATCHFORMER_KERNELS=reference``) forces the reference ops
everywhere. Every registered implementation is checked against its reference by one
harness (``kernels.parity``) and by the op gradient tests (finite differences).

The seam's other half, the device primitives the ops themselves call (scatter-add, row
dot products, the dropout generator), sits below ops/ in scratchformer/device/.
"""

from __future__ import annotations

import functools

from scratchformer.device.counter import CounterGenerator
from scratchformer.kernels import inplace
from scratchformer.kernels.table import (
    REFERENCE,
    Implementation,
    KernelError,
    OpTable,
    reference,
    reference_forced,
    set_reference,
    use,
)
from scratchformer.ops import activations as _act
from scratchformer.ops import attention as _att
from scratchformer.ops import blockwise_attention as _blockwise
from scratchformer.ops import dropout as _dropout
from scratchformer.ops import embedding as _embedding
from scratchformer.ops import layernorm as _layernorm
from scratchformer.ops import linear as _linear
from scratchformer.ops import local_attention as _local
from scratchformer.ops import loss as _loss
from scratchformer.ops import positional as _positional
from scratchformer.ops import relative_attention as _rel
from scratchformer.ops import softmax as _softmax
from scratchformer.ops import tanh as _tanh

#: every table, by op name
TABLES: dict[str, OpTable] = {}


def _table(name: str, forward, backward) -> OpTable:
    table = OpTable(name, Implementation(REFERENCE, forward, backward))
    TABLES[name] = table
    return table


def table(name: str) -> OpTable:
    """The table of the op ``name`` (``"attention"``, ``"layernorm"``, ...)."""
    try:
        return TABLES[name]
    except KeyError:
        raise KernelError(f"no op named {name!r}: expected one of {sorted(TABLES)}") from None


linear = _table("linear", _linear.linear_forward, _linear.linear_backward)
embedding = _table("embedding", _embedding.embedding_forward, _embedding.embedding_backward)
positional = _table("positional", _positional.positional_forward, _positional.positional_backward)
dropout = _table("dropout", _dropout.dropout_forward, _dropout.dropout_backward)
layernorm = _table("layernorm", _layernorm.layernorm_forward, _layernorm.layernorm_backward)
relu = _table("relu", _act.relu_forward, _act.relu_backward)
gelu = _table("gelu", _act.gelu_forward, _act.gelu_backward)
tanh = _table("tanh", _tanh.tanh_forward, _tanh.tanh_backward)
softmax = _table("softmax", _softmax.softmax_forward, _softmax.softmax_backward)
log_softmax = _table("log_softmax", _softmax.log_softmax_forward, _softmax.log_softmax_backward)
attention_core = _table("attention_core", _att.attention_core_forward, _att.attention_core_backward)
attention = _table("attention", _att.attention_forward, _att.attention_backward)
blockwise_attention = _table(
    "blockwise_attention",
    _blockwise.blockwise_attention_forward,
    _blockwise.blockwise_attention_backward,
)
local_attention = _table(
    "local_attention", _local.local_attention_forward, _local.local_attention_backward
)
shaw_logits = _table("shaw_logits", _rel.shaw_logits_forward, _rel.shaw_logits_backward)
shaw_values = _table("shaw_values", _rel.shaw_values_forward, _rel.shaw_values_backward)
skew_logits = _table("skew_logits", _rel.skew_logits_forward, _rel.skew_logits_backward)
label_smoothed_nll = _table(
    "label_smoothed_nll", _loss.label_smoothed_nll_forward, _loss.label_smoothed_nll_backward
)
cross_entropy = _table("cross_entropy", _loss.cross_entropy_forward, _loss.cross_entropy_backward)

# The in-place forms (xp only: NumPy and CuPy), the default on both backends, bitwise equal
# to the references. Callers of these tables give up the input the form works in (the
# logits, the hidden layer).
_INPLACE = "in place: the input's buffer is reused (the caller gives it up); bitwise equal"


def _inplace(table: OpTable, forward, backward, note: str = _INPLACE, **more) -> None:
    table.register(
        Implementation("inplace", forward, backward, default=True, exact=True, note=note, **more)
    )


_inplace(attention_core, inplace.attention_core_forward, inplace.attention_core_backward)
_inplace(attention, inplace.attention_forward, inplace.attention_backward)
_inplace(relu, inplace.relu_forward, inplace.relu_backward)
_inplace(
    cross_entropy,
    inplace.cross_entropy_forward_inplace,
    inplace.cross_entropy_backward_inplace,
    note=_INPLACE + "; the cache serves one backward",
)
_inplace(
    embedding,
    _embedding.embedding_forward,
    _embedding.embedding_backward,
    note="backward_into: the gradient added into the parameter's, no (V, D) temporary",
    backward_into=inplace.embedding_backward_into,
)
_inplace(
    blockwise_attention,
    functools.partial(_blockwise.blockwise_attention_forward, core=inplace.attention_core_forward),
    functools.partial(
        _blockwise.blockwise_attention_backward, core_backward=inplace.attention_core_backward
    ),
    note="the in-place attention core on each block of queries; bitwise equal",
)


# The counter-based generator's dropout: its NumPy mirror (the reference op drawing from
# the counter-based generator, which the CUDA kernel reproduces bit for bit) and the
# kernel, written without a GPU: off until a GPU run proves it.
def _counter_dropout_forward(x, p: float, rng=None):
    """``dropout_forward`` with the draws of the counter-based generator: a generator of
    another kind is replaced by a counter-based one seeded from it."""
    if rng is not None and not isinstance(rng, CounterGenerator):
        rng = CounterGenerator(int(rng.integers(0, 2**62)))
    return _dropout.dropout_forward(x, p, rng)


def _cuda_dropout_forward(x, p: float, rng=None):
    from scratchformer.kernels import cupy_kernels  # noqa: PLC0415  (needs CuPy)

    return cupy_kernels.dropout_forward(x, p, rng)


dropout.register(
    Implementation(
        "counter",
        _counter_dropout_forward,
        _dropout.dropout_backward,
        exact=True,
        note="the NumPy mirror of the cuda kernel: the counter-based generator's masks",
    )
)
dropout.register(
    Implementation(
        "cuda",
        _cuda_dropout_forward,
        _dropout.dropout_backward,
        backends=("cupy",),
        proven=False,
        exact=True,
        note="one launch (kernels/cuda_sources.py DROPOUT), the counter-based masks",
    )
)

#: the activation tables by config name
ACTIVATIONS = {"relu": relu, "gelu": gelu}

__all__ = [
    "ACTIVATIONS",
    "REFERENCE",
    "TABLES",
    "Implementation",
    "KernelError",
    "OpTable",
    "reference",
    "reference_forced",
    "set_reference",
    "table",
    "use",
]
