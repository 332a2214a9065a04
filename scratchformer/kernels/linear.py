"""linear: ``y = x W + b`` (ops/linear.py). The reference alone: its products are BLAS
calls already.

Dimension key: ``D_in``, ``D_out`` the widths; ``...`` any leading dims.
"""

from __future__ import annotations

from scratchformer.kernels.cases import Case, randn
from scratchformer.kernels.table import Schema, new_table
from scratchformer.ops import linear as _op

SCHEMA = Schema(inputs=("x", "W", "b"), gradients=("dx", "dW", "db"))


def cases(r, dt):
    x, W, b = randn(r, (2, 3, 5), dt), randn(r, (5, 4), dt), randn(r, (4,), dt)
    return [Case("with bias", (x, W, b)), Case("no bias", (x, W))]


TABLE = new_table("linear", SCHEMA, _op.linear_forward, _op.linear_backward, cases)
forward, backward = TABLE.forward, TABLE.backward
