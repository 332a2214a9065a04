"""gelu: ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`` (ops/activations.py). The
reference alone."""

from __future__ import annotations

from scratchformer.kernels.cases import pointwise
from scratchformer.kernels.table import Schema, new_table
from scratchformer.ops import activations as _op

TABLE = new_table(
    "gelu", Schema(inputs=("x",), gradients=("dx",)), _op.gelu_forward, _op.gelu_backward,
    pointwise,
)  # fmt: skip
forward, backward = TABLE.forward, TABLE.backward
