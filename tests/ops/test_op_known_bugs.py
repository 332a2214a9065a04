"""One test per op-level bug in docs/reference.md, "Bugs found in existing NumPy transformers".

Each test is built so that the buggy version fails it: the setup is shown to be
sensitive (the wrong gradient is computed here too, and shown to disagree).

Dimension key: B batch, H heads, T queries, S keys, Dh d_k, Dv d_v, V vocabulary.
"""

import tracemalloc

import numpy as np
import pytest
from arrays import randn

from scratchformer.engine import backend as B
from scratchformer.engine import device
from scratchformer.engine.gradcheck import check_op, numeric_gradient, rel_error
from scratchformer.engine.ops import (
    attention_backward,
    attention_forward,
    cross_entropy_backward,
    cross_entropy_forward,
    label_smoothed_nll_backward,
    label_smoothed_nll_forward,
    layernorm_backward,
    layernorm_forward,
    log_softmax_forward,
    softmax_backward,
    softmax_forward,
)

pytestmark = pytest.mark.usefixtures("backend")


def numeric(f, x):
    """Central differences of the scalar f() w.r.t. every entry of x, shaped like x."""
    return numeric_gradient(f, x, range(int(x.size))).reshape(x.shape)


def ratio(analytic, numerical):
    """Least-squares scale s with analytic ~ s * numerical (1 when right, 1/B for bug a)."""
    a, n = B.asnumpy(analytic).ravel(), np.asarray(numerical).ravel()
    return float(a @ n / (n @ n))


def attention_setup(T=3, S=7, Dh=5, Dv=4, Bsz=3, H=2, seed=0):
    """Unit-scale Q, K, V, a padding mask, and a random dO: T != Dh, S != T, B > 1."""
    Q = randn(seed, Bsz, H, T, Dh)
    K = randn(seed + 1, Bsz, H, S, Dh)
    V = randn(seed + 2, Bsz, H, S, Dv)
    mask = np.ones((Bsz, 1, 1, S), dtype=bool)
    mask[-1, ..., S - 2 :] = False
    dO = randn(seed + 3, Bsz, H, T, Dv)
    return Q, K, V, B.asarray(mask), dO


# -- (a) softmax backward divided by the batch size ------------------------------------------
def test_attention_dQ_dK_are_not_divided_by_batch_size():
    """Bug (a): a softmax backward divided by B gave Q/K gradients 1/B of the truth.

    With B = 3 the analytic dQ and dK match finite differences at scale 1, not 1/3."""
    Q, K, V, mask, dO = attention_setup(Bsz=3)
    out, cache = attention_forward(Q, K, V, mask)
    dQ, dK, _ = attention_backward(dO, cache)

    def f():
        return float((attention_forward(Q, K, V, mask)[0] * dO).sum())

    nQ, nK = numeric(f, Q), numeric(f, K)
    for analytic, num in ((dQ, nQ), (dK, nK)):
        assert ratio(analytic, num) == pytest.approx(1.0, abs=1e-7)
        assert rel_error(analytic, num) < 1e-6
        # the buggy gradient (1/B of the truth) is far outside the tolerance
        assert rel_error(B.asnumpy(analytic) / 3, num) > 0.1


def test_softmax_backward_is_not_divided_by_batch_size():
    """Bug (a) at the softmax itself: dx of a (B=4, ...) softmax is exact, not dx / B."""
    x, dout = randn(0, 4, 2, 3, 6), randn(1, 4, 2, 3, 6)
    _, cache = softmax_forward(x)
    dx = softmax_backward(dout, cache)
    nx = numeric(lambda: float((softmax_forward(x)[0] * dout).sum()), x)
    assert ratio(dx, nx) == pytest.approx(1.0, abs=1e-7)
    assert rel_error(dx, nx) < 1e-6


# -- (b) loss gradient 1/N of the reported mean ------------------------------------------
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_cross_entropy_gradient_is_gradient_of_reported_mean(eps):
    """Bug (b): the loss gradient was 1/N of the gradient of the reported mean loss.

    The backward of the reported (mean over non-pad tokens) loss equals the finite
    difference of that very number; dividing once more by N = 7 would fail."""
    logits = randn(0, 3, 4, 6)
    target = B.asarray(np.array([[3, 1, 5, 2], [4, 2, 0, 0], [1, 0, 0, 0]]))  # 7 real tokens
    loss, cache = cross_entropy_forward(logits, target, eps, 0)
    assert cache.n_tokens == 7
    d = cross_entropy_backward(1.0, cache)
    n = numeric(lambda: float(cross_entropy_forward(logits, target, eps, 0)[0]), logits)
    assert ratio(d, n) == pytest.approx(1.0, abs=1e-7)
    assert rel_error(d, n) < 1e-6
    assert rel_error(B.asnumpy(d) / 7, n) > 0.5


def test_log_prob_loss_gradient_is_gradient_of_reported_mean():
    """Bug (b) for the log-prob form: d(mean loss)/d(lprobs) at scale 1."""
    lprobs, _ = log_softmax_forward(randn(0, 3, 4, 6))
    target = B.asarray(np.array([[3, 1, 5, 2], [4, 2, 0, 0], [1, 0, 0, 0]]))
    _, cache = label_smoothed_nll_forward(lprobs, target, 0.1, 0)
    d = label_smoothed_nll_backward(1.0, cache)
    n = numeric(lambda: float(label_smoothed_nll_forward(lprobs, target, 0.1, 0)[0]), lprobs)
    assert ratio(d, n) == pytest.approx(1.0, abs=1e-7)
    assert rel_error(d, n) < 1e-6


def test_loss_backward_scales_with_dout():
    """The incoming dloss multiplies the gradient (a scaled loss scales its gradient)."""
    logits = randn(0, 3, 4, 6)
    target = B.asarray(np.array([[3, 1, 5, 2], [4, 2, 0, 0], [1, 0, 0, 0]]))
    _, cache = cross_entropy_forward(logits, target, 0.1, 0)
    d1 = B.asnumpy(cross_entropy_backward(1.0, cache))
    d3 = B.asnumpy(cross_entropy_backward(2.5, cache))
    np.testing.assert_allclose(d3, 2.5 * d1, rtol=1e-14)


# -- (c) dK computed as Q^T dS (transposed) ------------------------------------------------
def test_attention_dK_with_T_not_equal_Dh_and_unit_weights():
    """Bug (c): dK = Q^T dZ went unnoticed with T = d_k = 4 and tiny weights.

    Here T = 3, S = 7, Dh = 5, unit-scale inputs: dK must match finite differences."""
    Q, K, V, mask, _ = attention_setup(T=3, S=7, Dh=5)
    report = check_op(attention_forward, attention_backward, Q, K, V, mask)
    assert report.passed, report.table()
    assert report["K"].max_rel_error < 1e-6


def test_transposed_dK_is_detected_by_this_setup():
    """Bug (c) sensitivity: the transposed alternative Q^T dZ (same shape as K when S = Dh)
    disagrees with finite differences, while the package's dZ^T Q agrees."""
    Q, K, V, mask, dO = attention_setup(T=3, S=5, Dh=5)  # S = Dh so Q^T dZ fits K's shape
    _, cache = attention_forward(Q, K, V, mask)
    _, dK, _ = attention_backward(dO, cache)
    # replay the backward up to dZ, then form the buggy (transposed) dK
    dA = dO @ V.swapaxes(-1, -2)  # (B, H, T, S)
    dZ = softmax_backward(dA, cache.core.softmax) * cache.logits.scale  # (B, H, T, S)
    dK_transposed = Q.swapaxes(-1, -2) @ dZ  # (B, H, Dh, S): Q^T dZ
    assert dK_transposed.shape == K.shape
    nK = numeric(lambda: float((attention_forward(Q, K, V, mask)[0] * dO).sum()), K)
    assert rel_error(dK, nK) < 1e-6
    assert rel_error(dK_transposed, nK) > 0.1


# -- (e) attention backward using the pre-dropout weights -----------------------------------
def test_attention_dV_uses_post_dropout_weights():
    """Bug (e): dV used A^T dO (before dropout); it must be A_drop^T dO."""
    Q, K, V, mask, dO = attention_setup()
    _, cache = attention_forward(Q, K, V, mask, p_drop=0.5, rng=device.generator(4))
    _, _, dV = attention_backward(dO, cache)
    A = cache.core.softmax.P  # (B, H, T, S), before dropout
    A_drop = cache.core.A_drop  # after dropout
    assert not np.allclose(B.asnumpy(A), B.asnumpy(A_drop))
    np.testing.assert_allclose(
        B.asnumpy(dV), B.asnumpy(A_drop.swapaxes(-1, -2) @ dO), rtol=1e-12, atol=1e-14
    )
    assert rel_error(dV, A.swapaxes(-1, -2) @ dO) > 0.1


def test_attention_with_dropout_matches_finite_differences():
    """Bug (e) end to end: with attention dropout (replayed mask) dQ, dK, dV all agree."""
    Q, K, V, mask, _ = attention_setup()
    report = check_op(attention_forward, attention_backward, Q, K, V, mask, p_drop=0.5, rng=4)
    assert report.passed, report.table()
    assert [r.name for r in report.rows] == ["Q", "K", "V"]


# -- (i) no Jacobian-sized intermediate ------------------------------------------------------
def peak_bytes(fn):
    """Peak host memory allocated while fn() runs (tracemalloc sees NumPy's buffers)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        result = fn()
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    del result
    return peak


def test_softmax_backward_memory_is_linear_in_input(backend):
    """Bug (i): a softmax backward that built the (B, H, T, T, T) Jacobian.

    (2, 4, 512, 512) float64 is 16 MiB; its Jacobian would be 8 GiB. The forward and the
    backward each allocate less than 10x the input."""
    if backend != "numpy":
        pytest.skip("tracemalloc measures host memory only")
    r = np.random.default_rng(0)
    x = r.standard_normal((2, 4, 512, 512))
    dout = r.standard_normal((2, 4, 512, 512))
    mask = np.ones((2, 1, 1, 512), dtype=bool)
    mask[1, ..., 400:] = False
    cache = []
    fwd = peak_bytes(lambda: cache.append(softmax_forward(x, mask)[1]))
    bwd = peak_bytes(lambda: softmax_backward(dout, cache[0]))
    assert fwd < 10 * x.nbytes, f"softmax forward peak {fwd / 2**20:.0f} MiB"
    assert bwd < 10 * x.nbytes, f"softmax backward peak {bwd / 2**20:.0f} MiB"


def test_layernorm_backward_memory_is_linear_in_input(backend):
    """Bug (i): a LayerNorm backward that built a D x D Jacobian per row.

    (4, 128, 1024) float64 is 4 MiB; per-row Jacobians would be 4 GiB."""
    if backend != "numpy":
        pytest.skip("tracemalloc measures host memory only")
    r = np.random.default_rng(0)
    x = r.standard_normal((4, 128, 1024))
    dout = r.standard_normal((4, 128, 1024))
    gamma, beta = r.standard_normal(1024), r.standard_normal(1024)
    cache = []
    fwd = peak_bytes(lambda: cache.append(layernorm_forward(x, gamma, beta)[1]))
    bwd = peak_bytes(lambda: layernorm_backward(dout, cache[0]))
    assert fwd < 10 * x.nbytes, f"layernorm forward peak {fwd / 2**20:.0f} MiB"
    assert bwd < 10 * x.nbytes, f"layernorm backward peak {bwd / 2**20:.0f} MiB"
