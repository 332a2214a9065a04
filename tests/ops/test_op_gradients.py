"""Float64 finite-difference checks of every op's hand-written backward.

Each op is checked through ``L = sum(out * dout)`` with a random ``dout`` by
``scratchformer.engine.gradcheck.check_op``: relative error below 1e-6 on every checked input,
and every expected input name present in the report (a row that is silently missing
would let a wrong gradient through). Shapes are non-degenerate: B > 1, H > 1, T != Dh,
S != T, unit-scale random inputs. An op with implementations registered in the kernel
seam beside its reference is checked once per implementation (``implementations``):
the finite differences judge every one of them, not only the reference.

Dimension key: B batch, H heads, T queries, S keys, Dh d_k, Dv d_v, D features, V vocab.
"""

import numpy as np
import pytest
from arrays import randn

from scratchformer.engine import backend as B
from scratchformer.engine import dispatch
from scratchformer.engine.gradcheck import check_op
from scratchformer.engine.ops import (
    causal_mask,
    cross_entropy_backward,
    cross_entropy_forward,
    embedding_backward,
    embedding_forward,
    gelu_backward,
    gelu_forward,
    label_smoothed_nll_backward,
    label_smoothed_nll_forward,
    linear_backward,
    linear_forward,
    log_softmax_backward,
    log_softmax_forward,
    positional_backward,
    positional_forward,
    silu_backward,
    silu_forward,
    sinusoidal_table,
)
from scratchformer.engine.ops.attention import (
    dot_product_logits_backward,
    dot_product_logits_forward,
)

pytestmark = pytest.mark.usefixtures("backend")

TOL = 1e-6


def implementations(name):
    """Every implementation of the op ``name`` in the kernel seam, the reference first."""
    return [pytest.param(impl, id=impl.name) for impl in dispatch.table(name).implementations()]


def runs_here(impl):
    """The implementation, or a skip where it does not run on the active backend."""
    if B.backend_name() not in impl.backends:
        pytest.skip(f"{impl.name} does not run on {B.backend_name()}")
    if "float64" not in impl.dtypes:  # the finite differences run in float64
        pytest.skip(f"{impl.name} takes {', '.join(impl.dtypes)} only")
    return impl.forward, impl.backward


def assert_passed(report, *names):
    """The check passed and reports exactly the expected inputs."""
    assert report.passed, "\n" + report.table()
    assert [r.name for r in report.rows] == list(names), report.table()
    for r in report.rows:
        assert r.checked == r.total, f"{r.name}: only {r.checked}/{r.total} entries checked"
    assert report.max_rel_error < TOL


# -- linear -------------------------------------------------------------------------------
def test_linear_with_bias():
    """dx, dW and db of x W + b (dW summed over every leading axis, not just the first)."""
    x, W, b = randn(0, 2, 3, 4), randn(1, 4, 5), randn(2, 5)
    assert_passed(check_op(linear_forward, linear_backward, x, W, b), "x", "W", "b")


def test_linear_without_bias():
    """dx and dW of x W, with no bias (the backward's db is None)."""

    def backward_no_bias(dout, cache):
        dx, dW, db = linear_backward(dout, cache)
        assert db is None
        return dx, dW

    x, W = randn(0, 2, 3, 4), randn(1, 4, 5)
    assert_passed(check_op(linear_forward, backward_no_bias, x, W), "x", "W")


# -- embedding ----------------------------------------------------------------------------
def test_embedding_repeated_ids_and_pad():
    """dE with repeated ids (must accumulate) and a pad id whose positions never reach the
    loss (as in the model, where pad keys are masked and pad targets ignored)."""
    pad = 0
    ids = B.asarray(np.array([[3, 1, 3, 0], [2, 3, 0, 0], [1, 1, 4, 3]]))  # (B=3, T=4)

    def forward(ids, E, pad_id):
        out, cache = embedding_forward(ids, E, pad_id)
        keep = (ids != pad_id)[..., None]
        return out * keep, (cache, keep)

    def backward(dout, cache):
        c, keep = cache
        return embedding_backward(dout * keep, c)

    E = randn(1, 6, 5)  # (V=6, D=5)
    assert_passed(check_op(forward, backward, ids, E, pad), "E")


def test_embedding_without_pad():
    """dE of a plain lookup (no pad id), every row including unused ones."""
    ids = B.asarray(np.array([[3, 1, 3, 0], [2, 3, 5, 5]]))
    assert_passed(check_op(embedding_forward, embedding_backward, ids, randn(1, 6, 5)), "E")


# -- positions ----------------------------------------------------------------------------
@pytest.mark.parametrize("offset", [0, 3])
def test_positional_learned(offset):
    """dx = dout and dP rows offset..offset+T-1 = sum over the batch of dout."""
    x, P = randn(0, 2, 4, 6), randn(1, 10, 6)  # (B, T, D), (L, D)
    assert_passed(check_op(positional_forward, positional_backward, x, P, offset), "x", "P")


def test_positional_sinusoidal_passes_x_through():
    """With the constant sinusoid table, the input gradient is dout unchanged."""
    x = randn(0, 2, 4, 6)
    table = sinusoidal_table(10, 6, dtype=np.float64)  # (L, D), a constant

    def forward(x):
        return positional_forward(x, table, 2)

    def backward(dout, cache):
        dx, _ = positional_backward(dout, cache)
        return dx

    assert_passed(check_op(forward, backward, x), "x")


# -- dropout ------------------------------------------------------------------------------
@pytest.mark.parametrize("impl", implementations("dropout"))
def test_dropout_replayed_mask(impl):
    """dx = dout * mask, the mask replayed from the same seed in every evaluation."""
    x = randn(0, 3, 4, 5)
    assert_passed(check_op(*runs_here(impl), x, 0.4, rng=7), "x")


# -- layer norm ---------------------------------------------------------------------------
@pytest.mark.parametrize("impl", implementations("layernorm"))
def test_layernorm(impl):
    """dx (closed form through mean and variance), dgamma and dbeta summed over rows."""
    x, gamma, beta = randn(0, 2, 3, 7) * 2.0 + 0.5, randn(1, 7), randn(2, 7)
    report = check_op(*runs_here(impl), x, gamma, beta, 1e-5)
    assert_passed(report, "x", "gamma", "beta")


# -- activations --------------------------------------------------------------------------
@pytest.mark.parametrize("impl", implementations("relu"))
def test_relu_away_from_zero(impl):
    """dx = dout * [x > 0], on inputs kept at least 0.1 away from the kink."""
    r = np.random.default_rng(0)
    x = r.uniform(0.1, 2.0, (3, 4, 5)) * r.choice([-1.0, 1.0], (3, 4, 5))
    assert_passed(check_op(*runs_here(impl), B.asarray(x)), "x")


def test_gelu():
    """The tanh-form GELU derivative, over negative, small and large inputs."""
    assert_passed(check_op(gelu_forward, gelu_backward, randn(0, 3, 4, 5) * 2.0), "x")


def test_silu():
    """SiLU's derivative s (1 + x (1 - s)), over negative, small and large inputs."""
    assert_passed(check_op(silu_forward, silu_backward, randn(0, 3, 4, 5) * 3.0), "x")


# -- softmax ------------------------------------------------------------------------------
@pytest.mark.parametrize("impl", implementations("softmax"))
def test_softmax_unmasked(impl):
    """dx = P * (dout - sum(dout * P)) over the last axis."""
    assert_passed(check_op(*runs_here(impl), randn(0, 2, 3, 4, 6)), "x")


@pytest.mark.parametrize("impl", implementations("softmax"))
def test_softmax_masked_with_a_fully_masked_row(impl):
    """Masked entries get zero gradient; a row with nothing to attend to gives zeros, no NaN."""
    mask = np.ones((2, 1, 4, 6), dtype=bool)  # (B, 1, T, S), broadcast over H = 3
    mask[0, 0, :, 4:] = False  # padding
    mask[1, 0, 2, :] = False  # a fully masked row
    x = randn(0, 2, 3, 4, 6)
    assert_passed(check_op(*runs_here(impl), x, B.asarray(mask)), "x")


def test_log_softmax():
    """dx = dout - softmax(x) * sum(dout)."""
    assert_passed(check_op(log_softmax_forward, log_softmax_backward, randn(0, 2, 3, 7)), "x")


# -- attention ----------------------------------------------------------------------------
def qkv(T=3, S=7, Dh=5, Dv=4, Bsz=2, H=3):
    """Unit-scale Q (B, H, T, Dh), K (B, H, S, Dh), V (B, H, S, Dv): T != Dh != S."""
    return randn(10, Bsz, H, T, Dh), randn(11, Bsz, H, S, Dh), randn(12, Bsz, H, S, Dv)


def dense_attention(core):
    """Scaled dot-product attention as the modules compose it: the paper's logits, then
    the core implementation ``core`` (the op gradient tests judge every one of them)."""
    core_forward, core_backward = runs_here(core)

    def forward(Q, K, V, mask=None, p_drop=0.0, rng=None):
        Z, c_logits = dot_product_logits_forward(Q, K)
        O, c_core = core_forward(Z, V, mask, p_drop, rng)
        return O, (c_logits, c_core)

    def backward(dO, cache):
        dZ, dV = core_backward(dO, cache[1])
        return (*dot_product_logits_backward(dZ, cache[0]), dV)

    return forward, backward


@pytest.mark.parametrize("impl", implementations("attention_core"))
def test_attention_with_padding_mask(impl):
    """dQ, dK, dV of scaled dot-product attention with source padding (B, 1, 1, S)."""
    Q, K, V = qkv()
    mask = np.ones((2, 1, 1, 7), dtype=bool)
    mask[1, ..., 5:] = False
    report = check_op(*dense_attention(impl), Q, K, V, B.asarray(mask))
    assert_passed(report, "Q", "K", "V")


@pytest.mark.parametrize("impl", implementations("attention_core"))
def test_attention_with_causal_mask(impl):
    """dQ, dK, dV with a causal mask (self-attention, T = S = 6, Dh = 4)."""
    Q, K, V = qkv(T=6, S=6, Dh=4, Dv=5)
    mask = causal_mask(6)[None, None]
    report = check_op(*dense_attention(impl), Q, K, V, mask)
    assert_passed(report, "Q", "K", "V")


@pytest.mark.parametrize("impl", implementations("attention_core"))
def test_attention_with_fully_masked_query_row(impl):
    """A query with no visible key outputs zeros and gets zero dQ; the rest is unaffected."""
    Q, K, V = qkv()
    mask = np.ones((2, 1, 3, 7), dtype=bool)
    mask[0, 0, 1, :] = False
    report = check_op(*dense_attention(impl), Q, K, V, B.asarray(mask))
    assert_passed(report, "Q", "K", "V")


@pytest.mark.parametrize("impl", implementations("attention_core"))
def test_attention_dropout_replayed(impl):
    """With dropout on the attention weights, dV uses the dropped weights, dA the mask."""
    Q, K, V = qkv()
    mask = np.ones((2, 1, 1, 7), dtype=bool)
    mask[0, ..., 6:] = False
    report = check_op(*dense_attention(impl), Q, K, V, B.asarray(mask), p_drop=0.3, rng=5)
    assert_passed(report, "Q", "K", "V")


@pytest.mark.parametrize("impl", implementations("attention_core"))
@pytest.mark.parametrize("p_drop", [0.0, 0.3])
def test_attention_core_with_a_fully_masked_row(impl, p_drop):
    """dZ and dV of the core alone: softmax over masked logits, dropout, product with V."""
    mask = np.ones((2, 1, 3, 7), dtype=bool)
    mask[1, 0, 2, :] = False  # a query that sees nothing
    mask[0, ..., 5:] = False
    Z, V = randn(20, 2, 3, 3, 7), randn(21, 2, 3, 7, 4)
    report = check_op(*runs_here(impl), Z, V, B.asarray(mask), p_drop=p_drop, rng=5)
    assert_passed(report, "Z", "V")


# -- losses -------------------------------------------------------------------------------
def targets_with_padding():
    """(B=3, T=4) targets in a vocabulary of 7 with pad id 0 at the ends."""
    return B.asarray(np.array([[3, 1, 6, 2], [5, 2, 0, 0], [4, 0, 0, 0]]))


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_label_smoothed_nll_on_log_probs(eps):
    """d(loss)/d(lprobs) = -q * keep / n_tokens; pad rows get zero."""
    lprobs, _ = log_softmax_forward(randn(0, 3, 4, 7))
    report = check_op(
        label_smoothed_nll_forward,
        label_smoothed_nll_backward,
        lprobs,
        targets_with_padding(),
        eps,
        0,
    )
    assert_passed(report, "lprobs")


@pytest.mark.parametrize("impl", implementations("cross_entropy"))
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_cross_entropy_fused(eps, impl):
    """d(loss)/d(logits) = (softmax - q) * keep / n_tokens, with padding."""
    logits = randn(0, 3, 4, 7) * 2.0
    report = check_op(*runs_here(impl), logits, targets_with_padding(), eps, 0)
    assert_passed(report, "logits")


def test_cross_entropy_without_pad_id():
    """With pad_id None every position counts, including id 0."""
    logits = randn(0, 3, 4, 7)
    report = check_op(
        cross_entropy_forward, cross_entropy_backward, logits, targets_with_padding(), 0.1, None
    )
    assert_passed(report, "logits")


@pytest.mark.parametrize("impl", implementations("cross_entropy"))
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_cross_entropy_with_padding_outside_the_vocabulary(eps, impl):
    """pad_id = V (padding that is no token, GPT-2's): the rows are dropped as pad rows
    are, the loss and dlogits bit for bit those of the same batch padded with a pad id
    inside the vocabulary (0, which no kept target holds)."""
    logits = randn(0, 3, 4, 7) * 2.0
    inside = targets_with_padding()
    outside = B.asarray(np.where(B.asnumpy(inside) == 0, 7, B.asnumpy(inside)))
    assert_passed(check_op(*runs_here(impl), logits, outside, eps, 7), "logits")
    forward, backward = runs_here(impl)
    results = []
    for target, pad in ((inside, 0), (outside, 7)):
        loss, cache = forward(logits.copy(), target, eps, pad)
        results.append((B.asnumpy(loss), B.asnumpy(backward(1.0, cache))))
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)


def test_label_smoothed_nll_with_padding_outside_the_vocabulary():
    lprobs, _ = log_softmax_forward(randn(0, 3, 4, 7))
    inside = B.asnumpy(targets_with_padding())
    outside = B.asarray(np.where(inside == 0, 7, inside))
    report = check_op(label_smoothed_nll_forward, label_smoothed_nll_backward, lprobs, outside,
                      0.1, 7)
    assert_passed(report, "lprobs")
    a, _ = label_smoothed_nll_forward(lprobs, B.asarray(inside), 0.1, 0)
    b, _ = label_smoothed_nll_forward(lprobs, outside, 0.1, 7)
    assert float(a) == float(b)
