"""The finite-difference checker itself: it must not touch what it is given, must catch
wrong backward passes, must sample reproducibly, and must report every tensor.

Dimension key: B batch, H heads, T queries, S keys, Dh d_k, V vocabulary.
"""

import numpy as np
import pytest
from arrays import randn

from scratchformer.engine import backend as B
from scratchformer.engine.gradcheck import (
    check_gradients,
    check_model,
    check_module,
    check_op,
    numeric_gradient,
    rel_error,
)
from scratchformer.engine.models import Transformer, TransformerConfig
from scratchformer.engine.nn import Linear
from scratchformer.engine.ops import (
    attention_backward,
    attention_forward,
    linear_backward,
    linear_forward,
)
from scratchformer.engine.ops.linear import linear

pytestmark = pytest.mark.usefixtures("backend")

V = 17


def host_copy(x):
    return B.asnumpy(x).copy()


def tiny_model(**kw):
    return Transformer(TransformerConfig.preset("tiny", vocab_size=V, **kw))


def tiny_batch():
    src = np.array([[5, 6, 7, 8, 9, 10, 11], [12, 13, 14, 15, 0, 0, 0]])
    tgt_in = np.array([[1, 4, 5, 6, 7], [1, 8, 9, 0, 0]])
    tgt_out = np.array([[4, 5, 6, 7, 2], [8, 9, 2, 0, 0]])
    return B.asarray(src), B.asarray(tgt_in), B.asarray(tgt_out)


# -- the error measure -------------------------------------------------------------------
def test_rel_error_is_max_difference_over_scale():
    """rel_error = max|a - n| / max(1e-8, max(|a| + |n|)), guarded against 0 / 0."""
    assert rel_error(np.array([1.0, 2.0]), np.array([1.0, 2.002])) == pytest.approx(0.002 / 4.002)
    assert rel_error(np.zeros(3), np.zeros(3)) == 0.0
    assert rel_error(np.array([1e-12]), np.array([0.0])) == pytest.approx(1e-4)
    assert rel_error(np.array([]), np.array([])) == 0.0


def test_numeric_gradient_restores_the_array():
    """numeric_gradient perturbs entries in place and puts back the exact old values."""
    x = randn(0, 3, 4)
    before = host_copy(x)
    g = numeric_gradient(lambda: float((x**3).sum()), x, range(12))
    np.testing.assert_array_equal(B.asnumpy(x), before)
    np.testing.assert_allclose(g, 3 * before.ravel() ** 2, rtol=1e-8)


# -- nothing the caller passes is modified -------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_check_op_does_not_mutate_inputs(dtype):
    """check_op works on float64 copies: the caller's arrays are bit-for-bit unchanged."""
    x, W, b = randn(0, 2, 3, 4, dtype=dtype), randn(1, 4, 5, dtype=dtype), randn(2, 5, dtype=dtype)
    before = [host_copy(a) for a in (x, W, b)]
    report = check_op(linear_forward, linear_backward, x, W, b)
    assert report.passed, report.table()
    for a, old in zip((x, W, b), before):
        assert a.dtype == dtype
        np.testing.assert_array_equal(B.asnumpy(a), old)


def test_check_module_does_not_mutate_module_or_inputs():
    """check_module deep-copies the module: parameters, gradients and dtype are untouched."""
    m = Linear(4, 3)
    m.grads["W"] += 1.0  # a gradient the caller has accumulated must survive
    params = {k: host_copy(p) for k, p in m.parameters().items()}
    grads = {k: host_copy(g) for k, g in m.gradients().items()}
    x = randn(0, 2, 5, 4, dtype=np.float32)
    x_before = host_copy(x)
    report = check_module(m, x)
    assert report.passed, report.table()
    for k, p in m.parameters().items():
        assert p.dtype == np.float32
        np.testing.assert_array_equal(B.asnumpy(p), params[k])
    for k, g in m.gradients().items():
        np.testing.assert_array_equal(B.asnumpy(g), grads[k])
    np.testing.assert_array_equal(B.asnumpy(x), x_before)


def test_check_model_does_not_mutate_model_or_batch():
    """check_model leaves the model's parameters, gradients, dtype and the batch as they were."""
    m = tiny_model()
    params = {k: host_copy(p) for k, p in m.parameters().items()}
    batch = tiny_batch()
    batch_before = [host_copy(a) for a in batch]
    report = check_model(m, *batch, rng=3, max_entries=3)
    assert report.passed, report.table()
    for k, p in m.parameters().items():
        assert p.dtype == np.float32
        np.testing.assert_array_equal(B.asnumpy(p), params[k])
    assert all(np.all(B.asnumpy(g) == 0) for g in m.gradients().values())
    for a, old in zip(batch, batch_before):
        np.testing.assert_array_equal(B.asnumpy(a), old)


# -- wrong backward passes are caught ---------------------------------------------------------
def test_detects_linear_backward_scaled_by_1_01():
    """A dW off by 1% fails (tolerance 1e-6), and only the W row fails."""

    def scaled_backward(dout, cache):
        dx, dW, db = linear_backward(dout, cache)
        return dx, 1.01 * dW, db

    report = check_op(
        linear_forward, scaled_backward, randn(0, 2, 3, 4), randn(1, 4, 5), randn(2, 5)
    )
    assert not report.passed
    assert [r.name for r in report.failures()] == ["W"]
    assert report["W"].max_rel_error == pytest.approx(0.01 / 2.01, rel=1e-3)
    assert "FAIL" in report.table()


def test_detects_transposed_dK():
    """An attention backward returning dK transposed (Q^T dZ, same shape when S = Dh) fails."""

    def transposed_dK_backward(dO, cache):
        dQ, dK, dV = attention_backward(dO, cache)
        return dQ, dK.swapaxes(-1, -2), dV

    Q, K, Vv = randn(0, 2, 2, 3, 5), randn(1, 2, 2, 5, 5), randn(2, 2, 2, 5, 4)
    report = check_op(attention_forward, transposed_dK_backward, Q, K, Vv)
    assert [r.name for r in report.failures()] == ["K"]
    assert report["K"].max_rel_error > 0.1


def test_detects_a_wrong_module_parameter_gradient():
    """check_module catches a module whose backward adds a wrong bias gradient."""

    class BadLinear(Linear):
        def backward(self, dout, cache):
            dx = super().backward(dout, cache)
            self.grads["b"] *= 2.0
            return dx

    report = check_module(BadLinear(4, 3), randn(0, 2, 5, 4))
    assert [r.name for r in report.failures()] == ["b"]


def test_detects_a_missing_gradient_in_the_model():
    """check_model catches a model whose tied projection gradient is dropped (bug f)."""
    m = tiny_model()

    def dropped(dlogits, cache):
        return linear.backward(dlogits, cache)[0]  # dh only: dE from the projection lost

    m.embed.project_backward = dropped
    report = check_model(m, *tiny_batch(), names=["embed.E"])
    assert not report.passed


# -- sampling ---------------------------------------------------------------------------------
def perturbed_entries(seed, max_entries=5):
    """The flat indices check_gradients perturbs for a (10, 10) array, in order."""
    x = B.asarray(np.zeros((10, 10)))
    seen = []

    def f():
        nz = np.flatnonzero(B.asnumpy(x))
        if nz.size:
            seen.append(int(nz[0]))
        return float(x.sum())

    check_gradients(
        f, {"x": x}, {"x": B.asarray(np.ones((10, 10)))}, max_entries=max_entries, seed=seed
    )
    return seen[::2]  # each entry is evaluated at +h and -h


def test_sampling_is_seeded():
    """The same seed checks the same entries; another seed other entries."""
    a, b, c = perturbed_entries(0), perturbed_entries(0), perturbed_entries(1)
    assert len(a) == 5 and a == sorted(set(a))
    assert a == b
    assert a != c


def test_same_seed_same_report():
    """Two check_model runs with the same seed give identical reports."""
    m = tiny_model()
    r1 = check_model(m, *tiny_batch(), rng=2, max_entries=4, seed=5)
    r2 = check_model(m, *tiny_batch(), rng=2, max_entries=4, seed=5)
    assert [(r.name, r.max_abs_error, r.checked) for r in r1.rows] == [
        (r.name, r.max_abs_error, r.checked) for r in r2.rows
    ]


def test_max_entries_none_checks_everything():
    """max_entries=None checks every entry; a number caps it per tensor."""
    m = tiny_model()
    full = check_model(m, *tiny_batch(), max_entries=None, names=["decoder.layers.0.ffn.b_2"])
    capped = check_model(m, *tiny_batch(), max_entries=5, names=["embed.E"])
    assert (full.rows[0].checked, full.rows[0].total) == (16, 16)
    assert (capped.rows[0].checked, capped.rows[0].total) == (5, V * 16)


# -- the report ---------------------------------------------------------------------------------
@pytest.mark.parametrize("share", ["all", "none"])
def test_report_table_names_every_parameter(share):
    """The report has one row per parameter, and its table prints each name and shape."""
    m = tiny_model(share_embeddings=share, norm="pre", positions="learned")
    report = check_model(m, *tiny_batch(), rng=1, max_entries=2)
    assert report.passed, report.table()
    assert [r.name for r in report.rows] == list(m.parameters())
    table = report.table()
    for name, p in m.parameters().items():
        assert name in table
        assert "x".join(map(str, p.shape)) in table
    assert f"{len(report.rows)} passed, 0 failed" in table
    assert str(report) == table


def test_report_lookup_by_name():
    """report[name] gives that row; an unknown name is a KeyError."""
    report = check_op(linear_forward, linear_backward, randn(0, 2, 4), randn(1, 4, 3), randn(2, 3))
    assert report["W"].shape == (4, 3)
    with pytest.raises(KeyError):
        report["nope"]


def test_check_model_rejects_unknown_names():
    """names= with a parameter the model does not have is an error naming it."""
    with pytest.raises(KeyError, match="encoder.layers.9.ffn.W_1"):
        check_model(tiny_model(), *tiny_batch(), names=["encoder.layers.9.ffn.W_1"])


# -- inputs the checker must handle -------------------------------------------------------------
def test_check_op_accepts_none_gradient_for_omitted_bias():
    """linear_backward returns (dx, dW, None) without a bias: check_op must skip the None
    rather than fail on the count (the package's own op convention)."""
    report = check_op(linear_forward, linear_backward, randn(0, 2, 3, 4), randn(1, 4, 5))
    assert report.passed, report.table()
    assert [r.name for r in report.rows] == ["x", "W"]


def test_check_op_with_non_contiguous_inputs():
    """A transposed (non-contiguous) input is checked like a contiguous one: perturbing it
    must reach the forward, not a reshaped copy (which reports a false failure)."""
    W_t = randn(1, 5, 4).T  # (4, 5), Fortran-ordered view
    x_t = randn(0, 4, 3).T  # (3, 4)
    report = check_op(linear_forward, linear_backward, x_t, W_t, randn(2, 5))
    assert report.passed, report.table()


def test_check_module_with_non_contiguous_input():
    """The same for check_module's inputs."""
    report = check_module(Linear(4, 3), randn(0, 4, 6).T)
    assert report.passed, report.table()
