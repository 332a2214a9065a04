"""Each exercise's backward written as the derivation's named terms (exercises/terms.py):
the terms sum to the engine's pass, and a wrong pass that is the reference with one term
changed is named after that term."""

from __future__ import annotations

import pytest

from scratchformer.engine import backend
from scratchformer.engine.ops import activations, layernorm, softmax
from scratchformer.exercises import EXERCISES
from scratchformer.exercises.grade import FAILING, grade, report
from scratchformer.exercises.spec import drawing
from scratchformer.exercises.term_sets import term_set
from scratchformer.exercises.terms import NONE, Knob, size_names

WITH_TERMS = [name for name in EXERCISES if term_set(name) is not None]


def _rel(a, b) -> float:
    np = backend.np
    a, b = np.asarray(backend.asnumpy(a), float), np.asarray(backend.asnumpy(b), float)
    return float(np.abs(a - b).max(initial=0.0) / max(np.abs(b).max(initial=0.0), 1e-300))


def test_every_exercise_but_adam_has_its_terms():
    assert set(WITH_TERMS) == set(EXERCISES) - {"adam"}


@pytest.mark.parametrize("name", WITH_TERMS)
def test_the_terms_sum_to_the_engines_pass(name):
    """With no knob the terms' backward is the engine's, and the terms listed for a
    gradient (each the right gradient minus the gradient without it) add up to it,
    within 1e-12 in float64, on every input (the drawn ones too)."""
    ex, ts = EXERCISES[name], term_set(name)
    with drawing(1):
        ref = ex.outputs(ex.engine())
        mine = ex.outputs(ex.with_code(ts.code(NONE)))
        without = {key: ex.outputs(ex.with_code(ts.code(Knob(key, 0.0))))
                   for keys in ts.sums.values() for key in keys}
    for r, m in zip(ref, mine):
        for t in r:
            assert _rel(m[t], r[t]) <= 1e-12, (t, _rel(m[t], r[t]))
    for t, keys in ts.sums.items():
        for i, r in enumerate(ref):
            if t not in r:  # an input without it (a linear map with no bias)
                continue
            total = sum(r[t] - without[key][i][t] for key in keys)
            assert _rel(total, r[t]) <= 1e-12, (t, keys)


def _gelu_second_twice(dout, cache):
    x, t = cache
    du_dx = activations._GELU_C * (1.0 + 3.0 * activations._GELU_A * x * x)
    return dout * (0.5 * (1.0 + t) + x * (1.0 - t * t) * du_dx)


def _layernorm_variance_sign(dout, cache):
    dx, dgamma, dbeta = layernorm.layernorm_backward(dout, cache)
    xhat, rstd = cache.xhat, cache.rstd
    dxhat = dout * cache.gamma
    return dx + 2 * rstd * xhat * (dxhat * xhat).mean(axis=-1, keepdims=True), dgamma, dbeta


def _softmax_sum_dP(dout, cache):
    return cache.P * (dout - dout.sum(axis=-1, keepdims=True))


def _ce_eps_over_V(dout, cache):
    xp = backend.xp
    V = cache.V
    P = cache.P.reshape(-1, V)
    tgt = cache.target.reshape(-1)
    q = xp.full_like(P, cache.eps / V)
    q[xp.arange(tgt.shape[0]), tgt] = 1.0 - cache.eps
    r = cache.keep.reshape(-1) * dout / max(int(cache.n_tokens), 1)
    return ((P - q) * r[:, None]).reshape(cache.P.shape)


def _softmax_half_row_sum(dout, cache):
    P = cache.P
    return P * dout - 0.5 * P * (dout * P).sum(axis=-1, keepdims=True)


NAMED = [
    ("gelu", {"gelu_backward": _gelu_second_twice},
     "the second term of GELU's derivative, 0.5 x (1 - t^2) du/dx, is counted twice"),
    ("layernorm", {"layernorm_backward": _layernorm_variance_sign},
     "the variance term rstd * xhat * mean(dxhat * xhat) (through var) has the wrong sign"),
    ("softmax", {"softmax_backward": _softmax_sum_dP}, "the row-sum term taken of dP alone"),
    ("cross_entropy", {"cross_entropy_backward": _ce_eps_over_V},
     "q's off-target weight eps/V, where it is eps/(V-1)"),
    ("softmax", {"softmax_backward": _softmax_half_row_sum},
     "the row-sum term P * sum(dP * P) is multiplied by 1/2"),
]


@pytest.mark.parametrize("name, code, says", NAMED, ids=[c[2][:30] for c in NAMED])
def test_a_wrong_term_is_named(name, code, says):
    ex = EXERCISES[name]
    g = grade(ex, ex.with_code(code), seed=1)
    assert g.status == FAILING
    text = " ".join(" ".join(report(g)).split())
    assert says in text, text
    assert "not a mistake we know" not in text


def test_a_term_scaled_by_a_size_of_the_input_is_named():
    ex = EXERCISES["softmax"]

    def row_sum_over_batch(dout, cache):
        P = cache.P
        return P * dout - P * (dout * P).sum(axis=-1, keepdims=True) / dout.shape[0]

    g = grade(ex, ex.with_code({"softmax_backward": row_sum_over_batch}), seed=1)
    text = " ".join(" ".join(report(g)).split())
    assert "the row-sum term P * sum(dP * P) is multiplied by 1/B (the batch size)" in text, text


def test_sizes_are_named_with_their_powers():
    sizes = {"d_k": 4.0, "B (the batch size)": 3.0, "1-p": 0.8}
    assert size_names(0.5, sizes) == ["1/sqrt(d_k)"]
    assert size_names(1 / 3, sizes) == ["1/B (the batch size)"]
    assert size_names(1.25, sizes) == ["1/(1-p)"]
    assert size_names(16.0, sizes) == ["d_k^2"]
    assert size_names(0.7, sizes) == []


def test_softmax_reference_is_untouched():
    """The engine's backward passes are not the terms': they stay as they were."""
    assert softmax.softmax_backward.__module__ == "scratchformer.engine.ops.softmax"


def test_adams_moments_are_compared_step_by_step_and_the_change_named():
    ex = EXERCISES["adam"]
    xp = backend.xp

    def v_hat_uncorrected(theta, g, m, v, t, lr, beta1=0.9, beta2=0.98, eps=1e-9):
        m *= beta1
        m += (1 - beta1) * g
        v *= beta2
        v += (1 - beta2) * g * g
        theta -= lr * (m / (1 - beta1**t)) / (xp.sqrt(v) + eps)

    g = grade(ex, {"adam_update": v_hat_uncorrected}, seed=1)
    text = " ".join(" ".join(report(g)).split())
    assert "m right at every step, v right at every step, theta wrong from step 1" in text, text
    assert "v-hat uncorrected: v used for v_hat" in text, text

    def v_with_g(theta, g, m, v, t, lr, beta1=0.9, beta2=0.98, eps=1e-9):
        m *= beta1
        m += (1 - beta1) * g
        v *= beta2
        v += (1 - beta2) * g  # NaN under the root where v < 0: named all the same
        theta -= lr * (m / (1 - beta1**t)) / (xp.sqrt(v / (1 - beta2**t)) + eps)

    g = grade(ex, {"adam_update": v_with_g}, seed=1)
    text = " ".join(" ".join(report(g)).split())
    assert "v updated with g where it takes g^2" in text, text


def test_two_results_of_each_others_shape_are_said_swapped():
    ex = EXERCISES["multi_head_attention"]
    engine = ex.engine()["multi_head_attention_backward"]

    def swapped(self, dout, cache):
        dx_q, dx_kv = engine(self, dout, cache)
        return dx_kv, dx_q

    g = grade(ex, {"multi_head_attention_backward": swapped}, seed=1)
    assert "dx_q and dx_kv swapped (each has the other's shape" in g.message, g.message
