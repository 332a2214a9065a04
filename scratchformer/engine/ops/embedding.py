"""Embedding lookup: ``out[b, t] = E[ids[b, t]]``.

The reference pair first. What runs by default is the same forward with a backward that
adds the rows looked up straight into the parameter's gradient (``backward_into``,
below): no (V, D) temporary. Its first floating input is a parameter, so it has no
float16 form: float32 serves.

Dimension key: ``B`` batch, ``T`` length, ``V`` vocabulary, ``D`` d_model.
Derivation: docs/derivations.md#embedding.
"""

from __future__ import annotations

from typing import NamedTuple

from scratchformer.engine import device
from scratchformer.engine.backend import xp
from scratchformer.engine.dispatch import Op
from scratchformer.engine.ops.cases import Case, ids, randn


class EmbeddingCache(NamedTuple):
    ids: object  # (B, T) int token ids
    vocab_size: int  # V, rows of E
    pad_id: int | None  # this row receives no gradient


def embedding_forward(ids, E, pad_id=None):
    """``out = E[ids]``.

    ids (B, T) int, E (V, D)  ->  out (B, T, D).
    """
    return E[ids], EmbeddingCache(ids, E.shape[0], pad_id)


def embedding_backward(dout, cache: EmbeddingCache):
    """``dE[v] = sum over positions with ids == v of dout``; ``dE[pad_id] = 0``.

    Repeated ids must accumulate (a plain ``dE[ids] += dout`` keeps only one of them),
    hence the scatter-add (``device.scatter_add``). Returns ``dE`` (V, D).
    """
    ids, vocab_size, pad_id = cache
    d = dout.shape[-1]
    dE = xp.zeros((vocab_size, d), dtype=dout.dtype)
    device.scatter_add(dE, ids.reshape(-1), dout.reshape(-1, d))
    if pad_id is not None:
        dE[pad_id] = 0
    return dE


# -- adding into the gradient buffer ----------------------------------------------------------
def embedding_backward_into(dE, dout, cache: EmbeddingCache) -> None:
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


# -- the parity cases and the registration ---------------------------------------------------
def cases(r, dt):
    E = randn(r, (7, 5), dt)
    return [
        Case("pad 0, repeated ids", (ids(r, (3, 4), 7, pad=0), E, 0)),
        Case("no pad", (ids(r, (2, 5), 7), E)),
    ]


embedding = Op("embedding", embedding_forward, embedding_backward, inputs=("ids", "E", "pad_id"),
               gradients=("dE",), cases=cases)
embedding.register("into", embedding_forward, embedding_backward, default=True, exact=True,
                   backward_into=embedding_backward_into,
                   note="backward_into: the gradient added into the parameter's, no (V, D) "
                   "temporary")
