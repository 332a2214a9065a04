"""Relative position self-attention: Shaw et al. and the Music Transformer skew.

- float64 finite differences of every input and of the relative embeddings;
- the skewed relative term equals the direct O(L^2 Dh) forms (a loop, and the explicit
  (H, L, L, Dh) embedding tensor) on the causal triangle;
- zero relative embeddings reduce both forms to plain scaled dot-product attention;
- distances beyond +-k use the edge embedding (clipping), in both forms;
- the skew's backward is the exact adjoint of its forward (<skew(x), y> = <x, skew^T(y)>).

Dimension key: B batch, H heads, T queries, S keys, L length, Dh d_k, Dv d_v, k clip.
"""

import numpy as np
import pytest

from scratchformer.engine import backend as B
from scratchformer.engine.gradcheck import check_op
from scratchformer.engine.nn import RelativeMultiHeadAttention, SkewMultiHeadAttention
from scratchformer.engine.ops.attention import attention_core, attention_forward, causal_mask
from scratchformer.engine.ops.relative_attention import (
    gather_relative,
    relative_index,
    scatter_relative,
    shaw_logits_backward,
    shaw_logits_forward,
    shaw_values_backward,
    shaw_values_forward,
    skew_backward,
    skew_forward,
    skew_table,
)

pytestmark = pytest.mark.usefixtures("backend")

Bn, H, Dh, Dv = 2, 3, 4, 6


def rand(r, *shape):
    return B.asarray(r.standard_normal(shape))


def assert_passes(report):
    assert report.passed, "\n" + report.table()


def shaw_module(k, causal=False):
    """Shaw attention with H heads of Dh (values Dv); only its ``attend`` is used."""
    return RelativeMultiHeadAttention(
        H * Dh, H, d_k=Dh, d_v=Dv, causal=causal, max_relative_position=k
    )


def shaw(Q, K, V, E_k, E_v, mask=None, p_drop=0.0, rng=None, offset=0):
    """The module's per-head attention (logits, the core, the value term) as an op pair
    with its relative embeddings as inputs: ``shaw`` and ``shaw_backward``."""
    m = shaw_module((E_k.shape[0] - 1) // 2)
    m.params.update(E_k=E_k, E_v=E_v)
    m.P_drop_attn = p_drop
    O, cache = m.attend(Q, K, V, mask, rng, offset)
    return O, (m, cache)


def shaw_backward(dO, cache):
    m, c = cache
    m.zero_grad()
    dQ, dK, dV = m.attend_backward(dO, c)
    return dQ, dK, dV, m.grads["E_k"], m.grads["E_v"]


def skew(Q, K, V, E_r, mask=None, p_drop=0.0, rng=None, offset=0):
    """The Music Transformer module's per-head attention as an op pair (it is causal:
    it adds the causal mask of positions ``offset ..`` to ``mask``)."""
    m = SkewMultiHeadAttention(H * Dh, H, d_k=Dh, d_v=Dv, max_relative_position=E_r.shape[1] - 1)
    m.params.update(E_r=E_r)
    m.P_drop_attn = p_drop
    O, cache = m.attend(Q, K, V, mask, rng, offset)
    return O, (m, cache)


def skew_backward_pair(dO, cache):
    m, c = cache
    m.zero_grad()
    return (*m.attend_backward(dO, c), m.grads["E_r"])


@pytest.mark.parametrize("offset", [0, 3])
@pytest.mark.parametrize("p_drop", [0.0, 0.2])
def test_shaw_gradients_of_every_input_and_embedding(f64, offset, p_drop):
    """Q, K, V, E_k, E_v; T=5 != S=7 != Dh; a random mask; queries at positions offset..;
    dropout with a replayed mask; k=2 so that many distances are clipped."""
    r = np.random.default_rng(0)
    T, S, k = 5, 7, 2
    mask = B.asarray(r.random((Bn, 1, T, S)) > 0.3)
    rep = check_op(
        shaw,
        shaw_backward,
        rand(r, Bn, H, T, Dh),
        rand(r, Bn, H, S, Dh),
        rand(r, Bn, H, S, Dv),
        rand(r, 2 * k + 1, Dh),
        rand(r, 2 * k + 1, Dv),
        mask=mask,
        p_drop=p_drop,
        rng=3,
        offset=offset,
    )
    assert_passes(rep)
    assert [row.name for row in rep.rows] == ["Q", "K", "V", "E_k", "E_v"]


@pytest.mark.parametrize("offset", [0, 2])
def test_shaw_logits_and_value_term_each_against_finite_differences(f64, offset):
    """The two pairs a Shaw variant adds to the core, each on its own: the logits
    (dQ, dK, dE_k) and the value term (dA', dE_v), with clipped distances (k = 2)."""
    r = np.random.default_rng(1)
    T, S, k = 5, 7, 2
    Q, K, E_k = rand(r, Bn, H, T, Dh), rand(r, Bn, H, S, Dh), rand(r, 2 * k + 1, Dh)
    rep = check_op(shaw_logits_forward, shaw_logits_backward, Q, K, E_k, offset)
    assert_passes(rep)
    assert [row.name for row in rep.rows] == ["Q", "K", "E_k"]
    O, A, E_v = rand(r, Bn, H, T, Dv), rand(r, Bn, H, T, S), rand(r, 2 * k + 1, Dv)
    idx = relative_index(T, S, k, offset)

    def values(O, A_drop, E_v):
        return shaw_values_forward(O, A_drop, E_v, idx)

    def values_backward(dout, cache):
        dA, dE_v = shaw_values_backward(dout, cache)
        return dout, dA, dE_v  # O enters the sum as itself

    rep = check_op(values, values_backward, O, A, E_v)
    assert_passes(rep)
    assert [row.name for row in rep.rows] == ["O", "A_drop", "E_v"]


@pytest.mark.parametrize("L, k", [(6, 2), (5, 8), (1, 1)])
@pytest.mark.parametrize("p_drop", [0.0, 0.2])
def test_skew_gradients_of_every_input_and_embedding(f64, L, k, p_drop):
    """Q, K, V, E_r (H, k+1, Dh), causal attention with key padding; k below and above L."""
    r = np.random.default_rng(2)
    keys = np.ones((Bn, L), bool)
    keys[1, L - 1 :] = L < 2  # the second row pads its last key (unless L == 1)
    rep = check_op(
        skew,
        skew_backward_pair,
        rand(r, Bn, H, L, Dh),
        rand(r, Bn, H, L, Dh),
        rand(r, Bn, H, L, Dv),
        rand(r, H, k + 1, Dh),
        mask=B.asarray(keys[:, None, None, :]),
        p_drop=p_drop,
        rng=5,
    )
    assert_passes(rep)


@pytest.mark.parametrize("T, S, offset", [(2, 7, 5), (3, 3, 1), (1, 6, 5)])
@pytest.mark.parametrize("p_drop", [0.0, 0.2])
def test_skew_gather_form_gradients(f64, T, S, offset, p_drop):
    """The decoding form (queries at positions ``offset ..`` over keys 0 .. S-1, relative
    logits by a gather): Q, K, V and E_r against finite differences, k=2 so distances
    clip, the causal mask of those positions added by the module."""
    r = np.random.default_rng(4)
    k = 2
    rep = check_op(
        skew,
        skew_backward_pair,
        rand(r, Bn, H, T, Dh),
        rand(r, Bn, H, S, Dh),
        rand(r, Bn, H, S, Dv),
        rand(r, H, k + 1, Dh),
        p_drop=p_drop,
        rng=5,
        offset=offset,
    )
    assert_passes(rep)


def test_skew_gather_form_equals_the_skew_form(f64):
    """The last queries of a sequence, decoded at an offset (gather form), give the same
    outputs as the same rows of the whole sequence (skew form)."""
    r = np.random.default_rng(6)
    L, k, T = 7, 3, 2
    Q, K, V = rand(r, Bn, H, L, Dh), rand(r, Bn, H, L, Dh), rand(r, Bn, H, L, Dv)
    E_r = rand(r, H, k + 1, Dh)
    whole, _ = skew(Q, K, V, E_r)
    tail, _ = skew(Q[..., L - T :, :], K, V, E_r, offset=L - T)
    np.testing.assert_allclose(B.asnumpy(tail), B.asnumpy(whole[..., L - T :, :]), rtol=1e-12)


def direct_relative_loop(Q, E_r):
    """The O(L^2 Dh) definition, one (i, j) at a time on the causal triangle:
    out[b, h, i, j] = Q[b, h, i] . E_r[h, min(i - j, k)] for j <= i, else 0."""
    Q, E_r = B.asnumpy(Q), B.asnumpy(E_r)
    Bn, H, L, _ = Q.shape
    k = E_r.shape[1] - 1
    out = np.zeros((Bn, H, L, L))
    for b in range(Bn):
        for h in range(H):
            for i in range(L):
                for j in range(i + 1):
                    out[b, h, i, j] = Q[b, h, i] @ E_r[h, min(i - j, k)]
    return out


def skew_relative_direct(Q, E_r):
    """The O(L^2 Dh) definition with the relative embeddings laid out explicitly: the
    (H, L, L, Dh) tensor Rm[h, i, j] = E_r[h, min(i - j, k)] (the memory the skew avoids),
    then out[b, h, i, j] = Q[b, h, i] . Rm[h, i, j] for j <= i, else 0."""
    Q, E_r = B.asnumpy(Q), B.asnumpy(E_r)
    L, k = Q.shape[-2], E_r.shape[-2] - 1
    i, j = np.indices((L, L))
    Rm = E_r[:, np.clip(i - j, 0, k), :]  # (H, L, L, Dh)
    out = (Q[..., :, None, :] * Rm).sum(-1)  # (B, H, L, L)
    return out * np.tril(np.ones((L, L), dtype=bool))


@pytest.mark.parametrize("reference", [direct_relative_loop, skew_relative_direct])
@pytest.mark.parametrize("L, k", [(7, 3), (5, 10), (9, 1)])
def test_skew_equals_the_direct_reference_on_the_causal_triangle(f64, L, k, reference):
    """Skew(Q Er_L^T) == the direct O(L^2 Dh) forms for every j <= i (above it: garbage,
    masked); L > k+1 in two cases, so distances beyond k (clipped to row k) are covered."""
    r = np.random.default_rng(3)
    Q, E_r = rand(r, Bn, H, L, Dh), rand(r, H, k + 1, Dh)
    Er_L, _ = skew_table(E_r, L)
    skewed = B.asnumpy(skew_forward(Q @ Er_L.swapaxes(-1, -2)))
    tri = np.tril(np.ones((L, L), bool))
    np.testing.assert_allclose(skewed[..., tri], reference(Q, E_r)[..., tri], atol=1e-12)


def test_the_two_direct_references_agree(f64):
    """The explicit (H, L, L, Dh) tensor and the (i, j) loop: equal everywhere, zeros
    above the diagonal included (L = 8 > k + 1 = 3)."""
    r = np.random.default_rng(10)
    Q, E_r = rand(r, Bn, H, 8, Dh), rand(r, H, 3, Dh)
    np.testing.assert_allclose(
        skew_relative_direct(Q, E_r), direct_relative_loop(Q, E_r), atol=1e-12
    )


def test_skew_is_the_documented_reindexing(f64):
    """out[i, j] = rel[i, L-1-(i-j)] for j <= i, checked entry by entry."""
    L = 6
    rel = B.asarray(np.arange(L * L, dtype=float).reshape(L, L))
    out = B.asnumpy(skew_forward(rel))
    rel = B.asnumpy(rel)
    for i in range(L):
        for j in range(i + 1):
            assert out[i, j] == rel[i, L - 1 - (i - j)]


def test_skew_backward_is_the_adjoint_of_the_forward(f64):
    """<Skew(x), y> = <x, SkewBackward(y)> for random x, y, including the garbage half:
    the backward is the exact transpose of the re-indexing, not an approximation."""
    r = np.random.default_rng(4)
    L = 7
    x, y = rand(r, Bn, H, L, L), rand(r, Bn, H, L, L)
    lhs = float((skew_forward(x) * y).sum())
    rhs = float((x * skew_backward(y)).sum())
    assert abs(lhs - rhs) < 1e-10 * max(1.0, abs(lhs))


def test_gather_and_scatter_are_adjoint(f64):
    """scatter_relative is the transpose of gather_relative (repeated edge buckets add)."""
    r = np.random.default_rng(5)
    T, S, k = 5, 9, 2
    idx = relative_index(T, S, k, offset=2)
    X, Y = rand(r, Bn, H, T, 2 * k + 1), rand(r, Bn, H, T, S)
    lhs = float((gather_relative(X, idx) * Y).sum())
    rhs = float((X * scatter_relative(Y, idx, 2 * k + 1)).sum())
    assert abs(lhs - rhs) < 1e-10 * max(1.0, abs(lhs))


def test_zero_relative_embeddings_give_plain_attention(f64):
    """E_k = E_v = 0 (Shaw) and E_r = 0 (skew) reproduce scaled dot-product attention."""
    r = np.random.default_rng(6)
    L, k = 6, 2
    Q, K, V = rand(r, Bn, H, L, Dh), rand(r, Bn, H, L, Dh), rand(r, Bn, H, L, Dv)
    mask = causal_mask(L)
    plain, _ = attention_forward(Q, K, V, mask)
    zeros = B.asarray(np.zeros((2 * k + 1, Dh))), B.asarray(np.zeros((2 * k + 1, Dv)))
    out_shaw, _ = shaw(Q, K, V, *zeros, mask)
    out_skew, _ = skew(Q, K, V, B.asarray(np.zeros((H, k + 1, Dh))))
    np.testing.assert_allclose(B.asnumpy(out_shaw), B.asnumpy(plain), atol=1e-12)
    np.testing.assert_allclose(B.asnumpy(out_skew), B.asnumpy(plain), atol=1e-12)


def test_shaw_distances_beyond_k_use_the_edge_embeddings(f64):
    """idx = clip(j - i, -k, k) + k: every key k or more to the right shares bucket 2k,
    every key k or more to the left bucket 0; so the relative logit of such keys is
    Q_i . E_k[2k] (or E_k[0]), and changing an interior embedding leaves them alone."""
    T, S, k = 6, 10, 2
    idx = B.asnumpy(relative_index(T, S, k))
    for i in range(T):
        for j in range(S):
            d = j - i
            assert idx[i, j] == (2 * k if d >= k else 0 if d <= -k else d + k)
    r = np.random.default_rng(7)
    # K = 0: the logits are the relative term alone, so keys in one edge bucket tie
    Q, K, V = rand(r, 1, 1, T, Dh), B.asarray(np.zeros((1, 1, S, Dh))), rand(r, 1, 1, S, Dv)
    E_k, E_v = rand(r, 2 * k + 1, Dh), rand(r, 2 * k + 1, Dv)
    _, (_, cache) = shaw(Q, K, V, E_k, E_v)
    A = B.asnumpy(attention_core.read(cache.core, "weights"))[0, 0]
    for i in range(T):
        right = [j for j in range(S) if j - i >= k]
        left = [j for j in range(S) if i - j >= k]
        for side in (right, left):
            if len(side) > 1:
                np.testing.assert_allclose(A[i, side], A[i, side[0]], rtol=1e-12)
    # the value term: every far key adds the same edge embedding E_v[2k] / E_v[0]
    A_rel = B.asnumpy(cache.values.value.A_rel)[0, 0]  # (T, 2k+1)
    for i in range(T):
        right = [j for j in range(S) if j - i >= k]
        np.testing.assert_allclose(A_rel[i, 2 * k], A[i, right].sum(), rtol=1e-12)


def test_skew_distances_beyond_k_use_row_k(f64):
    """Music form: every distance i - j >= k reads E_r[:, k]; rows below k unaffected by
    changing E_r[:, k], and the direct loop agrees for L much longer than k."""
    r = np.random.default_rng(8)
    L, k = 9, 2
    Q, E_r = rand(r, 1, H, L, Dh), rand(r, H, k + 1, Dh)
    Er_L, rows = skew_table(E_r, L)
    assert B.asnumpy(rows).tolist() == [min(L - 1 - c, k) for c in range(L)]
    out1 = B.asnumpy(skew_forward(Q @ Er_L.swapaxes(-1, -2)))
    E2 = E_r.copy()
    E2[:, k] += 1.0
    out2 = B.asnumpy(skew_forward(Q @ skew_table(E2, L)[0].swapaxes(-1, -2)))
    i, j = np.tril_indices(L)
    near = (i - j) < k
    np.testing.assert_allclose(out1[..., i[near], j[near]], out2[..., i[near], j[near]])
    assert (np.abs(out1[..., i[~near], j[~near]] - out2[..., i[~near], j[~near]]) > 0).all()


def test_skew_attention_refuses_to_be_non_causal(f64):
    """Above the diagonal the skew leaves other rows' entries: only the causal mask makes
    it right, so a non-causal (encoder) module is refused when it is made."""
    with pytest.raises(ValueError, match="causal only"):
        SkewMultiHeadAttention(H * Dh, H, d_k=Dh, causal=False)
