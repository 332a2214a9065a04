"""The in-place forms of the softmax and dropout pairs equal the derived pairs exactly.

Scaled dot-product attention runs its softmax and dropout steps in the buffer of the
scores it owns (``softmax_``, ``softmax_backward_``, ``dropout_backward_``). These tests
show that this is only a choice of buffer: each in-place form is bitwise equal to the
pure pair derived in docs/derivations.md, and ``attention_forward``/``attention_backward``
are bitwise equal to attention composed from the pure pairs step by step.

Dimension key: B batch, H heads, T queries, S keys, Dh d_k, Dv d_v.
"""

import math

import numpy as np
import pytest

from scratchformer import backend as B
from scratchformer.ops.attention import attention_backward, attention_forward
from scratchformer.ops.dropout import dropout_backward, dropout_backward_, dropout_forward
from scratchformer.ops.softmax import (
    SoftmaxCache,
    softmax_,
    softmax_backward,
    softmax_backward_,
    softmax_forward,
)

pytestmark = pytest.mark.usefixtures("backend")

Bn, H, T, S, Dh, Dv = 2, 3, 5, 7, 4, 6


def _mask(r):
    """A random mask with one query row that sees nothing (its output must be zeros)."""
    m = r.random((Bn, 1, T, S)) > 0.3
    m[1, 0, 2] = False
    return B.asarray(m)


def _equal(a, b):
    np.testing.assert_array_equal(B.asnumpy(a), B.asnumpy(b))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("masked", [False, True])
def test_softmax_in_place_equals_the_pair(dtype, masked):
    r = np.random.default_rng(0)
    x = B.asarray(r.standard_normal((Bn, H, T, S)), dtype=dtype)
    mask = _mask(r) if masked else None
    P, cache = softmax_forward(x, mask)
    P_, m, s = softmax_(x.copy(), mask)
    _equal(P_, P)
    assert B.asnumpy(m).shape == B.asnumpy(s).shape == (Bn, H, T, 1)
    dout = B.asarray(r.standard_normal((Bn, H, T, S)), dtype=dtype)
    _equal(softmax_backward_(dout.copy(), P_), softmax_backward(dout, cache))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_dropout_backward_in_place_equals_the_pair(dtype):
    r = np.random.default_rng(1)
    x = B.asarray(r.standard_normal((Bn, H, T, S)), dtype=dtype)
    _, cache = dropout_forward(x, 0.3, B.rng(4))
    assert cache.mask is not None
    dout = B.asarray(r.standard_normal(x.shape), dtype=dtype)
    _equal(dropout_backward_(dout.copy(), cache), dropout_backward(dout, cache))
    _, off = dropout_forward(x, 0.3, None)  # off: the identity, in place too
    _equal(dropout_backward_(dout.copy(), off), dout)


def _attention_from_pairs(Q, K, V, mask, p_drop, rng, dO):
    """Scaled dot-product attention written with the pure pairs only."""
    scale = 1.0 / math.sqrt(Q.shape[-1])
    Z = Q @ K.swapaxes(-1, -2)  # (B, H, T, S)
    Z *= scale
    A, c_sm = softmax_forward(Z, mask)
    A_drop, c_drop = dropout_forward(A, p_drop, rng)
    O = A_drop @ V  # (B, H, T, Dv)
    dA_drop = dO @ V.swapaxes(-1, -2)
    dV = A_drop.swapaxes(-1, -2) @ dO
    dZ = softmax_backward(dropout_backward(dA_drop, c_drop), SoftmaxCache(c_sm.P))
    dZ *= scale
    return O, (dZ @ K, dZ.swapaxes(-1, -2) @ Q, dV)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("p_drop", [0.0, 0.25])
def test_attention_equals_its_composition_from_the_pure_pairs(dtype, p_drop):
    r = np.random.default_rng(2)
    Q = B.asarray(r.standard_normal((Bn, H, T, Dh)), dtype=dtype)
    K = B.asarray(r.standard_normal((Bn, H, S, Dh)), dtype=dtype)
    V = B.asarray(r.standard_normal((Bn, H, S, Dv)), dtype=dtype)
    dO = B.asarray(r.standard_normal((Bn, H, T, Dv)), dtype=dtype)
    mask = _mask(r)
    O, cache = attention_forward(Q, K, V, mask, p_drop, B.rng(9))
    grads = attention_backward(dO.copy(), cache)
    O_ref, grads_ref = _attention_from_pairs(Q, K, V, mask, p_drop, B.rng(9), dO)
    _equal(O, O_ref)
    for got, want in zip(grads, grads_ref):
        _equal(got, want)
    assert not B.asnumpy(O)[1, :, 2].any()  # the query that sees nothing outputs zeros
