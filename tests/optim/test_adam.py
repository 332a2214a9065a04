"""Adam against a hand computation, step counting, weight decay, state round trip."""

import math

import numpy as np
import pytest

from scratchformer.engine import backend as B
from scratchformer.engine.models import Transformer, TransformerConfig
from scratchformer.engine.nn.flat import FlatParameters
from scratchformer.engine.optim import Adam, OptimizerStateError

B1, B2, EPS = 0.9, 0.98, 1e-9


def _params():
    """Two parameters in flat buffers: ``{name: view of flat.params}`` and the buffers."""
    flat = FlatParameters(
        {
            "w": B.asarray(np.array([1.0, -2.0, 0.5]), dtype=np.float64),
            "b": B.asarray(np.array([[0.25]]), dtype=np.float64),
        }
    )
    return flat.views(flat.params), flat


def _step(opt, grads: dict, lr):
    """Adam's step from ``{name: gradient}`` written into the flat gradient."""
    for k, g in grads.items():
        opt.flat.view(opt.flat.grads, k)[...] = B.asarray(np.array(g), dtype=np.float64)
    opt.step(lr)


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
    params, flat = _params()
    opt = Adam(flat, beta1=B1, beta2=B2, eps=EPS, weight_decay=wd)
    for g, lr in zip(GRADS, LRS):
        _step(opt, g, lr)
    want_w = _hand_adam([1.0, -2.0, 0.5], [g["w"] for g in GRADS], LRS, wd)
    want_b = _hand_adam([0.25], [g["b"][0] for g in GRADS], LRS, wd)
    np.testing.assert_allclose(B.asnumpy(params["w"]), want_w, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(B.asnumpy(params["b"]).ravel(), want_b, rtol=1e-13, atol=1e-15)
    assert params["w"].base is flat.params  # a view of the flat buffer, updated in place
    assert opt.t == 3  # once per step, not per parameter tensor


def test_first_step_is_lr_times_sign(backend):
    """At t = 1 bias correction makes m_hat = g, v_hat = g^2: the step is lr * g/|g|."""
    params, flat = _params()
    opt = Adam(flat)
    _step(
        opt, {"w": [0.01, -5.0, 300.0], "b": [[-0.1]]}, lr=0.01
    )  # |g| >> eps = 1e-9, so g / (|g| + eps) = sign(g) to 1e-7
    np.testing.assert_allclose(B.asnumpy(params["w"]), [0.99, -1.99, 0.49], rtol=1e-8)
    np.testing.assert_allclose(B.asnumpy(params["b"]), [[0.26]], rtol=1e-8)


def test_decoupled_weight_decay_with_zero_gradient(backend):
    params, flat = _params()
    opt = Adam(flat, weight_decay=0.5)
    opt.step(lr=0.1)  # the flat gradient starts at zero
    # Adam's part is 0 / (0 + eps) = 0; decay shrinks theta by lr * wd.
    np.testing.assert_allclose(B.asnumpy(params["w"]), np.array([1.0, -2.0, 0.5]) * 0.95)


def test_state_round_trip_continues_identically(backend):
    (a_params, a_flat), (b_params, b_flat) = _params(), _params()
    a, b = Adam(a_flat), Adam(b_flat)
    _step(a, GRADS[0], 0.1)
    b.load_state_dict(a.state_dict())
    for k in b_params:
        b_params[k][...] = a_params[k]
    _step(a, GRADS[1], 0.1)
    _step(b, GRADS[1], 0.1)
    assert b.t == a.t == 2
    for k in a_params:
        np.testing.assert_array_equal(B.asnumpy(a_params[k]), B.asnumpy(b_params[k]))


def test_state_that_does_not_fit_is_an_error(backend):
    opt = Adam(_params()[1])
    state = opt.state_dict()
    del state["m"]["b"]
    with pytest.raises(OptimizerStateError, match="missing \\['b'\\]"):
        Adam(_params()[1]).load_state_dict(state)
    state = opt.state_dict()
    state["v"]["w"] = np.zeros(4)
    with pytest.raises(OptimizerStateError, match="shape"):
        Adam(_params()[1]).load_state_dict(state)


def test_moments_per_named_parameter_with_tied_embedding(backend):
    model = Transformer(TransformerConfig.preset("tiny", vocab_size=11))
    opt = Adam(model.flatten())
    state = opt.state_dict()
    assert set(state["m"]) == set(model.parameters())
    assert sum(k.endswith(".E") for k in state["m"]) == 1  # the tied matrix: one set of moments
    assert opt.m.size == model.num_parameters()


def test_bad_hyperparameters():
    with pytest.raises(ValueError, match="betas"):
        Adam(_params()[1], beta2=1.0)
    with pytest.raises(ValueError, match="eps"):
        Adam(_params()[1], eps=0.0)


def test_the_step_is_the_same_in_blocks_of_any_size(backend, monkeypatch):
    """The update goes block by block (``device.pass_block``: cache-sized on the CPU, the
    whole buffer on a GPU): blocks of 2 entries, an uneven split of the 4, give the same
    bits as one piece."""
    from scratchformer.engine import device

    results = []
    for block in (None, 2):
        if block:
            monkeypatch.setattr(device, "pass_block", lambda n, b=block: b)
        params, flat = _params()
        opt = Adam(flat, beta1=B1, beta2=B2, eps=EPS, weight_decay=0.1)
        for g, lr in zip(GRADS, LRS):
            _step(opt, g, lr)
        results.append(B.asnumpy(flat.params).copy())
    np.testing.assert_array_equal(results[0], results[1])


# -- the reference update and the blocked form side by side ---------------------------------
def _state(r, n, dtype):
    """theta, g, m, v of ``n`` entries (v positive)."""
    draws = (r.standard_normal(n), r.standard_normal(n), 0.1 * r.standard_normal(n),
             np.abs(r.standard_normal(n)))
    return tuple(B.asarray(a, dtype=dtype) for a in draws)


def _cases():
    from scratchformer.engine import device

    xp = B.xp
    n_long = 3 * device.pass_block(1 << 20) + 7  # more than one block where blocks apply
    return [
        ("step 1", 37, (1, 1e-3)),
        ("step 500, paper's betas", 37, (500, 7e-4, 0.9, 0.98, 1e-9)),
        ("weight decay 0.01", 37, (3, 1e-3, 0.9, 0.999, 1e-8, 0.01)),
        (f"{n_long} entries", n_long, (4, 1e-3)),
        ("applied, t on the device", 37, (xp.asarray(7), 1e-3, 0.9, 0.98, 1e-9, 0.01,
                                          xp.asarray(True))),
        ("skipped", 37, (xp.asarray(7), 1e-3, 0.9, 0.98, 1e-9, 0.01, xp.asarray(False))),
    ]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_blocked_update_equals_the_reference(dtype):
    """``blocked_update`` (the bias corrections folded into two scalars, the passes in
    blocks) writes what ``adam_update`` (the formulas as written) writes, within the
    parity harness's limit, and a skipped step leaves every array bitwise as it was."""
    from scratchformer.engine.optim.adam import adam_update, blocked_update
    from scratchformer.engine.parity import TOLERANCE, relative_error

    r = np.random.default_rng(0)
    for label, n, args in _cases():
        state = _state(r, n, dtype)
        ref = [a.copy() for a in state]
        got = [a.copy() for a in state]
        adam_update(*ref, *args)
        blocked_update(*got, *args)
        for name, a, b in zip(("theta", "g", "m", "v"), got, ref):
            limit = 0.0 if label == "skipped" or name == "g" else 4 * TOLERANCE[dtype]
            assert relative_error(a, b) <= limit, (label, name)
        if label == "skipped":
            for a, b in zip(got, state):
                np.testing.assert_array_equal(B.asnumpy(a), B.asnumpy(b))


def test_another_update_put_in_place_and_the_forced_reference():
    """``use_update`` runs another update in every step for its duration (the exercises
    plug a learner's this way); forcing the references runs ``adam_update``."""
    from scratchformer.engine import dispatch
    from scratchformer.engine.optim import adam as adam_module

    calls = []

    def spy(*args):
        calls.append(args[4])
        adam_module.adam_update(*args)

    _, flat = _params()
    opt = Adam(flat)
    with adam_module.use_update(spy):
        _step(opt, GRADS[0], 0.1)
    _step(opt, GRADS[1], 0.1)
    assert calls == [1]
    seen = []
    with dispatch.reference(), adam_module.use_update(lambda *a: seen.append(a)):
        _step(opt, GRADS[2], 0.1)
    assert not seen and opt.t == 3
