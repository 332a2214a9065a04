"""shaw_logits: Shaw et al.'s logits ``Z = s (Q K^T + gather(Q E_k^T, idx))``
(ops/relative_attention.py). The reference alone. Its accessor ``idx`` gives the
(T, S) buckets, which the value term reads.

Dimension key: ``B`` batch, ``H`` heads, ``T`` queries, ``S`` keys, ``Dh`` d_k,
``R = 2k+1`` buckets.
"""

from __future__ import annotations

from scratchformer.kernels.cases import Case, qkv, randn
from scratchformer.kernels.table import Schema, new_table
from scratchformer.ops import relative_attention as _op

SCHEMA = Schema(inputs=("Q", "K", "E_k", "offset"), gradients=("dQ", "dK", "dE_k"),
                accessors=("idx",))  # fmt: skip


def cases(r, dt):
    Q, K, _ = qkv(r, dt)
    E_k = randn(r, (5, 4), dt)
    return [Case("k 2, offset 0", (Q, K, E_k)), Case("k 2, offset 2", (Q, K, E_k, 2))]


TABLE = new_table(
    "shaw_logits", SCHEMA, _op.shaw_logits_forward, _op.shaw_logits_backward, cases,
    accessors={"idx": lambda c: c.idx},
)  # fmt: skip
forward, backward = TABLE.forward, TABLE.backward
idx = TABLE.accessor("idx")
