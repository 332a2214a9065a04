"""embedding: ``out = E[ids]`` (ops/embedding.py), and a backward that adds straight
into the parameter's gradient.

    reference   ops/embedding.py: ``dE`` (V, D) made, then added by the caller
    into        the same forward; ``backward_into`` adds the rows looked up into the
                gradient buffer itself (no (V, D) temporary), the default

Dimension key: ``B`` batch, ``T`` length, ``V`` vocabulary, ``D`` d_model.
"""

from __future__ import annotations

from scratchformer import device
from scratchformer.kernels.cases import Case, ids, randn
from scratchformer.kernels.table import Implementation, Schema, new_table
from scratchformer.ops import embedding as _op

SCHEMA = Schema(inputs=("ids", "E", "pad_id"), gradients=("dE",))


def cases(r, dt):
    E = randn(r, (7, 5), dt)
    return [
        Case("pad 0, repeated ids", (ids(r, (3, 4), 7, pad=0), E, 0)),
        Case("no pad", (ids(r, (2, 5), 7), E)),
    ]


def backward_into(dE, dout, cache: _op.EmbeddingCache) -> None:
    """``dE += embedding_backward(dout)``, touching only the rows looked up: the rows of
    ``dout`` at padding are zeroed (a product with the mask: no boolean index, which a
    GPU would read back) and the rest scatter-added (``device.scatter_add``), repeats
    adding up. No (V, D) temporary."""
    ids_, _, pad_id = cache
    rows = dout.reshape(-1, dout.shape[-1])  # (N, D)
    flat = ids_.reshape(-1)  # (N,)
    if pad_id is not None:
        rows = rows * (flat != pad_id)[:, None]
    device.scatter_add(dE, flat, rows)


TABLE = new_table("embedding", SCHEMA, _op.embedding_forward, _op.embedding_backward, cases)
TABLE.register(
    Implementation(
        "into", _op.embedding_forward, _op.embedding_backward, default=True, exact=True,
        backward_into=backward_into,
        note="backward_into: the gradient added into the parameter's, no (V, D) temporary",
    )
)  # fmt: skip
forward, backward, backward_into = TABLE.forward, TABLE.backward, TABLE.backward_into
