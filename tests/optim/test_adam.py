"""Adam against a hand computation, step counting, weight decay, state round trip."""

import math

import numpy as np
import pytest

from scratchformer import backend as B
from scratchformer.models import Transformer, TransformerConfig
from scratchformer.optim import Adam, OptimizerStateError

B1, B2, EPS = 0.9, 0.98, 1e-9


def _params():
    return {
        "w": B.asarray(np.array([1.0, -2.0, 0.5]), dtype=np.float64),
        "b": B.asarray(np.array([[0.25]]), dtype=np.float64),
    }


GRADS = [
    {"w": [0.1, -0.3, 2.0], "b": [[-1.0]]},
    {"w": [-0.2, 0.1, 1.0], "b": [[0.5]]},
    {"w": [0.05, 0.05, -3.0], "b": [[0.0]]},
]
LRS = [0.1, 0.05, 0.02]


def _hand_adam(theta0, grads, lrs, wd=0.0):
    """Scalar-by-scalar Adam with explicit bias correction, written from the paper."""
    theta, m, v = list(theta0), [0.0] * len(theta0), [0.0] * len(theta0)
    for t, (g, lr) in enumerate(zip(grads, lrs), start=1):
        for i, gi in enumerate(g):
            m[i] = B1 * m[i] + (1 - B1) * gi
            v[i] = B2 * v[i] + (1 - B2) * gi * gi
            m_hat = m[i] / (1 - B1**t)
            v_hat = v[i] / (1 - B2**t)
            theta[i] = theta[i] - lr * (m_hat / (math.sqrt(v_hat) + EPS) + wd * theta[i])
    return theta


@pytest.mark.parametrize("wd", [0.0, 0.1])
def test_three_steps_match_hand_computation(backend, wd):
    params = _params()
    w_ref, b_ref = params["w"], params["b"]
    opt = Adam(params, beta1=B1, beta2=B2, eps=EPS, weight_decay=wd)
    for g, lr in zip(GRADS, LRS):
        opt.step({k: B.asarray(np.array(v), dtype=np.float64) for k, v in g.items()}, lr)
    want_w = _hand_adam([1.0, -2.0, 0.5], [g["w"] for g in GRADS], LRS, wd)
    want_b = _hand_adam([0.25], [g["b"][0] for g in GRADS], LRS, wd)
    np.testing.assert_allclose(B.asnumpy(params["w"]), want_w, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(B.asnumpy(params["b"]).ravel(), want_b, rtol=1e-13, atol=1e-15)
    assert params["w"] is w_ref and params["b"] is b_ref  # updated in place, never rebound
    assert opt.t == 3  # once per step, not per parameter tensor


def test_first_step_is_lr_times_sign(backend):
    """At t = 1 bias correction makes m_hat = g, v_hat = g^2: the step is lr * g/|g|."""
    params = _params()
    opt = Adam(params)
    g = {"w": B.asarray(np.array([0.01, -5.0, 300.0])), "b": B.asarray(np.array([[-0.1]]))}
    opt.step(g, lr=0.01)  # |g| >> eps = 1e-9, so g / (|g| + eps) = sign(g) to 1e-7
    np.testing.assert_allclose(B.asnumpy(params["w"]), [0.99, -1.99, 0.49], rtol=1e-8)
    np.testing.assert_allclose(B.asnumpy(params["b"]), [[0.26]], rtol=1e-8)


def test_decoupled_weight_decay_with_zero_gradient(backend):
    params = _params()
    opt = Adam(params, weight_decay=0.5)
    zeros = {k: B.xp.zeros_like(p) for k, p in params.items()}
    opt.step(zeros, lr=0.1)
    # Adam's part is 0 / (0 + eps) = 0; decay shrinks theta by lr * wd.
    np.testing.assert_allclose(B.asnumpy(params["w"]), np.array([1.0, -2.0, 0.5]) * 0.95)


def test_state_round_trip_continues_identically(backend):
    a_params, b_params = _params(), _params()
    a, b = Adam(a_params), Adam(b_params)
    g = {k: B.asarray(np.array(v), dtype=np.float64) for k, v in GRADS[0].items()}
    a.step(g, 0.1)
    b.load_state_dict(a.state_dict())
    for k in b_params:
        b_params[k][...] = a_params[k]
    g2 = {k: B.asarray(np.array(v), dtype=np.float64) for k, v in GRADS[1].items()}
    a.step(g2, 0.1)
    b.step(g2, 0.1)
    assert b.t == a.t == 2
    for k in a_params:
        np.testing.assert_array_equal(B.asnumpy(a_params[k]), B.asnumpy(b_params[k]))


def test_state_that_does_not_fit_is_an_error(backend):
    opt = Adam(_params())
    state = opt.state_dict()
    del state["m"]["b"]
    with pytest.raises(OptimizerStateError, match="missing \\['b'\\]"):
        Adam(_params()).load_state_dict(state)
    state = opt.state_dict()
    state["v"]["w"] = np.zeros(4)
    with pytest.raises(OptimizerStateError, match="shape"):
        Adam(_params()).load_state_dict(state)
    with pytest.raises(OptimizerStateError, match="no gradient"):
        opt.step({"w": B.xp.zeros(3)}, 0.1)


def test_moments_per_named_parameter_with_tied_embedding(backend):
    model = Transformer(TransformerConfig.preset("tiny", vocab_size=11))
    opt = Adam(model.parameters())
    assert set(opt.m) == set(model.parameters())
    assert sum(k.endswith(".E") for k in opt.m) == 1  # the tied matrix: one set of moments


def test_bad_hyperparameters():
    with pytest.raises(ValueError, match="betas"):
        Adam(_params(), beta2=1.0)
    with pytest.raises(ValueError, match="eps"):
        Adam(_params(), eps=0.0)
