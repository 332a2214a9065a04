"""attention_core: ``O = dropout(softmax(Z, mask)) V`` (ops/attention.py), the one core
of every attention: dense, Shaw's, the skew's, local (on its blocks) and blockwise (on
each block of queries) all call this table after their logits, so an implementation
registered here serves them all.

    reference   ops/attention.py
    composite   the same steps through the softmax and dropout tables: chosen whenever
                one of those has an implementation put in place (a learner's), so that
                it is reached through every attention
    inplace     the softmax in the logits' buffer (the caller gives Z up), the backward
                in the buffer of ``dA' = dO V^T`` with the row sum as ``device.rowdot``:
                no (..., T, S) temporary in either pass, the default
    online      FlashAttention's algorithm in NumPy: the keys in tiles, an online
                softmax (a running max and sum per row, the partial output rescaled as
                the max grows), and a cache of one log-sum-exp per row instead of the
                probabilities; the backward recomputes each tile's probabilities from
                it and uses ``D = rowsum(dO * O)`` for the softmax's row sum. Its
                dropout mask is drawn again from a copy of the generator, not kept.

The accessors: ``weights`` (A, the attention weights before dropout: for plots) and
``dropped_weights`` (A', what multiplied V: for a variant's value term).

Dimension key: ``T`` queries, ``S`` keys, ``Dv`` d_v; ``...`` any leading dims
(B, H, and local attention's blocks). Derivations: docs/derivations.md#the-attention-core
and #memory-efficient-attention.
"""

from __future__ import annotations

from typing import NamedTuple

from scratchformer import device
from scratchformer.backend import xp
from scratchformer.kernels import dropout as _dropout
from scratchformer.kernels import softmax as _softmax
from scratchformer.kernels.cases import Case, Seed, mask, randn
from scratchformer.kernels.table import COMPOSITE, Implementation, Schema, new_table
from scratchformer.ops import attention as _op
from scratchformer.ops.dropout import dropout_forward, dropout_mask
from scratchformer.ops.softmax import SoftmaxCache

SCHEMA = Schema(
    inputs=("Z", "V", "mask", "p_drop", "rng"),
    gradients=("dZ", "dV"),
    accessors=("weights", "dropped_weights"),
    donatable=("Z",),
    parts=("softmax", "dropout"),
)


def cases(r, dt):
    Z, V = randn(r, (2, 3, 5, 7), dt), randn(r, (2, 3, 7, 6), dt)
    m = mask(r, (2, 1, 5, 7))
    Zw, Vw = randn(r, (2, 2, 3, 150), dt), randn(r, (2, 2, 150, 4), dt)  # three key tiles
    return [
        Case("masked, an empty row", (Z, V, m)),
        Case("dropout 0.25", (Z, V, m, 0.25), {"rng": Seed(9)}),
        Case("no mask", (Z, V)),
        Case("S 150, masked, dropout 0.1", (Zw, Vw, mask(r, (2, 1, 3, 150)), 0.1),
             {"rng": Seed(3)}),
    ]  # fmt: skip


_READ = {"weights": lambda c: c.softmax.P, "dropped_weights": lambda c: c.A_drop}


# -- composite: the steps through their tables ---------------------------------------------
class CompositeCache(NamedTuple):
    A: object  # (..., T, S) the softmax's output
    softmax: object  # the softmax table's cache
    A_drop: object  # (..., T, S) what multiplied V
    dropout: object  # the dropout table's cache
    V: object  # (..., S, Dv)


def composite_forward(Z, V, mask=None, p_drop: float = 0.0, rng=None):
    """The reference's three steps, the softmax and the dropout through their tables."""
    A, c_softmax = _softmax.forward(Z, mask)
    A_drop, c_drop = _dropout.forward(A, p_drop, rng)
    return A_drop @ V, CompositeCache(A, c_softmax, A_drop, c_drop, V)


def composite_backward(dO, cache: CompositeCache, dA_drop=None):
    dA = dO @ cache.V.swapaxes(-1, -2)  # (..., T, S) dA'
    if dA_drop is not None:
        dA = dA + dA_drop
    dV = cache.A_drop.swapaxes(-1, -2) @ dO  # (..., S, Dv)
    dA = _dropout.backward(dA, cache.dropout)
    return _softmax.backward(dA, cache.softmax), dV


# -- inplace: the softmax in the logits' buffer ----------------------------------------------
def softmax_inplace(x, mask=None):
    """``softmax_forward`` in x's buffer: the same steps (masked entries to -inf, the row
    max, 0 for a row with nothing unmasked, exp, the row sum, 1 for an empty row, one
    reciprocal per row), so the result is bitwise equal. No boolean-mask indexing: on
    CuPy that reads the mask's count back to the host."""
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


def inplace_forward(Z, V, mask=None, p_drop: float = 0.0, rng=None):
    """The core with its softmax in Z's buffer (Z is given up)."""
    A = softmax_inplace(Z, mask)
    A_drop, drop_cache = dropout_forward(A, p_drop, rng)
    O = A_drop @ V  # (..., T, Dv)
    return O, _op.AttentionCoreCache(SoftmaxCache(A), A_drop, drop_cache, V)


def inplace_backward(dO, cache: _op.AttentionCoreCache, dA_drop=None):
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


# -- online: FlashAttention's algorithm, the keys in tiles --------------------------------
#: keys per tile of the online core
TILE = 64


class OnlineCache(NamedTuple):
    Z: object  # (..., T, S) the logits (kept; the probabilities are not)
    mask: object  # bool broadcastable to Z's shape, or None
    lse: object  # (..., T, 1) log-sum-exp of each row's visible logits (0: none visible)
    O: object  # (..., T, Dv) the output, for D = rowsum(dO * O)
    V: object  # (..., S, Dv)
    p_drop: float
    replay: object  # the generator as it was before the mask was drawn (None: no dropout)


def _tiles(S: int):
    return [(j0, min(j0 + TILE, S)) for j0 in range(0, S, TILE)]


def _visible(Z, mask, j0: int, j1: int):
    """The tile ``j0:j1`` of the logits, -inf where the mask hides a key."""
    Zt = Z[..., j0:j1]
    if mask is None:
        return Zt
    return xp.where(xp.broadcast_to(mask, Z.shape)[..., j0:j1], Zt, -xp.inf)


def _keep(cache: OnlineCache):
    """The dropout mask (..., T, S), drawn again from the copy of the generator."""
    if cache.replay is None:
        return None
    fork = device.fork(cache.replay)
    return dropout_mask(cache.Z.shape, cache.p_drop, fork, cache.Z.dtype).mask


def online_forward(Z, V, mask=None, p_drop: float = 0.0, rng=None):
    """Per tile of keys j: ``m' = max(m, max Z_j)``; ``l = l e^(m - m') + sum e^(Z_j - m')``;
    ``acc = acc e^(m - m') + (e^(Z_j - m') * drop_j) V_j``; at the end ``O = acc / l`` and
    ``lse = m + log l``. A row with no visible key keeps m = -inf (taken as 0), l = 0
    (taken as 1): O = 0 and lse = 0."""
    on = rng is not None and p_drop > 0.0
    replay = device.fork(rng) if on else None
    keep = dropout_mask(Z.shape, p_drop, rng, Z.dtype).mask if on else None  # as the reference
    rows = Z.shape[:-1] + (1,)  # (..., T, 1)
    m = xp.full(rows, -xp.inf, dtype=Z.dtype)
    ell = xp.zeros(rows, dtype=Z.dtype)
    acc = xp.zeros(Z.shape[:-1] + V.shape[-1:], dtype=xp.result_type(Z.dtype, V.dtype))
    for j0, j1 in _tiles(Z.shape[-1]):
        Zt = _visible(Z, mask, j0, j1)  # (..., T, tile)
        m_new = xp.maximum(m, Zt.max(axis=-1, keepdims=True))
        base = xp.where(xp.isneginf(m_new), 0.0, m_new)  # a row with nothing yet: 0
        alpha = xp.exp(m - base)  # the old terms' rescaling (0 while m is -inf)
        Pt = xp.exp(Zt - base)  # (..., T, tile), 0 at hidden keys
        ell = ell * alpha + Pt.sum(axis=-1, keepdims=True)
        if on:
            Pt = Pt * keep[..., j0:j1] * (1.0 / (1.0 - p_drop))
        acc = acc * alpha + Pt @ V[..., j0:j1, :]
        m = m_new
    ell = xp.where(ell == 0, 1.0, ell)
    O = acc / ell  # (..., T, Dv)
    lse = xp.where(xp.isneginf(m), 0.0, m) + xp.log(ell)  # (..., T, 1)
    return O, OnlineCache(Z, mask, lse.astype(Z.dtype), O, V, p_drop, replay)


def _probabilities(cache: OnlineCache, j0: int, j1: int):
    """The tile ``j0:j1`` of the forward's probabilities, ``exp(Z - lse)`` (0 hidden)."""
    return xp.exp(_visible(cache.Z, cache.mask, j0, j1) - cache.lse)


def online_backward(dO, cache: OnlineCache, dA_drop=None):
    """Per tile of keys: ``P_j = exp(Z_j - lse)``, ``A'_j = P_j * drop_j``,
    ``dV_j = A'_j^T dO``, ``dA'_j = dO V_j^T (+ dA_drop_j)``, ``dA_j = dA'_j * drop_j``,
    ``dZ_j = P_j * (dA_j - D)`` with the row sum ``D = sum(dA * A) = sum(dA' * A')
    = rowsum(dO * O) (+ rowsum(dA_drop * A'))``: no (T, S) array of the forward is kept."""
    keep = _keep(cache)
    scale = 1.0 / (1.0 - cache.p_drop) if keep is not None else 1.0
    tiles = _tiles(cache.Z.shape[-1])
    D = (dO * cache.O).sum(axis=-1, keepdims=True)  # (..., T, 1)
    if dA_drop is not None:  # the value term's share of the row sum: a first pass
        for j0, j1 in tiles:
            At = _probabilities(cache, j0, j1)
            if keep is not None:
                At = At * keep[..., j0:j1] * scale
            D = D + (dA_drop[..., j0:j1] * At).sum(axis=-1, keepdims=True)
    dZ = xp.empty(cache.Z.shape, dtype=dO.dtype)
    dV = xp.empty(cache.V.shape, dtype=dO.dtype)
    for j0, j1 in tiles:
        Pt = _probabilities(cache, j0, j1)  # (..., T, tile)
        At = Pt if keep is None else Pt * keep[..., j0:j1] * scale
        dV[..., j0:j1, :] = At.swapaxes(-1, -2) @ dO
        dAt = dO @ cache.V[..., j0:j1, :].swapaxes(-1, -2)  # (..., T, tile) dA'
        if dA_drop is not None:
            dAt = dAt + dA_drop[..., j0:j1]
        if keep is not None:
            dAt = dAt * keep[..., j0:j1] * scale
        dZ[..., j0:j1] = Pt * (dAt - D)
    return dZ, dV


def _online_weights(cache: OnlineCache):
    return xp.concatenate([_probabilities(cache, *t) for t in _tiles(cache.Z.shape[-1])], -1)


def _online_dropped(cache: OnlineCache):
    A = _online_weights(cache)
    keep = _keep(cache)
    return A if keep is None else A * keep * (1.0 / (1.0 - cache.p_drop))


# -- the table -----------------------------------------------------------------------------
TABLE = new_table(
    "attention_core", SCHEMA, _op.attention_core_forward, _op.attention_core_backward, cases,
    accessors=_READ,
)  # fmt: skip
TABLE.register(
    Implementation(
        COMPOSITE, composite_forward, composite_backward, exact=True,
        accessors={"weights": lambda c: c.A, "dropped_weights": lambda c: c.A_drop},
        note="through the softmax and dropout tables: chosen when one has an implementation "
        "put in place",
    )
)  # fmt: skip
TABLE.register(
    Implementation(
        "inplace", inplace_forward, inplace_backward, default=True,
        donates=("Z",), accessors=_READ,
        note="the softmax in the logits' buffer (given up); the backward in dA's",
    )
)  # fmt: skip
TABLE.register(
    Implementation(
        "online", online_forward, online_backward,
        accessors={"weights": _online_weights, "dropped_weights": _online_dropped},
        note=f"FlashAttention's algorithm: keys in tiles of {TILE}, online softmax, keeps "
        "one log-sum-exp per row",
    )
)  # fmt: skip
forward, backward = TABLE.forward, TABLE.backward
weights = TABLE.accessor("weights")
dropped_weights = TABLE.accessor("dropped_weights")

__all__ = ["TABLE", "TILE", "backward", "dropped_weights", "forward", "weights"]
