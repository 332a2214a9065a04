"""Masked local block self-attention (Image Transformer 1-D).

- float64 finite differences of Q, K, V (with padding, dropout, ragged last block);
- equals dense attention with the equivalent band mask, for lengths that are not a
  multiple of the block size, with key padding;
- a block at least as long as the sequence is plain causal attention;
- the blocked scores hold O(L * M) entries, not O(L^2).

Dimension key: B batch, H heads, L length, M block, Dh d_k, Dv d_v.
"""

import numpy as np
import pytest

from scratchformer.engine import backend as B
from scratchformer.engine.gradcheck import check_op
from scratchformer.engine.nn.attention import MultiHeadAttention
from scratchformer.engine.nn.local_attention import LocalMultiHeadAttention
from scratchformer.engine.ops.attention import attention_core, causal_mask
from scratchformer.engine.ops.local_attention import band_mask

pytestmark = pytest.mark.usefixtures("backend")

Bn, H, Dh, Dv = 2, 3, 4, 6


def local(M, p_drop=0.0):
    """Local attention's per-head attention (``LocalMultiHeadAttention.attend``) as a
    forward/backward pair of (Q, K, V): blocks of M, key padding ``mask``."""
    m = LocalMultiHeadAttention(H * Dh, H, d_k=Dh, d_v=Dv, P_drop_attn=p_drop, local_block=M)

    def forward(Q, K, V, mask=None, p_drop=0.0, rng=None, offset=0):
        return m.attend(Q, K, V, mask, rng, offset)

    return forward, m.attend_backward


def dense(p_drop=0.0):
    """Dense attention with the mask as given: the same logits and core, unblocked."""
    m = MultiHeadAttention(H * Dh, H, d_k=Dh, d_v=Dv, P_drop_attn=p_drop)
    return (lambda Q, K, V, mask=None: m.attend_masked(Q, K, V, mask)), m.attend_backward


def rand(r, *shape):
    return B.asarray(r.standard_normal(shape))


def padded_keys(L, pad_from):
    """(B, 1, 1, L): row 0 all real, row 1 padded from ``pad_from``."""
    keys = np.ones((Bn, L), bool)
    keys[1, pad_from:] = False
    return B.asarray(keys[:, None, None, :])


@pytest.mark.parametrize("L, M", [(7, 3), (8, 3), (5, 2), (4, 6)])
@pytest.mark.parametrize("p_drop", [0.0, 0.2])
def test_local_gradients(f64, L, M, p_drop):
    """Q, K, V with the last block ragged (L % M != 0) and a padded row."""
    r = np.random.default_rng(0)
    rep = check_op(
        *local(M, p_drop),
        rand(r, Bn, H, L, Dh),
        rand(r, Bn, H, L, Dh),
        rand(r, Bn, H, L, Dv),
        mask=padded_keys(L, max(1, L - 2)),
        p_drop=p_drop,
        rng=4,
    )
    assert rep.passed, "\n" + rep.table()


@pytest.mark.parametrize("L, M", [(7, 3), (10, 4), (13, 5), (9, 3), (11, 1)])
def test_local_equals_dense_with_the_band_mask(f64, L, M):
    """Blocked local attention == dense attention masked by ``(j <= i) & (j // M >=
    i // M - 1)`` and key padding; lengths not a multiple of M (and one that is)."""
    r = np.random.default_rng(1)
    Q, K, V = rand(r, Bn, H, L, Dh), rand(r, Bn, H, L, Dh), rand(r, Bn, H, L, Dv)
    pad = padded_keys(L, L - 3)
    (local_f, local_b), (dense_f, dense_b) = local(M), dense()
    out_local, c_local = local_f(Q, K, V, pad)
    out_dense, c_dense = dense_f(Q, K, V, band_mask(L, M)[None, None] & pad)
    np.testing.assert_allclose(B.asnumpy(out_local), B.asnumpy(out_dense), atol=1e-12)
    dO = rand(r, *out_local.shape)  # the gradients agree too
    for a, b in zip(local_b(dO, c_local), dense_b(dO, c_dense)):
        np.testing.assert_allclose(B.asnumpy(a), B.asnumpy(b), atol=1e-12)


def test_the_band_mask_is_what_t2t_describes(f64):
    """Query i sees key j iff j <= i and j is in i's block or the block before."""
    L, M = 10, 3
    m = B.asnumpy(band_mask(L, M))
    for i in range(L):
        for j in range(L):
            assert m[i, j] == (j <= i and i // M - 1 <= j // M)


def test_a_block_as_long_as_the_sequence_is_causal_attention(f64):
    r = np.random.default_rng(2)
    L = 6
    Q, K, V = rand(r, Bn, H, L, Dh), rand(r, Bn, H, L, Dh), rand(r, Bn, H, L, Dv)
    out_local, _ = local(L)[0](Q, K, V, None)
    out_dense, _ = dense()[0](Q, K, V, causal_mask(L))
    np.testing.assert_allclose(B.asnumpy(out_local), B.asnumpy(out_dense), atol=1e-12)


def test_a_mask_with_a_query_axis_is_refused_in_one_line(f64):
    """Local attention reads key padding (B, 1, 1, L) only: it builds the causal band
    itself, so a (B, 1, T, T) mask is an error that says so, not a silent misreading."""
    r = np.random.default_rng(3)
    L, M = 7, 3
    Q = rand(r, Bn, H, L, Dh)
    with pytest.raises(ValueError, match="key-padding mask .* builds its causal band itself"):
        local(M)[0](Q, Q, Q, causal_mask(L)[None, None] & padded_keys(L, 5))


@pytest.mark.parametrize("T, offset", [(1, 6), (2, 5), (4, 3), (3, 0)])
def test_the_band_form_at_an_offset_equals_the_rows_of_the_whole(f64, T, offset):
    """Queries at positions offset .. offset+T-1 over the keys 0 .. offset+T-1 (decoding)
    give the same outputs and gradients as those rows of the blocked whole sequence."""
    r = np.random.default_rng(5)
    S, M = offset + T, 3
    Q, K, V = rand(r, Bn, H, S, Dh), rand(r, Bn, H, S, Dh), rand(r, Bn, H, S, Dv)
    pad = padded_keys(S, max(1, S - 1))
    forward, backward = local(M, p_drop=0.2)
    whole, _ = forward(Q, K, V, pad)
    tail, _ = forward(Q[..., offset:, :], K, V, pad, offset=offset)
    np.testing.assert_allclose(B.asnumpy(tail), B.asnumpy(whole[..., offset:, :]), atol=1e-12)
    rep = check_op(
        forward, backward, Q[..., offset:, :], K, V, mask=pad, p_drop=0.2, rng=4, offset=offset,
    )
    assert rep.passed, "\n" + rep.table()


def test_scores_hold_L_times_2M_entries_not_L_squared(f64):
    """The only per-pair arrays are (B, H, nb, M, 2M): L * 2M per head, against L^2."""
    r = np.random.default_rng(4)
    L, M = 64, 8
    Q = rand(r, 1, 1, L, Dh)
    _, cache = local(M)[0](Q, Q, Q, None)
    assert attention_core.read(cache.attend.core, "weights").size == L * 2 * M
    assert attention_core.read(cache.attend.core, "dropped_weights").size == L * 2 * M
