"""dot_product_logits: the paper's logits ``Z = Q K^T / sqrt(d_k)`` (ops/attention.py),
the logits of dense attention (which then goes through the attention core).

    reference   ops/attention.py
    inplace     the same forward; the backward scales dZ in its own buffer (the caller
                gives dZ up), bitwise equal, the default

Dimension key: ``B`` batch, ``H`` heads, ``T`` queries, ``S`` keys, ``Dh`` d_k; ``...``
any leading dims (local attention's blocks).
"""

from __future__ import annotations

from scratchformer.kernels.cases import Case, qkv
from scratchformer.kernels.table import Implementation, Schema, new_table
from scratchformer.ops import attention as _op

SCHEMA = Schema(inputs=("Q", "K"), gradients=("dQ", "dK"))


def cases(r, dt):
    Q, K, _ = qkv(r, dt)
    return [Case("T 5, S 7, Dh 4", (Q, K))]


def inplace_backward(dZ, cache: _op.DotProductLogitsCache):
    """``dQ = s dZ K``, ``dK = s dZ^T Q`` with ``dZ *= s`` in dZ's buffer."""
    dZ *= cache.scale
    dQ = dZ @ cache.K  # (..., T, Dh)
    dK = dZ.swapaxes(-1, -2) @ cache.Q  # (..., S, Dh)
    return dQ, dK


TABLE = new_table(
    "dot_product_logits", SCHEMA, _op.dot_product_logits_forward,
    _op.dot_product_logits_backward, cases,
)  # fmt: skip
TABLE.register(
    Implementation(
        "inplace", _op.dot_product_logits_forward, inplace_backward, default=True,
        exact=True, donates=("dout",), note="the backward scales dZ in its buffer (given up)",
    )
)  # fmt: skip
forward, backward = TABLE.forward, TABLE.backward
