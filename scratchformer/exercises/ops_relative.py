"""The relative-attention op exercises: Shaw's relative logits and the Music
Transformer's skew (after the attention exercise of ops_attention.py).

Each mistake is a wrong backward that a learner writes often, built from the engine's
own pieces with the one thing wrong; its hint says where to look, not what to write.
"""

from __future__ import annotations

from scratchformer.engine import dispatch
from scratchformer.engine.backend import xp
from scratchformer.engine.ops import relative_attention as rel
from scratchformer.exercises import draw
from scratchformer.exercises.op import OpExercise, mistake


# -- Shaw's relative logits --------------------------------------------------------------
def _shaw(dZ, cache, *, scatter=True, relative_dQ=True, dK_transposed=False):
    Q, K, E_k, idx, scale = cache
    R = E_k.shape[0]
    dZ = dZ * scale
    if scatter:
        dRel = rel.scatter_relative(dZ, idx, R)
    else:  # assignment: of the keys in one bucket, one lands
        dRel = xp.zeros((*dZ.shape[:-1], R), dtype=dZ.dtype)
        rows = xp.arange(idx.shape[0])[:, None]
        dRel[..., rows, idx] = dZ
    dQ = dZ @ K + (dRel @ E_k if relative_dQ else 0.0)
    dK = Q.swapaxes(-1, -2) @ dZ if dK_transposed else dZ.swapaxes(-1, -2) @ Q
    dE_k = dRel.reshape(-1, R).T @ Q.reshape(-1, Q.shape[-1])
    return dQ, dK, dE_k


SHAW = OpExercise(
    name="shaw",
    title="Shaw's relative attention logits",
    summary="Z = (Q K^T + gather(Q E_k^T, idx)) / sqrt(d_k): distances clipped to +-k",
    section="relative-attention-shaw",
    table="shaw_logits",
    forward=rel.shaw_logits_forward,
    backward=rel.shaw_logits_backward,
    signature="shaw_logits_backward(dZ, cache)",
    intro="""\
Shaw et al. (2018): the logits get a term for the distance between query and key,
clipped to +-k, from a table E_k of 2k+1 rows shared by the heads:

    idx[i, j] = clip(j - i, -k, k) + k          Z = s (Q K^T + gather(Q E_k^T, idx))

gather(X, idx)[..., i, j] = X[..., i, idx[i, j]]. Every key farther than k lands in an
edge bucket: buckets repeat along a row.""",
    docstring="""\
dZ (B, H, T, S): the gradient of the loss with respect to the logits ``Z``.

cache (a ShawLogitsCache):
    cache.Q      (B, H, T, Dh)
    cache.K      (B, H, S, Dh)
    cache.E_k    (R, Dh)   R = 2k + 1 relative key embeddings, shared by the heads
    cache.idx    (T, S)    int buckets in [0, R)
    cache.scale  float     1 / sqrt(Dh)

Return ``(dQ, dK, dE_k)`` like Q, K and E_k.""",
    imports="""\
import math

from scratchformer.engine.backend import xp
from scratchformer.engine import device  # device.segment_sum(idx, rows, K): equal indices add up
from scratchformer.engine.ops.relative_attention import ShawLogitsCache, relative_index""",
    given=(rel.gather_relative,),
    solution=(rel.scatter_relative,),
    cases=dispatch.table("shaw_logits").cases,
    drawn=draw.shaw,
    gradients=("dQ", "dK", "dE_k"),
    hints=(
        "Two terms: the content term s Q K^T (as in attention) and the relative term "
        "s gather(Rel, idx) with Rel = Q E_k^T of shape (B, H, T, R).",
        "The adjoint of the gather: dRel[..., i, r] is the sum of dZ'[..., i, j] over the "
        "keys j with idx[i, j] = r. Buckets repeat, so the writes must add up "
        "(np.add.at, or device.segment_sum).",
        "Rel = Q E_k^T gives dQ += dRel E_k and dE_k = sum over b, h, i of dRel^T Q "
        "(E_k is shared by every head and example).",
    ),
    mistakes=(
        mistake(
            "buckets-overwrite",
            "repeated buckets overwrite each other instead of adding up",
            "every key beyond +-k lands in the same edge bucket: the gather's adjoint sums "
            "them, a scatter-add (docs/derivations.md#relative-attention-shaw)",
            lambda dZ, cache: _shaw(dZ, cache, scatter=False),
            rel.shaw_logits_backward,
        ),
        mistake(
            "no-relative-dQ",
            "dQ without the relative term's part (dRel E_k)",
            "Q appears in both terms of Z: dQ has a part from Q E_k^T too "
            "(docs/derivations.md#relative-attention-shaw)",
            lambda dZ, cache: _shaw(dZ, cache, relative_dQ=False),
            rel.shaw_logits_backward,
        ),
        mistake(
            "transposed-dK",
            "a transposed dK: Q^T dZ, of shape (Dh, S) instead of K's (S, Dh)",
            "as in attention: dK = s dZ^T Q, a sum over the queries "
            "(docs/derivations.md#scaled-dot-product-attention)",
            lambda dZ, cache: _shaw(dZ, cache, dK_transposed=True),
            rel.shaw_logits_backward,
        ),
    ),
    uses=lambda model: (
        "relative self-attention"
        if "relative" in (model.attention, model.encoder_attention)
        else ""
    ),
)


# -- the Music Transformer's skew --------------------------------------------------------
def _unskew_bottom(dout):
    """The skew's adjoint done the wrong way: the zero row put back at the bottom."""
    *lead, L, _ = dout.shape
    d_padded = xp.zeros((*lead, L + 1, L), dtype=dout.dtype)
    d_padded[..., :-1, :] = dout
    return d_padded.reshape(*lead, L, L + 1)[..., 1:]


def _skew(dZ, cache, *, unskew=None, overwrite=False, relative_dQ=True):
    """The engine's skew backward with one part done wrong (the mistakes)."""
    dQ, dK, dE_r = rel.skew_logits_backward(dZ, cache)
    _, _, E_r, Er_L, rows, idx, scale = cache
    dZ = dZ * scale
    if idx is not None:  # the gather form
        if not relative_dQ:
            dQ = dQ - rel.scatter_relative(dZ, idx, E_r.shape[-2]) @ E_r
        return dQ, dK, dE_r
    drel = rel.skew_backward(dZ)  # (B, H, L, L)
    if not relative_dQ:
        dQ = dQ - drel @ Er_L
    if unskew is not None:  # the relative parts again, from the wrong adjoint
        wrong = unskew(dZ)
        dQ = dQ - drel @ Er_L + wrong @ Er_L
        dEr_L = (wrong.swapaxes(-1, -2) @ cache.Q).sum(axis=0)  # (H, L, Dh)
        onehot = (rows[:, None] == xp.arange(E_r.shape[-2])[None, :]).astype(dZ.dtype)  # (L, k+1)
        dE_r = (
            (onehot.T @ dEr_L.swapaxes(0, 1).reshape(len(rows), -1))
            .reshape(E_r.shape[1], E_r.shape[0], E_r.shape[2])
            .swapaxes(0, 1)
        )
    if overwrite:  # of the columns that read one row of E_r, one lands
        dEr_L = (drel.swapaxes(-1, -2) @ cache.Q).sum(axis=0)
        dE_r = xp.zeros_like(E_r)
        dE_r[:, rows] = dEr_L
    return dQ, dK, dE_r


SKEW = OpExercise(
    name="skew",
    title="the Music Transformer's relative logits with the skew",
    summary="Z = (Q K^T + Skew(Q Er^T)) / sqrt(d_k), causal; and its gather form",
    section="relative-attention-with-the-skew-music-transformer",
    table="skew_logits",
    forward=rel.skew_logits_forward,
    backward=rel.skew_logits_backward,
    signature="skew_logits_backward(dZ, cache)",
    intro="""\
Huang et al. (2018): a learned embedding per head of each distance i - j (clipped to k),
read for all pairs at once by the skew: Skew(rel)[i, j] = rel[i, L-1-(i-j)], done by
padding a zero column on the left, reshaping (L, L+1) -> (L+1, L) and dropping the first
row (skew_forward, below). Queries that do not line up with the keys (decoding) read the
same logits by a gather instead: write both branches.""",
    docstring="""\
dZ (B, H, T, S): the gradient of the loss with respect to the logits ``Z``.

cache (a SkewLogitsCache):
    cache.Q      (B, H, T, Dh)
    cache.K      (B, H, S, Dh)
    cache.E_r    (H, k+1, Dh)   one table per head, row d = the distance i - j (<= k)
    cache.Er_L   (H, L, Dh)     skew form (T = S = L): E_r[:, rows], else None
    cache.rows   (L,) int       skew form: the E_r row of each column of Er_L, else None
    cache.idx    (T, S) int     gather form: distance_index(...), else None
    cache.scale  float          1 / sqrt(Dh)

Return ``(dQ, dK, dE_r)`` like Q, K and E_r.""",
    imports="""\
import math

from scratchformer.engine.backend import xp
from scratchformer.engine import device  # device.segment_sum(idx, rows, K): equal indices add up
from scratchformer.engine.ops.relative_attention import (
    SkewLogitsCache,
    distance_index,
    gather_relative,
    skew_table,
)""",
    given=(rel.skew_forward,),
    solution=(rel.skew_backward, rel.scatter_relative),
    cases=dispatch.table("skew_logits").cases,
    drawn=draw.skew,
    gradients=("dQ", "dK", "dE_r"),
    hints=(
        "The content term is attention's: dK = s dZ^T Q and a part s dZ K of dQ. The "
        "relative term is rel = Skew(Q Er_L^T) (or a gather, when idx is not None).",
        "The skew only moves entries: its adjoint moves each gradient back to where the "
        "entry was read from. Undo the three steps in reverse: put the dropped row back "
        "(zeros, at the top), reshape (L+1, L) -> (L, L+1), drop the padded column.",
        "Er_L = E_r[:, rows] reads a row of E_r several times (distances beyond k are "
        "clipped to row k): dE_r[:, d] sums dEr_L over the columns that read row d.",
    ),
    mistakes=(
        mistake(
            "unskew-wrong-end",
            "the skew undone the wrong way: the zero row put back at the bottom",
            "the forward dropped the first row of the (L+1, L) view: the adjoint puts a "
            "zero row back on top "
            "(docs/derivations.md#relative-attention-with-the-skew-music-transformer)",
            lambda dZ, cache: _skew(dZ, cache, unskew=_unskew_bottom),
            rel.skew_logits_backward,
        ),
        mistake(
            "rows-overwrite",
            "dE_r's clipped rows overwritten instead of summed",
            "every distance beyond k reads row k of E_r: their gradients add up "
            "(docs/derivations.md#relative-attention-with-the-skew-music-transformer)",
            lambda dZ, cache: _skew(dZ, cache, overwrite=True),
            rel.skew_logits_backward,
        ),
        mistake(
            "no-relative-dQ",
            "dQ without the relative term's part",
            "Q appears in both terms of Z: dQ has a part from Q Er^T too "
            "(docs/derivations.md#relative-attention-with-the-skew-music-transformer)",
            lambda dZ, cache: _skew(dZ, cache, relative_dQ=False),
            rel.skew_logits_backward,
        ),
    ),
    uses=lambda model: "the decoder's self-attention" if model.attention == "relative_skew" else "",
)


__all__ = ["SHAW", "SKEW"]
