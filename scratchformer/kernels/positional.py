"""positional: ``x + P[offset : offset + T]`` (ops/positional.py). The reference alone.

Dimension key: ``B`` batch, ``T`` length, ``D`` d_model, ``L`` table length.
"""

from __future__ import annotations

from scratchformer.kernels.cases import Case, randn
from scratchformer.kernels.table import Schema, new_table
from scratchformer.ops import positional as _op

SCHEMA = Schema(inputs=("x", "P", "offset"), gradients=("dx", "dP"))


def cases(r, dt):
    x, P = randn(r, (2, 4, 6), dt), randn(r, (10, 6), dt)
    return [Case("offset 0", (x, P)), Case("offset 3", (x, P, 3))]


TABLE = new_table("positional", SCHEMA, _op.positional_forward, _op.positional_backward, cases)
forward, backward = TABLE.forward, TABLE.backward
