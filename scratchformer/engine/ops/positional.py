"""Positions: the paper's sinusoids and a learned table, both added to the embeddings.

``out[b, t] = x[b, t] + P[offset + t]``. For sinusoids ``P`` is a constant table; for
learned positions it is a parameter and receives ``dP``. The reference pair is what
runs (float16 activations: its emulated float16 form, ops/float16.py).

Dimension key: ``B`` batch, ``T`` length, ``D`` d_model, ``L`` max_len.
Derivation: docs/derivations.md#positions.
"""

from __future__ import annotations

from typing import NamedTuple

from scratchformer.engine.backend import xp
from scratchformer.engine.dispatch import Op
from scratchformer.engine.ops import float16
from scratchformer.engine.ops.cases import Case, randn


def sinusoidal_table(max_len: int, d_model: int, dtype=None):
    """The paper's table, interleaved as in section 3.5 (not fairseq's concatenated halves).

    ``PE[pos, 2i] = sin(pos / 10000^(2i/d))``, ``PE[pos, 2i+1] = cos(pos / 10000^(2i/d))``.
    Returns (L, D). An odd ``d_model`` drops the last cosine column.
    """
    pos = xp.arange(max_len, dtype=xp.float64)[:, None]  # (L, 1)
    two_i = xp.arange(0, d_model, 2, dtype=xp.float64)[None, :]  # (1, ceil(D/2))
    angle = pos / xp.power(10000.0, two_i / d_model)  # (L, ceil(D/2))
    pe = xp.zeros((max_len, d_model), dtype=xp.float64)
    pe[:, 0::2] = xp.sin(angle)
    pe[:, 1::2] = xp.cos(angle[:, : d_model // 2])
    return pe.astype(dtype or xp.float32)


class PositionalCache(NamedTuple):
    length: int  # T
    offset: int  # first position used
    table_shape: tuple  # (L, D), the shape of dP


def positional_forward(x, P, offset: int = 0):
    """``out = x + P[offset : offset + T]``.

    x (B, T, D), P (L, D)  ->  out (B, T, D).
    """
    t = x.shape[1]
    return x + P[offset : offset + t], PositionalCache(t, offset, P.shape)


def positional_backward(dout, cache: PositionalCache):
    """``dx = dout``; ``dP[offset + t] = sum_b dout[b, t]``, zero elsewhere.

    Returns ``(dx, dP)``; ``dP`` (L, D) is only meaningful for learned positions.
    """
    t, offset, shape = cache
    dP = xp.zeros(shape, dtype=dout.dtype)
    dP[offset : offset + t] = dout.sum(axis=0)
    return dout, dP


def cases(r, dt):
    x, P = randn(r, (2, 4, 6), dt), randn(r, (10, 6), dt)
    return [Case("offset 0", (x, P)), Case("offset 3", (x, P, 3))]


positional = Op("positional", positional_forward, positional_backward,
                inputs=("x", "P", "offset"), gradients=("dx", "dP"), cases=cases)
float16.register(positional)

__all__ = ["positional", "positional_backward", "positional_forward", "sinusoidal_table"]
