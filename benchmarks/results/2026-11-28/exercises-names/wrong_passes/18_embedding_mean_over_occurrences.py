# ruff: noqa
"""Exercise embedding: the backward pass of an embedding lookup. Write ``embedding_backward`` below.

The token embedding: ``out[b, t] = E[ids[b, t]]``, a row of E per token. The padding id's
row is a constant (zero) that must receive no gradient.

    scratchformer exercise check embedding      grade it
    scratchformer exercise hint embedding       the next hint
    scratchformer exercise solution embedding   the engine's code and derivation

The derivation: docs/derivations.md#embedding (on the docs site: derivations.html#embedding).
The forward is given as the engine has it (scratchformer/engine/ops/embedding.py); the
checker runs the engine's forward and compares your backward with float64
central differences of sum(out * dout) on these inputs:
    pad 0, repeated ids
    no pad

``xp`` is NumPy (CuPy on a GPU): xp.zeros, xp.sum, xp.exp, ... as with np.
"""

from __future__ import annotations

from scratchformer.engine.backend import xp
from scratchformer.engine import device  # device.segment_sum(idx, rows, K): equal indices add up
from scratchformer.engine.ops.embedding import EmbeddingCache

EXERCISE = "embedding"


# -- given: the forward pass, as in the engine ---------------------------------------------
def embedding_forward(ids, E, pad_id=None):
    """``out = E[ids]``.

    ids (B, T) int, E (V, D)  ->  out (B, T, D).
    """
    return E[ids], EmbeddingCache(ids, E.shape[0], pad_id)


# -- yours: the backward pass --------------------------------------------------------------
def embedding_backward(dout, cache):
    """dout (B, T, D): the gradient of the loss with respect to ``out``.

    cache (an EmbeddingCache):
        cache.ids         (B, T) int   the token ids looked up
        cache.vocab_size  int          V, the rows of E
        cache.pad_id      int or None  the padding id, whose row gets no gradient

    Return ``dE`` (V, D) like E. The same id may occur several times in ids.
    """
    d = dout.shape[-1]
    ids = cache.ids.reshape(-1)
    dE = xp.zeros((cache.vocab_size, d), dtype=dout.dtype)
    xp.add.at(dE, ids, dout.reshape(-1, d))
    count = xp.bincount(ids, minlength=cache.vocab_size)
    dE /= xp.maximum(count, 1)[:, None]
    if cache.pad_id is not None:
        dE[cache.pad_id] = 0
    return dE
