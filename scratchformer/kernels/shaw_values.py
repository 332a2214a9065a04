"""shaw_values: Shaw et al.'s value term ``O + scatter(A', idx) E_v``
(ops/relative_attention.py), which reads the core's post-dropout weights again. The
reference alone.

Dimension key: ``B`` batch, ``H`` heads, ``T`` queries, ``S`` keys, ``Dv`` d_v,
``R = 2k+1`` buckets.
"""

from __future__ import annotations

from scratchformer.kernels.cases import Case, randn
from scratchformer.kernels.table import Schema, new_table
from scratchformer.ops import relative_attention as _op

# the gradient of O passes through unchanged (O + ...): the backward returns the others
SCHEMA = Schema(inputs=("O", "A_drop", "E_v", "idx"), gradients=("dA_drop", "dE_v"))


def cases(r, dt):
    O, A, E_v = randn(r, (2, 3, 5, 6), dt), randn(r, (2, 3, 5, 7), dt), randn(r, (5, 6), dt)
    return [Case("k 2, offset 2", (O, A, E_v, _op.relative_index(5, 7, 2, 2)))]


TABLE = new_table("shaw_values", SCHEMA, _op.shaw_values_forward, _op.shaw_values_backward, cases)
forward, backward = TABLE.forward, TABLE.backward
