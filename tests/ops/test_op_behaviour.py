"""Behaviour of the ops beside their gradients: values, masking, accumulation, dtypes.

Dimension key: B batch, H heads, T length, S keys, D features, V vocabulary, L max_len.
"""

import math

import numpy as np
import pytest
from arrays import randn

from scratchformer.engine import backend as B
from scratchformer.engine import device
from scratchformer.engine.ops import (
    attention_backward,
    attention_forward,
    causal_mask,
    cross_entropy_backward,
    cross_entropy_forward,
    dropout_backward,
    dropout_forward,
    embedding_backward,
    embedding_forward,
    gelu_backward,
    gelu_forward,
    label_smoothed_nll_backward,
    label_smoothed_nll_forward,
    layernorm_backward,
    layernorm_forward,
    linear_backward,
    linear_forward,
    log_softmax_backward,
    log_softmax_forward,
    positional_backward,
    positional_forward,
    relu_backward,
    relu_forward,
    silu_backward,
    silu_forward,
    sinusoidal_table,
    softmax_backward,
    softmax_forward,
)

pytestmark = pytest.mark.usefixtures("backend")


def host(x):
    return B.asnumpy(x)


# -- label smoothing: the worked example of docs/reference.md ("Label smoothing") ---------
# V = 5, eps = 0.1, pad id 0: two real tokens and one pad target.
_LOGITS = np.array(
    [[1.0, 2.0, 0.5, -1.0, 0.0], [0.3, 0.2, 0.1, 0.0, -0.1], [0.0, 1.0, 2.0, 3.0, 4.0]]
)
_TARGET = np.array([1, 3, 0])


def test_label_smoothing_worked_example_fused():
    """fairseq's formula eps/(V-1): sum 2.468854271, 1.234427136 per token (not eps/V)."""
    loss, cache = cross_entropy_forward(B.asarray(_LOGITS), B.asarray(_TARGET), 0.1, 0)
    assert cache.n_tokens == 2
    assert float(loss) == pytest.approx(1.234427136, abs=1e-9)
    assert float(loss) * cache.n_tokens == pytest.approx(2.468854271, abs=1e-9)


def test_label_smoothing_worked_example_on_log_probs():
    """The log-prob form gives the same value as the fused form."""
    lprobs, _ = log_softmax_forward(B.asarray(_LOGITS))
    loss, cache = label_smoothed_nll_forward(lprobs, B.asarray(_TARGET), 0.1, 0)
    assert float(loss) == pytest.approx(1.234427136, abs=1e-9)
    assert float(loss) * cache.n_tokens == pytest.approx(2.468854271, abs=1e-9)


def test_label_smoothing_eps_zero_is_plain_nll():
    """eps = 0 is the mean negative log-likelihood of the non-pad targets."""
    loss, cache = cross_entropy_forward(B.asarray(_LOGITS), B.asarray(_TARGET), 0.0, 0)
    lp = _LOGITS - np.log(np.exp(_LOGITS).sum(-1, keepdims=True))
    expected = -(lp[0, 1] + lp[1, 3]) / 2
    assert float(loss) == pytest.approx(expected, abs=1e-12)
    assert cache.nll_sum == pytest.approx(-(lp[0, 1] + lp[1, 3]), abs=1e-12)


def test_label_smoothing_gradient_is_softmax_minus_q():
    """dlogits = (softmax - q) / n_tokens, with q = 1 - eps on y and eps/(V-1) elsewhere."""
    eps, V = 0.1, 5
    _, cache = cross_entropy_forward(B.asarray(_LOGITS), B.asarray(_TARGET), eps, 0)
    d = host(cross_entropy_backward(1.0, cache))
    P = np.exp(_LOGITS) / np.exp(_LOGITS).sum(-1, keepdims=True)
    q = np.full((3, V), eps / (V - 1))
    q[np.arange(3), _TARGET] = 1 - eps
    expected = (P - q) / 2
    expected[2] = 0.0  # the pad target row
    np.testing.assert_allclose(d, expected, atol=1e-14)


def test_log_prob_loss_gradient_is_minus_q():
    """d(loss)/d(lprobs) = -q / n_tokens on real rows, 0 on pad rows."""
    lprobs, _ = log_softmax_forward(B.asarray(_LOGITS))
    _, cache = label_smoothed_nll_forward(lprobs, B.asarray(_TARGET), 0.1, 0)
    d = host(label_smoothed_nll_backward(1.0, cache))
    q = np.full((3, 5), 0.1 / 4)
    q[np.arange(3), _TARGET] = 0.9
    expected = -q / 2
    expected[2] = 0.0
    np.testing.assert_allclose(d, expected, atol=1e-15)


def test_loss_all_pad_is_zero_not_nan():
    """A batch whose targets are all padding gives loss 0 and zero gradient (no 0/0)."""
    target = B.asarray(np.zeros(3, dtype=np.int64))
    loss, cache = cross_entropy_forward(B.asarray(_LOGITS), target, 0.1, 0)
    assert float(loss) == 0.0
    assert np.all(host(cross_entropy_backward(1.0, cache)) == 0.0)


def test_loss_rejects_mismatched_shapes():
    """Scores must be target.shape + (V,): a clear error, not a broadcasting one."""
    with pytest.raises(ValueError, match="disagree"):
        cross_entropy_forward(B.asarray(_LOGITS), B.asarray(np.array([1, 2])), 0.1, 0)


# -- softmax --------------------------------------------------------------------------------
def test_softmax_fully_masked_row_is_zero_forward_and_backward():
    """A row with no unmasked entry outputs zeros and back-propagates zeros, never NaN."""
    x = randn(0, 2, 3, 5)
    mask = np.ones((2, 3, 5), dtype=bool)
    mask[1, 2] = False
    P, cache = softmax_forward(x, B.asarray(mask))
    dx = softmax_backward(randn(1, 2, 3, 5), cache)
    P, dx = host(P), host(dx)
    assert np.all(np.isfinite(P)) and np.all(np.isfinite(dx))
    assert np.all(P[1, 2] == 0.0) and np.all(dx[1, 2] == 0.0)
    np.testing.assert_allclose(P[0].sum(-1), 1.0, atol=1e-12)


def test_softmax_masked_entries_are_exactly_zero():
    """Masked entries get probability exactly 0, so padding cannot leak any weight."""
    mask = np.array([True, True, False, True, False])
    P, _ = softmax_forward(randn(0, 4, 5) * 30.0, B.asarray(mask))
    P = host(P)
    assert np.all(P[:, ~mask] == 0.0)
    np.testing.assert_allclose(P.sum(-1), 1.0, atol=1e-12)


def test_softmax_is_stable_for_large_scores():
    """exp never overflows: scores of 1e4 give a finite, normalised distribution."""
    P, _ = softmax_forward(B.asarray(np.array([[1e4, 1e4 - 1.0, -1e4]])))
    np.testing.assert_allclose(host(P), [[1 / (1 + np.exp(-1)), 1 / (1 + np.e), 0.0]], atol=1e-12)


def test_log_softmax_matches_log_of_softmax():
    """log_softmax(x) = log(softmax(x)), computed stably."""
    x = randn(0, 3, 6) * 5
    ls, _ = log_softmax_forward(x)
    P, _ = softmax_forward(x)
    np.testing.assert_allclose(host(ls), np.log(host(P)), atol=1e-12)


def test_attention_fully_masked_query_outputs_zero_without_nan():
    """A query that may see no key (an all-pad source) gets a zero output and zero grads."""
    Q, K, V = randn(0, 2, 2, 3, 4), randn(1, 2, 2, 5, 4), randn(2, 2, 2, 5, 3)
    mask = np.ones((2, 1, 1, 5), dtype=bool)
    mask[1] = False  # the whole second source is padding
    O, cache = attention_forward(Q, K, V, B.asarray(mask))
    dQ, dK, dV = (host(g) for g in attention_backward(randn(3, 2, 2, 3, 3), cache))
    O = host(O)
    for a in (O, dQ, dK, dV):
        assert np.all(np.isfinite(a))
    assert np.all(O[1] == 0.0) and np.all(dQ[1] == 0.0)
    assert np.all(dK[1] == 0.0) and np.all(dV[1] == 0.0)


def test_causal_mask_shape_and_offset():
    """Query t (at absolute position offset + t) sees keys 0 .. offset + t."""
    m = host(causal_mask(3, 5, offset=2))
    expected = np.array(
        [[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]],
        dtype=bool,
    )
    np.testing.assert_array_equal(m, expected)
    np.testing.assert_array_equal(host(causal_mask(3)), np.tril(np.ones((3, 3), dtype=bool)))


# -- embedding ------------------------------------------------------------------------------
def test_embedding_repeated_ids_accumulate():
    """ids [3, 3, 3] with dout of ones give dE[3] = 3 (a plain dE[ids] += dout gives 1)."""
    ids = B.asarray(np.array([[3, 3, 3]]))
    _, cache = embedding_forward(ids, randn(0, 5, 4), None)
    dE = host(embedding_backward(B.asarray(np.ones((1, 3, 4))), cache))
    np.testing.assert_array_equal(dE[3], np.full(4, 3.0))
    assert np.all(dE[[0, 1, 2, 4]] == 0.0)


def test_embedding_backward_equals_dense_one_hot_product():
    """dE = onehot(ids)^T dout, for ids repeated across batch rows and positions."""
    ids_h = np.array([[1, 4, 1, 2], [4, 4, 0, 1]])
    ids = B.asarray(ids_h)
    dout = randn(1, 2, 4, 3)
    _, cache = embedding_forward(ids, randn(0, 6, 3), None)
    onehot = np.eye(6)[ids_h.reshape(-1)]  # (B*T, V)
    expected = onehot.T @ host(dout).reshape(-1, 3)
    np.testing.assert_allclose(host(embedding_backward(dout, cache)), expected, atol=1e-12)


def test_embedding_pad_row_gets_zero_gradient():
    """The pad row is frozen: dE[pad] = 0 even where pad positions receive gradient."""
    ids = B.asarray(np.array([[0, 2, 0], [1, 0, 2]]))
    _, cache = embedding_forward(ids, randn(0, 4, 3), 0)
    dE = host(embedding_backward(randn(1, 2, 3, 3), cache))
    assert np.all(dE[0] == 0.0)
    assert np.all(dE[1] != 0.0) and np.all(dE[2] != 0.0)


# -- positions ------------------------------------------------------------------------------
def test_sinusoid_table_matches_the_paper_formula():
    """PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(same): interleaved."""
    d = 8
    pe = host(sinusoidal_table(50, d, dtype=np.float64))
    assert pe.shape == (50, d)
    for pos, i in [(0, 0), (1, 0), (3, 1), (17, 2), (49, 3)]:
        angle = pos / 10000 ** (2 * i / d)
        assert pe[pos, 2 * i] == pytest.approx(math.sin(angle), abs=1e-12)
        assert pe[pos, 2 * i + 1] == pytest.approx(math.cos(angle), abs=1e-12)
    # interleaved, not concatenated halves: column 1 is cos(pos), column d/2 is not
    assert pe[5, 1] == pytest.approx(math.cos(5.0), abs=1e-12)


def test_sinusoid_table_odd_width_and_default_dtype():
    """An odd d_model keeps the sines and drops the last cosine; default dtype float32."""
    pe = sinusoidal_table(6, 5)
    assert pe.dtype == np.float32
    pe = host(sinusoidal_table(6, 5, dtype=np.float64))
    assert pe[4, 4] == pytest.approx(math.sin(4 / 10000 ** (4 / 5)), abs=1e-12)
    assert pe[4, 3] == pytest.approx(math.cos(4 / 10000 ** (2 / 5)), abs=1e-12)


@pytest.mark.parametrize("offset", [0, 4])
def test_positions_with_offset_forward_and_backward(offset):
    """out = x + P[offset : offset + T]; dP is dout summed over the batch at those rows only."""
    x, P = randn(0, 2, 3, 4), randn(1, 10, 4)
    out, cache = positional_forward(x, P, offset)
    np.testing.assert_allclose(host(out), host(x) + host(P)[offset : offset + 3], atol=0)
    dout = randn(2, 2, 3, 4)
    dx, dP = (host(g) for g in positional_backward(dout, cache))
    np.testing.assert_array_equal(dx, host(dout))
    expected = np.zeros((10, 4))
    expected[offset : offset + 3] = host(dout).sum(0)
    np.testing.assert_allclose(dP, expected, atol=1e-15)


# -- dropout --------------------------------------------------------------------------------
def test_dropout_is_inverted_and_seeded():
    """Survivors are scaled by 1/(1-p), the rest are 0; the same seed gives the same mask."""
    x = B.asarray(np.ones((50, 40)))
    out1, c1 = dropout_forward(x, 0.25, device.generator(3))
    out2, _ = dropout_forward(x, 0.25, device.generator(3))
    out1 = host(out1)
    np.testing.assert_array_equal(out1, host(out2))
    assert set(np.unique(out1)) <= {0.0, 1 / 0.75}
    assert abs((out1 == 0).mean() - 0.25) < 0.03
    np.testing.assert_array_equal(host(dropout_backward(x, c1)), out1)


def test_dropout_off_without_generator_or_at_zero():
    """No generator (evaluation) or p = 0 is the identity. (The probability is checked
    where it enters, by the config and the Dropout module, not on every call.)"""
    x = randn(0, 3, 4)
    assert dropout_forward(x, 0.5)[0] is x
    assert dropout_forward(x, 0.0, device.generator(0))[0] is x


# -- layer norm -----------------------------------------------------------------------------
def test_layernorm_normalises_the_last_axis():
    """With gamma = 1, beta = 0 every row has mean 0 and (biased) variance 1."""
    x = randn(0, 3, 4, 16) * 3 + 2
    out, _ = layernorm_forward(x, B.asarray(np.ones(16)), B.asarray(np.zeros(16)), 1e-12)
    out = host(out)
    np.testing.assert_allclose(out.mean(-1), 0.0, atol=1e-12)
    np.testing.assert_allclose(out.var(-1), 1.0, atol=1e-9)


# -- float32 stays float32 ------------------------------------------------------------------
def _f32_cases():
    f = np.float32

    def r(seed, *shape):
        return randn(seed, *shape, dtype=f)

    ids = B.asarray(np.array([[1, 2, 1], [0, 3, 3]]))
    target = B.asarray(np.array([[1, 2, 0], [3, 0, 0]]))
    mask = B.asarray(np.array([True, True, False, True, False]))
    lprobs = log_softmax_forward(r(9, 2, 3, 5))[0]
    return {
        "linear": (linear_forward, linear_backward, (r(0, 2, 3, 4), r(1, 4, 5), r(2, 5)), {}),
        "layernorm": (
            layernorm_forward,
            layernorm_backward,
            (r(0, 2, 3, 4), r(1, 4), r(2, 4)),
            {},
        ),
        "relu": (relu_forward, relu_backward, (r(0, 2, 3),), {}),
        "gelu": (gelu_forward, gelu_backward, (r(0, 2, 3),), {}),
        "silu": (silu_forward, silu_backward, (r(0, 2, 3),), {}),
        "softmax": (softmax_forward, softmax_backward, (r(0, 2, 5), mask), {}),
        "log_softmax": (log_softmax_forward, log_softmax_backward, (r(0, 2, 5),), {}),
        "dropout": (dropout_forward, dropout_backward, (r(0, 4, 5), 0.3, device.generator(0)), {}),
        "embedding": (embedding_forward, embedding_backward, (ids, r(0, 4, 3), 0), {}),
        "positional": (
            positional_forward,
            positional_backward,
            (r(0, 2, 3, 4), sinusoidal_table(8, 4), 2),
            {},
        ),
        "attention": (
            attention_forward,
            attention_backward,
            (r(0, 2, 2, 3, 4), r(1, 2, 2, 5, 4), r(2, 2, 2, 5, 3), causal_mask(3, 5)),
            {"p_drop": 0.2, "rng": device.generator(1)},
        ),
        "cross_entropy": (
            cross_entropy_forward,
            cross_entropy_backward,
            (r(0, 2, 3, 5), target, 0.1, 0),
            {},
        ),
        "label_smoothed_nll": (
            label_smoothed_nll_forward,
            label_smoothed_nll_backward,
            (lprobs, target, 0.1, 0),
            {},
        ),
    }


F32_OPS = [
    "linear",
    "layernorm",
    "relu",
    "gelu",
    "silu",
    "softmax",
    "log_softmax",
    "dropout",
    "embedding",
    "positional",
    "attention",
    "cross_entropy",
    "label_smoothed_nll",
]


@pytest.mark.parametrize("name", F32_OPS)
def test_float32_in_float32_out(name):
    """No op silently upcasts float32 to float64 (in its output or any gradient)."""
    forward, backward, args, kwargs = _f32_cases()[name]
    out, cache = forward(*args, **kwargs)
    dout = B.asarray(np.ones(out.shape, dtype=np.float32)) if out.ndim else 1.0
    grads = backward(dout, cache)
    grads = grads if isinstance(grads, tuple) else (grads,)
    assert out.dtype == np.float32, f"{name} forward gives {out.dtype}"
    for g in grads:
        if g is not None:
            assert g.dtype == np.float32, f"{name} backward gives {g.dtype}"
