"""The attention exercises' backward passes as the derivation's named terms (terms.py):
scaled dot-product attention (its core and its logits), Shaw's and the skew's relative
logits. With no knob each equals the engine's to rounding (tests/exercises/test_terms.py).
"""

from __future__ import annotations

from scratchformer.engine.backend import xp
from scratchformer.exercises.terms import Swap, Term, TermSet


# -- scaled dot-product attention --------------------------------------------------------
def _attention(k):
    def attention_core_backward(dO, cache, dA_drop=None):
        A = cache.softmax.P  # (B, H, T, S), the softmax's own output
        dA = k("dOV") * (dO @ cache.V.swapaxes(-1, -2))  # dA' from O = A' V
        mask, scale = cache.dropout.mask, cache.dropout.scale
        late = dA_drop is not None and k.swap("dA_drop-late")
        if dA_drop is not None and not late:
            dA = dA + k("dA_drop") * dA_drop
        weights = A if k.swap("dV-A") else cache.A_drop
        dV = k("dV") * (weights.swapaxes(-1, -2) @ dO)  # (B, H, S, Dv)
        if mask is not None and not k.swap("no-dropout"):
            dA = dA * mask * (1.0 if k.swap("no-scale") else scale)
        if late:
            dA = dA + dA_drop
        P = cache.A_drop if k.swap("P-A'") else A
        row = (dA * P).sum(axis=-1, keepdims=True)  # (B, H, T, 1)
        dZ = k("direct") * (P * dA) - k("row-sum") * (P * row)
        return dZ, dV

    def dot_product_logits_backward(dZ, cache):
        dZs = dZ * cache.scale
        dQ = k("dQ") * (dZs @ cache.K)
        dK = k("dK") * (dZs.swapaxes(-1, -2) @ (cache.K if k.swap("dK-K") else cache.Q))
        return dQ, dK

    return {"attention_core_backward": attention_core_backward,
            "dot_product_logits_backward": dot_product_logits_backward}


ATTENTION = TermSet(
    _attention,
    terms=(Term("row-sum", "the softmax's row-sum term A * sum(dA * A)", "the core, step 1"),
           Term("direct", "the softmax's direct term A * dA", "the core, step 1"),
           Term("dA_drop", "dA_drop (the value term's gradient of A'), added to dO V^T",
                "the core, step 3"),
           Term("dOV", "dA' = dO V^T", "the core, step 3"),
           Term("dV", "dV = A'^T dO", "the core, step 3"),
           Term("dQ", "dQ = s dZ K", "step 0"),
           Term("dK", "dK = s dZ^T Q", "step 0")),
    swaps=(Swap("dV-A", "dV taken with A, the weights before dropout, where it is A'^T dO "
                "with A' = A * mask / (1-p), the weights that multiplied V", "the core, step 3"),
           Swap("P-A'", "the softmax's backward with A' (after dropout) for P, where the "
                "softmax's own output A is its P", "the core, step 1"),
           Swap("no-dropout", "dropout's backward left out of the core: dA' used as dA, where "
                "dA = dA' * mask / (1-p)", "the core, step 2"),
           Swap("no-scale", "dropout's backward without its 1/(1-p): dA = dA' * mask",
                "the core, step 2"),
           Swap("dA_drop-late", "dA_drop added after dropout's backward: it is a gradient of "
                "A', to add to dO V^T before it", "the core, step 3"),
           Swap("dK-K", "dK computed from K where it has Q: dK = s dZ^T Q", "step 0")),
    sums={"dQ": ("row-sum", "direct"), "dK": ("row-sum", "direct"), "dV": ("dV",)},
)


# -- Shaw's relative logits --------------------------------------------------------------
def _scatter(dZs, idx, R: int):
    """scatter(dZs)[..., i, r] = sum over j with idx[i, j] = r of dZs[..., i, j]."""
    onehot = (idx[..., None] == xp.arange(R)).astype(dZs.dtype)  # (T, S, R)
    return xp.einsum("...ts,tsr->...tr", dZs, onehot)


def _scatter_overwrite(dZs, idx, R: int):
    """A fancy-indexed ``+=``: a bucket repeated along a row keeps one of its keys."""
    dR = xp.zeros((*dZs.shape[:-1], R), dtype=dZs.dtype)
    rows = xp.arange(idx.shape[0])[:, None]
    dR[..., rows, idx] += dZs
    return dR


def _shaw(k):
    def shaw_logits_backward(dZ, cache):
        Q, K, E_k, idx = cache.Q, cache.K, cache.E_k, cache.idx
        R = E_k.shape[0]
        dZs = dZ * cache.scale
        scatter = _scatter_overwrite if k.swap("fancy") else _scatter
        dR = k("dR") * scatter(dZs, idx, R)  # (B, H, T, R)
        dQ = k("content") * (dZs @ K) + k("relative") * (dR @ E_k)
        dK = k("dK") * (dZs.swapaxes(-1, -2) @ Q)
        dE_k = k("dE_k") * (dR.reshape(-1, R).T @ Q.reshape(-1, Q.shape[-1]))
        return dQ, dK, dE_k

    return {"shaw_logits_backward": shaw_logits_backward}


SHAW = TermSet(
    _shaw,
    terms=(Term("relative", "dQ's relative term dR E_k (dR = scatter(s dZ))", "step 1"),
           Term("dR", "dR = scatter(s dZ), the gradient of the relative logits Q E_k^T (in "
                "dQ's relative term and in dE_k)", "step 1"),
           Term("content", "dQ's content term s dZ K", "step 1"),
           Term("dK", "dK = s dZ^T Q", "step 1"),
           Term("dE_k", "dE_k = dR^T Q, summed over the batch and the heads", "step 1")),
    swaps=(Swap("fancy", "dR scattered with a fancy-indexed +=: a bucket repeated along a row "
                "(the edge buckets collect every clipped key) keeps one key's gradient, where "
                "a scatter-add sums them", "step 1"),),
    sums={"dQ": ("content", "relative"), "dK": ("dK",), "dE_k": ("dE_k",)},
)


# -- the skew's relative logits ----------------------------------------------------------
def _skew(k):
    def skew_logits_backward(dZ, cache):
        Q, K, E_r = cache.Q, cache.K, cache.E_r
        n_rows = E_r.shape[-2]
        dZs = dZ * cache.scale
        Q4 = Q.reshape(-1, *Q.shape[-3:])  # (B, H, T, Dh)
        if cache.Er_L is not None:  # the skew form: Skew^T, then the table's scatter
            *lead, L, _ = dZs.shape
            d_padded = xp.zeros((*lead, L + 1, L), dtype=dZs.dtype)
            d_padded[..., 1:, :] = dZs
            drel = k("drel") * d_padded.reshape(*lead, L, L + 1)[..., 1:]  # (B, H, L, L)
            rel_term = drel @ cache.Er_L
            dEr_L = xp.einsum("bhtc,bhtd->hcd", drel.reshape(-1, *drel.shape[-3:]), Q4)
            if k.swap("fancy"):
                dE_r = xp.zeros_like(E_r)
                dE_r[:, cache.rows] += dEr_L
            else:
                onehot = (cache.rows[:, None] == xp.arange(n_rows)).astype(dZ.dtype)
                dE_r = xp.einsum("hcd,cr->hrd", dEr_L, onehot)
        else:  # the gather form: the gather's adjoint, a scatter-add
            dR = k("drel") * _scatter(dZs, cache.idx, n_rows)  # (B, H, T, k+1)
            rel_term = dR @ E_r
            dE_r = xp.einsum("bhtr,bhtd->hrd", dR.reshape(-1, *dR.shape[-3:]), Q4)
        dQ = k("content") * (dZs @ K) + k("relative") * rel_term
        dK = k("dK") * (dZs.swapaxes(-1, -2) @ Q)
        return dQ, dK, k("dE_r") * dE_r

    return {"skew_logits_backward": skew_logits_backward}


SKEW = TermSet(
    _skew,
    terms=(Term("relative", "dQ's relative term (d rel Er_L through the skew; dR E_r in the "
                "gather form)"),
           Term("drel", "d rel = Skew^T(s dZ) (the gather form: scatter(s dZ)), the gradient "
                "of the relative logits (in dQ's relative term and in dE_r)"),
           Term("content", "dQ's content term s dZ K"),
           Term("dK", "dK = s dZ^T Q"),
           Term("dE_r", "dE_r = the scatter-add of d Er_L = sum over the batch of d rel^T Q")),
    swaps=(Swap("fancy", "dE_r[:, rows] += dEr_L: the clipped distances' repeated row k keeps "
                "one column's gradient, where a scatter-add sums them"),),
    sums={"dQ": ("content", "relative"), "dK": ("dK",), "dE_r": ("dE_r",)},
)

__all__ = ["ATTENTION", "SHAW", "SKEW"]
