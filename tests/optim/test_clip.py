"""Global gradient-norm clipping scales the norm exactly and keeps the direction."""

import math

import numpy as np

from scratchformer.engine import backend as B
from scratchformer.engine.nn.flat import FlatParameters
from scratchformer.engine.optim import clip_grad_norm, global_grad_norm


def _grads(seed=0):
    """A flat gradient of two parameters: ``{name: view}`` into one (17,) array."""
    r = np.random.default_rng(seed)
    flat = FlatParameters(
        {
            "a": B.asarray(r.normal(size=(3, 4)), dtype=np.float64),
            "b": B.asarray(r.normal(size=(5,)), dtype=np.float64),
        }
    )
    flat.grads[...] = flat.params
    return flat.views(flat.grads), flat.grads


def _norm_by_hand(grads):
    return math.sqrt(sum(float(x) ** 2 for g in grads.values() for x in B.asnumpy(g).ravel()))


def test_global_norm(backend):
    g, flat = _grads()
    assert math.isclose(global_grad_norm(flat), _norm_by_hand(g), rel_tol=1e-14)


def test_clip_scales_to_exactly_max_norm(backend):
    g, flat = _grads()
    before = {k: B.asnumpy(v).copy() for k, v in g.items()}
    norm = _norm_by_hand(g)
    max_norm = norm / 3.0
    returned = clip_grad_norm(flat, max_norm)
    assert math.isclose(returned, norm, rel_tol=1e-14)  # the norm before clipping
    assert math.isclose(global_grad_norm(flat), max_norm, rel_tol=1e-13)
    for k in g:  # every tensor scaled by the same factor: the direction is unchanged
        np.testing.assert_allclose(B.asnumpy(g[k]), before[k] * (max_norm / norm), rtol=1e-13)


def test_no_clip_below_threshold_or_when_off(backend):
    g, flat = _grads()
    before = {k: B.asnumpy(v).copy() for k, v in g.items()}
    clip_grad_norm(flat, _norm_by_hand(g) * 1.01)
    clip_grad_norm(flat, 0.0)
    for k in g:
        np.testing.assert_array_equal(B.asnumpy(g[k]), before[k])


def test_non_finite_norm_is_reported_not_scaled(backend):
    g, flat = _grads()
    g["b"][0] = np.nan
    assert math.isnan(clip_grad_norm(flat, 1.0))
    assert math.isfinite(float(B.asnumpy(g["a"]).sum()))
