"""tanh (ops/tanh.py): the classifier head's activation. The reference alone."""

from __future__ import annotations

from scratchformer.kernels.cases import pointwise
from scratchformer.kernels.table import Schema, new_table
from scratchformer.ops import tanh as _op

TABLE = new_table(
    "tanh", Schema(inputs=("x",), gradients=("dx",)), _op.tanh_forward, _op.tanh_backward,
    pointwise,
)  # fmt: skip
forward, backward = TABLE.forward, TABLE.backward
