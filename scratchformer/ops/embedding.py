"""Embedding lookup: ``out[b, t] = E[ids[b, t]]``.

Dimension key: ``B`` batch, ``T`` length, ``V`` vocabulary, ``D`` d_model.
Derivation: docs/derivations.md#embedding.
"""

from __future__ import annotations

from typing import NamedTuple

from scratchformer import device
from scratchformer.backend import xp


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
