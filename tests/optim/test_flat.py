"""Flat buffers: a model's parameters and gradients as views of two arrays, and the
passes over them (Adam, the global norm and clipping, zeroing, the finiteness check)
equal to the same work done tensor by tensor, to 1e-12 in float64."""

import copy
import math
import pickle

import numpy as np
import pytest

from scratchformer.engine import backend as B
from scratchformer.engine.models import Transformer, TransformerConfig
from scratchformer.engine.optim import Adam, clip_grad_norm


def _model():
    return Transformer(TransformerConfig.preset("tiny", vocab_size=19, P_drop=0.0))


def _per_tensor_adam(params, grads_by_step, lrs, b1=0.9, b2=0.98, eps=1e-9, clip=1.0):
    """The reference: Adam with the global-norm clip, one tensor at a time, as written in
    the paper and in Kingma and Ba (2015), on host copies."""
    theta = {k: v.copy() for k, v in params.items()}
    m = {k: np.zeros_like(v) for k, v in theta.items()}
    v = {k: np.zeros_like(x) for k, x in theta.items()}
    for t, (grads, lr) in enumerate(zip(grads_by_step, lrs), start=1):
        norm = math.sqrt(sum(float((g * g).sum()) for g in grads.values()))
        scale = clip / norm if norm > clip else 1.0
        for k in theta:
            g = grads[k] * scale
            m[k] = b1 * m[k] + (1 - b1) * g
            v[k] = b2 * v[k] + (1 - b2) * g * g
            m_hat, v_hat = m[k] / (1 - b1**t), v[k] / (1 - b2**t)
            theta[k] = theta[k] - lr * m_hat / (np.sqrt(v_hat) + eps)
    return theta, m, v


def relative_error(a, b) -> float:
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def test_flat_adam_clip_and_norm_equal_the_per_tensor_versions(backend, f64):
    model = _model()
    start = model.state_dict()
    flat = model.flatten()
    opt = Adam(flat)
    r = np.random.default_rng(0)
    steps = [{k: r.normal(0, 3.0, v.shape) for k, v in start.items()} for _ in range(5)]
    lrs = [1e-3, 2e-3, 3e-3, 2e-3, 1e-3]
    for grads, lr in zip(steps, lrs):
        model.zero_grad()
        for k, g in model.gradients().items():
            g += B.asarray(grads[k])  # written through the modules' views
        want_norm = math.sqrt(sum(float((g * g).sum()) for g in grads.values()))
        norm = clip_grad_norm(flat.grads, 1.0)
        assert abs(norm - want_norm) <= 1e-12 * want_norm
        opt.step(lr)
    theta, m, v = _per_tensor_adam(start, steps, lrs)
    state = opt.state_dict()
    errors = []
    for k in theta:
        errors.append(relative_error(B.asnumpy(model.parameters()[k]), theta[k]))
        errors.append(relative_error(state["m"][k], m[k]))
        errors.append(relative_error(state["v"][k], v[k]))
    assert max(errors) <= 1e-12, max(errors)


def test_the_modules_arrays_are_views_of_the_flat_buffers(backend):
    model = _model()
    before = model.state_dict()
    flat = model.flatten()
    assert model.flatten() is flat  # once
    assert flat.size == model.num_parameters()
    after = model.state_dict()
    assert all(np.array_equal(before[k], after[k]) for k in before)  # values kept
    flat.params[...] = 2.0
    assert all(float(B.asnumpy(p).min()) == 2.0 for p in model.parameters().values())
    for g in model.gradients().values():
        g += 1.0  # a backward adds into the module's gradient ...
    assert float(B.asnumpy(flat.grads).min()) == 1.0  # ... which is the flat gradient
    model.zero_grad()
    assert not B.asnumpy(flat.grads).any()
    # the tied matrix is one parameter: one slice
    assert sum(k.endswith(".E") for k in flat.names) == 1


def test_copies_and_casts_stay_flat(backend):
    model = _model()
    flat = model.flatten()
    twin = copy.deepcopy(model)
    assert twin.flat is not flat
    twin.flat.params[...] = 0.5
    assert float(B.asnumpy(twin.parameters()["embed.E"]).max()) == 0.5
    assert float(B.asnumpy(model.parameters()["embed.E"]).max()) != 0.5  # its own arrays
    back = pickle.loads(pickle.dumps(model))
    back.flat.grads[...] = 3.0
    assert float(B.asnumpy(back.gradients()["embed.E"]).min()) == 3.0  # views again
    wide = copy.deepcopy(model).astype(B.xp.float64)
    assert wide.flat.dtype == np.float64
    wide.flat.params[...] = 0.25
    assert float(B.asnumpy(wide.parameters()["embed.E"]).min()) == 0.25


def test_the_first_non_finite_parameter_is_named(backend):
    model = _model()
    flat = model.flatten()
    assert flat.first_nonfinite(flat.params) == ""
    name = flat.names[5]
    flat.view(flat.params, name)[..., -1] = np.nan
    assert flat.first_nonfinite(flat.params) == name


def test_one_dtype_only():
    with pytest.raises(ValueError, match="one dtype"):
        from scratchformer.engine.nn.flat import FlatParameters

        FlatParameters({"a": np.zeros(2, np.float32), "b": np.zeros(2, np.float64)})
