"""In-place forms of the ops whose inputs their callers give up: the same operations in
the same order as the reference, in the buffers they receive, so the results are
bitwise equal and no temporary of the input's size is made. Written with ``xp`` alone,
they serve NumPy and CuPy (no boolean-mask indexing: that reads the mask's count back to
the host on CuPy).

    attention_core    the masked softmax in the logits' buffer; the backward in dA's
    attention         the paper's logits, then the in-place core
    embedding         its gradient added straight into the parameter's (backward_into)
    relu              max(x, 0) in x's buffer, its backward in dout's
    cross_entropy     the probabilities in the logits' buffer, dlogits over them (the
                      cache then serves one backward: a second one raises)

The tables (scratchformer/kernels/__init__.py) register them as the default on both
backends; the parity harness (kernels/parity.py) checks each against its reference.
"""

from __future__ import annotations

from scratchformer import device
from scratchformer.backend import xp
from scratchformer.ops.activations import ReLUCache
from scratchformer.ops.attention import (
    AttentionCache,
    AttentionCoreCache,
    dot_product_logits_forward,
)
from scratchformer.ops.dropout import dropout_forward
from scratchformer.ops.embedding import EmbeddingCache
from scratchformer.ops.loss import LossCache, cross_entropy_backward, cross_entropy_forward
from scratchformer.ops.softmax import SoftmaxCache


# -- the attention core ----------------------------------------------------------------------
def softmax_inplace(x, mask=None):
    """``softmax_forward`` in x's buffer: the same steps (masked entries to -inf, the row
    max, 0 for a row with nothing unmasked, exp, the row sum, 1 for an empty row, one
    reciprocal per row), so the result is bitwise equal."""
    if mask is not None:
        xp.copyto(x, -xp.inf, where=xp.logical_not(mask))
    m = x.max(axis=-1, keepdims=True)  # (..., 1)
    if mask is not None:
        xp.copyto(m, 0.0, where=xp.isneginf(m))
    x -= m
    xp.exp(x, out=x)
    s = x.sum(axis=-1, keepdims=True)  # (..., 1)
    if mask is not None:
        xp.copyto(s, 1.0, where=s == 0)
    x *= 1.0 / s
    return x


def attention_core_forward(Z, V, mask=None, p_drop: float = 0.0, rng=None):
    """The attention core with its softmax in Z's buffer (Z is given up)."""
    A = softmax_inplace(Z, mask)
    A_drop, drop_cache = dropout_forward(A, p_drop, rng)
    O = A_drop @ V  # (..., T, Dv)
    return O, AttentionCoreCache(SoftmaxCache(A), A_drop, drop_cache, V)


def attention_core_backward(dO, cache: AttentionCoreCache, dA_drop=None):
    """The core's backward in the buffer of ``dA' = dO V^T``: dropout's two products and
    the softmax backward ``dZ = A * (dA - sum(dA * A, -1))`` without a temporary."""
    dA = dO @ cache.V.swapaxes(-1, -2)  # (..., T, S), fresh
    if dA_drop is not None:
        dA += dA_drop
    dV = cache.A_drop.swapaxes(-1, -2) @ dO  # (..., S, Dv)
    if cache.dropout.mask is not None:
        dA *= cache.dropout.mask
        dA *= cache.dropout.scale
    P = cache.softmax.P
    dA -= device.rowdot(dA, P)[..., None]
    dA *= P
    return dA, dV


def attention_forward(Q, K, V, mask=None, p_drop: float = 0.0, rng=None):
    """Scaled dot-product attention with the in-place core (its logits are its own)."""
    Z, logits = dot_product_logits_forward(Q, K)
    O, core = attention_core_forward(Z, V, mask, p_drop, rng)
    return O, AttentionCache(logits, core)


def attention_backward(dO, cache: AttentionCache):
    """The in-place core's backward, then the logits' (``dZ *= s`` in dZ's buffer)."""
    dZ, dV = attention_core_backward(dO, cache.core)
    dZ *= cache.logits.scale
    dQ = dZ @ cache.logits.K  # (B, H, T, Dh)
    dK = dZ.swapaxes(-1, -2) @ cache.logits.Q  # (B, H, S, Dh)
    return dQ, dK, dV


# -- the embedding's gradient, added into the parameter's ---------------------------------------
def embedding_backward_into(dE, dout, cache: EmbeddingCache) -> None:
    """``dE += embedding_backward(dout)``, touching only the rows looked up: the rows of
    ``dout`` at padding are zeroed (a product with the mask: no boolean index, which a
    GPU would read back) and the rest scatter-added (``device.scatter_add``), repeats
    adding up. No (V, D) temporary."""
    ids, _, pad_id = cache
    rows = dout.reshape(-1, dout.shape[-1])  # (N, D)
    ids = ids.reshape(-1)  # (N,)
    if pad_id is not None:
        rows = rows * (ids != pad_id)[:, None]
    device.scatter_add(dE, ids, rows)


# -- ReLU ----------------------------------------------------------------------------------------
def relu_forward(x):
    """``relu_forward`` in x's buffer (x is given up)."""
    positive = x > 0
    xp.multiply(x, positive, out=x)
    return x, ReLUCache(positive)


def relu_backward(dout, cache: ReLUCache):
    """``relu_backward`` in dout's buffer (dout is given up)."""
    xp.multiply(dout, cache.positive, out=dout)
    return dout


# -- the fused loss -------------------------------------------------------------------------------
def cross_entropy_forward_inplace(logits, target, eps: float = 0.0, pad_id=None):
    """The fused loss with the probabilities in the logits' buffer (the logits are given
    up); its cache allows one backward (``cross_entropy_backward_inplace``)."""
    loss, cache = cross_entropy_forward(logits, target, eps, pad_id, out=logits)
    return loss, cache._replace(spent=[False])


def cross_entropy_backward_inplace(dout, cache: LossCache):
    """dlogits written over the cached probabilities (the cache is then spent)."""
    return cross_entropy_backward(dout, cache, out=cache.P)


__all__ = [
    "attention_backward",
    "attention_core_backward",
    "attention_core_forward",
    "attention_forward",
    "cross_entropy_backward_inplace",
    "cross_entropy_forward_inplace",
    "embedding_backward_into",
    "relu_backward",
    "relu_forward",
    "softmax_inplace",
]
