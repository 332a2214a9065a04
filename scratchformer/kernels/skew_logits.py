"""skew_logits: the Music Transformer's logits ``Z = s (Q K^T + Skew(Q Er^T))``, or their
gather form when queries and keys do not line up (ops/relative_attention.py). The
reference alone.

Dimension key: ``B`` batch, ``H`` heads, ``T`` queries, ``S`` keys, ``Dh`` d_k, ``k``
the largest distance.
"""

from __future__ import annotations

from scratchformer.kernels.cases import Case, qkv, randn
from scratchformer.kernels.table import Schema, new_table
from scratchformer.ops import relative_attention as _op

SCHEMA = Schema(inputs=("Q", "K", "E_r", "offset"), gradients=("dQ", "dK", "dE_r"))


def cases(r, dt):
    Q, K, _ = qkv(r, dt, T=6, S=6)
    Qd, Kd, _ = qkv(r, dt, T=2, S=6)
    E_r = randn(r, (3, 3, 4), dt)
    return [Case("skew form, L 6, k 2", (Q, K, E_r)), Case("gather form", (Qd, Kd, E_r, 4))]


TABLE = new_table("skew_logits", SCHEMA, _op.skew_logits_forward, _op.skew_logits_backward, cases)
forward, backward = TABLE.forward, TABLE.backward
