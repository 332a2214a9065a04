"""The attention core, and scaled dot-product attention built on it (section 3.2.1).

Every attention of the package is the same three steps after its logits ``Z``:

    A = softmax(Z, mask)      rows with nothing to see give zeros
    A' = dropout(A)           attention dropout
    O = A' V

That is the **attention core** (``attention_core_forward`` / ``attention_core_backward``),
written once here; its reference calls the softmax and the dropout through their tables,
so whatever runs there (a learner's softmax) runs in every attention. The variants
differ only in how they make ``Z`` and whether their output reads ``A'`` once more:

    dense (the paper)    Z = Q K^T / sqrt(d_k)                        this file
    Shaw et al.          Z += Q E_k[idx]^T, O += scatter(A', idx) E_v   ops/relative_attention.py
    Music Transformer    Z += Skew(Q E_r^T)                             ops/relative_attention.py
    local (1-D blocks)   the dense steps on blocked queries and windows  nn/local_attention.py
    memory-efficient     the same steps on blocks of queries, recomputed  nn/attention.py

The reference pairs come first. What runs by default are the faster forms below them:

    inplace   the core with the softmax in the logits' buffer (the caller gives Z up),
              the backward in the buffer of ``dA' = dO V^T`` with the row sum as
              ``device.rowdot``: no (..., T, S) temporary in either pass
    online    FlashAttention's algorithm in NumPy: the keys in tiles, an online softmax
              (a running max and sum per row, the partial output rescaled as the max
              grows), and a cache of one log-sum-exp per row instead of the
              probabilities; the backward recomputes each tile's probabilities from it
              and uses ``D = rowsum(dO * O)`` for the softmax's row sum. Its dropout
              mask is drawn again from a copy of the generator, not kept. Not a default
    logits    the paper's logits with a backward that scales ``dZ`` in its own buffer
              (the caller gives dZ up), bitwise equal

float16 activations take the emulated float16 forms (ops/float16.py).

Dimension key: ``B`` batch, ``H`` heads, ``T`` queries, ``S`` keys, ``Dh`` d_k, ``Dv`` d_v;
``...`` any leading dims (the core also serves local attention's (B, H, nb, M, 2M)).
Derivations: docs/derivations.md#the-attention-core, #scaled-dot-product-attention
and #memory-efficient-attention.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from scratchformer.engine import device
from scratchformer.engine.backend import xp
from scratchformer.engine.dispatch import Op
from scratchformer.engine.ops import float16
from scratchformer.engine.ops.cases import Case, Seed, mask, qkv, randn
from scratchformer.engine.ops.dropout import dropout, dropout_forward, dropout_mask
from scratchformer.engine.ops.softmax import SoftmaxCache, softmax


def causal_mask(T: int, S: int | None = None, offset: int = 0):
    """Bool (T, S): query t (at absolute position offset + t) may see keys 0..offset + t."""
    S = T if S is None else S
    q = xp.arange(T)[:, None] + offset
    k = xp.arange(S)[None, :]
    return k <= q


# -- the core -----------------------------------------------------------------------------
class AttentionCoreCache(NamedTuple):
    softmax: object  # the softmax's cache: P = A (..., T, S), the weights before dropout
    A_drop: object  # (..., T, S) the weights that multiplied V (A itself without dropout)
    dropout: object  # the attention dropout's cache: its mask (None when off) and scale
    V: object  # (..., S, Dv)


def attention_core_forward(Z, V, mask=None, p_drop: float = 0.0, rng=None):
    """``O = dropout(softmax(Z, mask)) V``.

    Z (..., T, S) the logits (already scaled; a faster implementation may work in their
    buffer, so the caller gives them up), V (..., S, Dv), mask bool broadcastable to
    Z's shape, True where query t may attend to key s  ->  O (..., T, Dv).

    1. ``A = softmax(Z, mask)``; a row whose mask is all False gives zeros
    2. ``A' = dropout(A)``: on when ``rng`` is given and ``p_drop > 0``
    3. ``O = A' V``
    """
    A, sm_cache = softmax.forward(Z, mask)
    A_drop, drop_cache = dropout.forward(A, p_drop, rng)
    O = A_drop @ V  # (..., T, Dv)
    return O, AttentionCoreCache(sm_cache, A_drop, drop_cache, V)


def attention_core_backward(dO, cache: AttentionCoreCache, dA_drop=None):
    """Reverse of the core:

    3. ``O = A' V``          ->  ``dA' = dO V^T (+ dA_drop)``, ``dV = A'^T dO``
    2. ``A' = dropout(A)``   ->  ``dA = dA' * mask_drop``
    1. ``A = softmax(Z)``    ->  ``dZ = A * (dA - sum(dA * A, -1))``

    ``dA_drop`` (..., T, S) is the gradient of ``A'`` from a term of a variant's output
    that reads the weights again (Shaw's value term); None when there is none.
    Returns ``(dZ, dV)``. dV is taken with the post-dropout ``A'``, never ``A``.
    """
    dA = dO @ cache.V.swapaxes(-1, -2)  # (..., T, S) dA'
    if dA_drop is not None:
        dA = dA + dA_drop
    dV = cache.A_drop.swapaxes(-1, -2) @ dO  # (..., S, Dv)
    dA = dropout.backward(dA, cache.dropout)
    dZ = softmax.backward(dA, cache.softmax)
    return dZ, dV


# -- scaled dot-product attention -----------------------------------------------------------
class DotProductLogitsCache(NamedTuple):
    Q: object  # (B, H, T, Dh)
    K: object  # (B, H, S, Dh)
    scale: float  # 1 / sqrt(d_k)


def dot_product_logits_forward(Q, K):
    """The paper's logits: Q (B, H, T, Dh), K (B, H, S, Dh)  ->  ``Z = Q K^T / sqrt(d_k)``
    (B, H, T, S)."""
    scale = 1.0 / math.sqrt(Q.shape[-1])
    Z = Q @ K.swapaxes(-1, -2)  # (B, H, T, S)
    Z *= scale
    return Z, DotProductLogitsCache(Q, K, scale)


def dot_product_logits_backward(dZ, cache: DotProductLogitsCache):
    """``Z = s Q K^T``  ->  ``dQ = s dZ K``, ``dK = s dZ^T Q`` (not ``Q^T dZ``).
    Returns ``(dQ, dK)``."""
    dZ = dZ * cache.scale
    dQ = dZ @ cache.K  # (B, H, T, Dh)
    dK = dZ.swapaxes(-1, -2) @ cache.Q  # (B, H, S, Dh)
    return dQ, dK


class AttentionCache(NamedTuple):
    logits: DotProductLogitsCache  # Q, K and the scale
    core: AttentionCoreCache  # softmax, dropout and V


def attention_forward(Q, K, V, mask=None, p_drop: float = 0.0, rng=None):
    """Q (B, H, T, Dh), K (B, H, S, Dh), V (B, H, S, Dv), mask bool broadcastable to
    (B, H, T, S) with True where query t may attend to key s  ->  O (B, H, T, Dv).

    1. ``Z = Q K^T / sqrt(d_k)``
    2. ``O = core(Z, V)``: masked softmax, dropout, product with V

    Rows whose mask is all False (a query with nothing to attend to) output zeros.
    """
    Z, logits = dot_product_logits_forward(Q, K)
    O, core = attention_core_forward(Z, V, mask, p_drop, rng)
    return O, AttentionCache(logits, core)


def attention_backward(dO, cache: AttentionCache):
    """2. ``dZ, dV = core_backward(dO)``
    1. ``dQ, dK = logits_backward(dZ)``

    Returns ``(dQ, dK, dV)``.
    """
    dZ, dV = attention_core_backward(dO, cache.core)
    dQ, dK = dot_product_logits_backward(dZ, cache.logits)
    return dQ, dK, dV


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


def attention_core_inplace_forward(Z, V, mask=None, p_drop: float = 0.0, rng=None):
    """The core with its softmax in Z's buffer (Z is given up)."""
    A = softmax_inplace(Z, mask)
    A_drop, drop_cache = dropout_forward(A, p_drop, rng)
    O = A_drop @ V  # (..., T, Dv)
    return O, AttentionCoreCache(SoftmaxCache(A), A_drop, drop_cache, V)


def attention_core_inplace_backward(dO, cache: AttentionCoreCache, dA_drop=None):
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


#: the inplace form's accessors: the weights before and after dropout
INPLACE_READ = {"weights": lambda c: c.softmax.P, "dropped_weights": lambda c: c.A_drop}


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


def attention_core_online_forward(Z, V, mask=None, p_drop: float = 0.0, rng=None):
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


def attention_core_online_backward(dO, cache: OnlineCache, dA_drop=None):
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


#: the online form's accessors: the weights made again from the log-sum-exp
ONLINE_READ = {"weights": _online_weights, "dropped_weights": _online_dropped}


# -- the logits' backward in dZ's buffer ------------------------------------------------------
def dot_product_logits_inplace_backward(dZ, cache: DotProductLogitsCache):
    """``dQ = s dZ K``, ``dK = s dZ^T Q`` with ``dZ *= s`` in dZ's buffer."""
    dZ *= cache.scale
    dQ = dZ @ cache.K  # (..., T, Dh)
    dK = dZ.swapaxes(-1, -2) @ cache.Q  # (..., S, Dh)
    return dQ, dK


# -- the parity cases and the registration ---------------------------------------------------
def attention_core_cases(r, dt):
    Z, V = randn(r, (2, 3, 5, 7), dt), randn(r, (2, 3, 7, 6), dt)
    m = mask(r, (2, 1, 5, 7))
    Zw, Vw = randn(r, (2, 2, 3, 150), dt), randn(r, (2, 2, 150, 4), dt)  # three key tiles
    return [
        Case("masked, an empty row", (Z, V, m)),
        Case("dropout 0.25", (Z, V, m, 0.25), {"rng": Seed(9)}),
        Case("no mask", (Z, V)),
        Case("S 150, masked, dropout 0.1", (Zw, Vw, mask(r, (2, 1, 3, 150)), 0.1),
             {"rng": Seed(3)}),
    ]


def dot_product_logits_cases(r, dt):
    Q, K, _ = qkv(r, dt)
    return [Case("T 5, S 7, Dh 4", (Q, K))]


attention_core = Op(
    "attention_core", attention_core_forward, attention_core_backward,
    inputs=("Z", "V", "mask", "p_drop", "rng"), gradients=("dZ", "dV"),
    accessors={"weights": lambda c: softmax.read(c.softmax, "P"),
               "dropped_weights": lambda c: c.A_drop},
    donatable=("Z",), parts=("softmax", "dropout"), cases=attention_core_cases,
)
attention_core.register("inplace", attention_core_inplace_forward,
                        attention_core_inplace_backward, default=True, donates=("Z",),
                        accessors=INPLACE_READ,
                        note="the softmax in the logits' buffer (given up); the backward in dA's")
attention_core.register("online", attention_core_online_forward, attention_core_online_backward,
                        accessors=ONLINE_READ,
                        note=f"FlashAttention's algorithm: keys in tiles of {TILE}, online "
                        "softmax, keeps one log-sum-exp per row")
float16.register(attention_core, products=True)

dot_product_logits = Op("dot_product_logits", dot_product_logits_forward,
                        dot_product_logits_backward, inputs=("Q", "K"), gradients=("dQ", "dK"),
                        cases=dot_product_logits_cases)
dot_product_logits.register("inplace", dot_product_logits_forward,
                            dot_product_logits_inplace_backward, default=True, exact=True,
                            donates=("dout",),
                            note="the backward scales dZ in its buffer (given up)")
float16.register(dot_product_logits, products=True)

__all__ = [
    "AttentionCache",
    "AttentionCoreCache",
    "TILE",
    "DotProductLogitsCache",
    "attention_backward",
    "attention_core",
    "attention_core_backward",
    "attention_core_forward",
    "attention_forward",
    "causal_mask",
    "dot_product_logits",
    "dot_product_logits_backward",
    "dot_product_logits_forward",
]
