"""log_softmax: ``x - logsumexp(x)`` over the last axis (ops/softmax.py): decoding's
log-probabilities. The reference alone."""

from __future__ import annotations

from scratchformer.kernels.cases import Case, randn
from scratchformer.kernels.table import Schema, new_table
from scratchformer.ops import softmax as _op


def cases(r, dt):
    return [Case("(3, 7)", (randn(r, (3, 7), dt),))]


TABLE = new_table(
    "log_softmax", Schema(inputs=("x",), gradients=("dx",)), _op.log_softmax_forward,
    _op.log_softmax_backward, cases,
)  # fmt: skip
forward, backward = TABLE.forward, TABLE.backward
