"""Module behaviour beside gradients: caches instead of state, accumulation, naming.

Dimension key: B batch, T length, S keys, D d_model, H heads, Dh d_k, V vocabulary.
"""

import math

import numpy as np
import pytest
from arrays import randn

from scratchformer.engine import backend as B
from scratchformer.engine import device
from scratchformer.engine.gradcheck import check_module
from scratchformer.engine.nn import (
    Dropout,
    Embedding,
    LayerNorm,
    Linear,
    Module,
    ModuleList,
    MultiHeadAttention,
    PositionalEncoding,
)
from scratchformer.engine.ops import attention_forward, sinusoidal_table

pytestmark = pytest.mark.usefixtures("backend")


def host(x):
    return B.asnumpy(x)


# -- (d) one dropout object reused for several sub-layers ---------------------------------
class TwoLayersOneDropout(Module):
    """Two Linear sub-layers that share ONE Dropout object, as peers did:
    y = drop(lin2(drop(lin1(x)))). Each call's mask must live in its own cache."""

    def __init__(self):
        super().__init__()
        self.lin1 = Linear(6, 6, rng=B.host_rng(1))
        self.lin2 = Linear(6, 6, rng=B.host_rng(2))
        self.drop = Dropout(0.5)

    def forward(self, x, rng=None):
        h, c1 = self.lin1.forward(x)
        h, d1 = self.drop.forward(h, rng)
        h, c2 = self.lin2.forward(h)
        h, d2 = self.drop.forward(h, rng)
        return h, (c1, d1, c2, d2)

    def backward(self, dout, cache):
        c1, d1, c2, d2 = cache
        dh = self.drop.backward(dout, d2)
        dh = self.lin2.backward(dh, c2)
        dh = self.drop.backward(dh, d1)
        return self.lin1.backward(dh, c1)


def test_shared_dropout_object_uses_each_calls_own_mask():
    """Bug (d): a Dropout reused for two sub-layers back-propagated with the last mask only.

    With masks in caches the module passes the float64 check with dropout on."""
    m = TwoLayersOneDropout()
    x = randn(0, 3, 4, 6)
    _, (_, d1, _, d2) = m.forward(x, device.generator(5))
    assert not np.array_equal(host(d1.value.mask), host(d2.value.mask)), "needs two masks"
    report = check_module(m, x, rng=5)
    assert report.passed, report.table()
    assert {r.name for r in report.rows} == {"x", "lin1.W", "lin1.b", "lin2.W", "lin2.b"}


def test_shared_dropout_with_last_mask_only_would_fail():
    """Bug (d) sensitivity: replaying only the last mask for both calls is detected."""

    class LastMaskOnly(TwoLayersOneDropout):
        def backward(self, dout, cache):
            c1, _, c2, d2 = cache
            return super().backward(dout, (c1, d2, c2, d2))

    report = check_module(LastMaskOnly(), randn(0, 3, 4, 6), rng=5)
    assert not report.passed
    assert not report["lin1.W"].passed


# -- caches, not state ------------------------------------------------------------------------
def test_module_called_twice_accumulates_both_calls():
    """A module used twice gets one cache per call and both backward calls add up."""
    lin = Linear(4, 3)
    x1, x2 = randn(0, 2, 4), randn(1, 2, 4)
    d1, d2 = randn(2, 2, 3), randn(3, 2, 3)
    _, c1 = lin.forward(x1)
    _, c2 = lin.forward(x2)  # would overwrite a self.x
    lin.backward(d1, c1)
    lin.backward(d2, c2)
    expected = host(x1).T @ host(d1) + host(x2).T @ host(d2)
    np.testing.assert_allclose(host(lin.grads["W"]), expected, rtol=1e-5, atol=1e-6)


def test_gradients_accumulate_until_zero_grad():
    """backward only adds: two identical backward calls give 2x; zero_grad resets to 0."""
    with B.precision("float64"):
        ln = LayerNorm(5)
        x, dout = randn(0, 3, 5), randn(1, 3, 5)
        _, cache = ln.forward(x)
        ln.backward(dout, cache)
        once = {k: host(g).copy() for k, g in ln.gradients().items()}
        ln.backward(dout, cache)
        for k, g in ln.gradients().items():
            np.testing.assert_allclose(host(g), 2 * once[k], rtol=1e-14)
        ln.zero_grad()
        assert all(np.all(host(g) == 0) for g in ln.gradients().values())


def test_embedding_scale_and_tied_projection_values():
    """Lookup is E[ids] * scale; the tied projection h E^T uses E unscaled."""
    with B.precision("float64"):
        emb = Embedding(7, 4, pad_id=0, scale=2.0)
        E = host(emb.params["E"])
        assert np.all(E[0] == 0), "the pad row starts at zero"
        ids = np.array([[1, 3, 0]])
        out, _ = emb.forward(B.asarray(ids))
        np.testing.assert_allclose(host(out), 2.0 * E[ids])
        h = randn(0, 1, 3, 4)
        logits, _ = emb.project(h)
        np.testing.assert_allclose(host(logits), host(h) @ E.T, rtol=1e-12)


def test_tied_embedding_gradient_is_sum_of_both_uses():
    """Bug (f) at module level: dE = lookup gradient + projection gradient (each use added)."""
    with B.precision("float64"):
        emb = Embedding(7, 4, pad_id=0, scale=2.0)
        ids = B.asarray(np.array([[1, 3, 3], [2, 5, 6]]))
        e, c_emb = emb.forward(ids)
        logits, c_out = emb.project(e)
        dlogits = randn(0, 2, 3, 7)
        dh = emb.project_backward(dlogits, c_out)
        proj_only = host(emb.grads["E"]).copy()
        emb.backward(dh, c_emb)
        total = host(emb.grads["E"])
        # each use by hand: projection dE = dlogits^T h; lookup dE[v] = 2 * sum dh at ids == v
        expected_proj = host(dlogits).reshape(-1, 7).T @ host(e).reshape(-1, 4)
        lookup = np.zeros((7, 4))
        np.add.at(lookup, host(ids).ravel(), 2.0 * host(dh).reshape(-1, 4))
        lookup[0] = 0.0
        np.testing.assert_allclose(proj_only, expected_proj, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(total, expected_proj + lookup, rtol=1e-12, atol=1e-14)


# -- attention -------------------------------------------------------------------------------
def test_multi_head_attention_equals_a_loop_over_heads():
    """Splitting heads by reshape matches h separate attention heads concatenated."""
    with B.precision("float64"):
        d_model, h, d_k, d_v = 8, 2, 3, 5
        mha = MultiHeadAttention(d_model, h, d_k=d_k, d_v=d_v)
        x_q, x_kv = randn(0, 2, 4, d_model), randn(1, 2, 6, d_model)
        out, _ = mha.forward(x_q, x_kv)
        p = {k: host(v) for k, v in mha.params.items()}
        heads = []
        for i in range(h):
            Q = host(x_q) @ p["W_q"][:, i * d_k : (i + 1) * d_k]
            K = host(x_kv) @ p["W_k"][:, i * d_k : (i + 1) * d_k]
            V = host(x_kv) @ p["W_v"][:, i * d_v : (i + 1) * d_v]
            S = Q @ K.swapaxes(-1, -2) / math.sqrt(d_k)
            A = np.exp(S - S.max(-1, keepdims=True))
            A /= A.sum(-1, keepdims=True)
            heads.append(A @ V)
        expected = np.concatenate(heads, -1) @ p["W_o"]
        np.testing.assert_allclose(host(out), expected, rtol=1e-10, atol=1e-12)


def test_attention_op_matches_direct_formula():
    """softmax(Q K^T / sqrt(d_k)) V for a single example, computed directly."""
    Q, K, V = randn(0, 1, 1, 3, 4), randn(1, 1, 1, 5, 4), randn(2, 1, 1, 5, 2)
    O, _ = attention_forward(Q, K, V)
    q, k, v = host(Q)[0, 0], host(K)[0, 0], host(V)[0, 0]
    s = q @ k.T / 2.0
    a = np.exp(s) / np.exp(s).sum(-1, keepdims=True)
    np.testing.assert_allclose(host(O)[0, 0], a @ v, rtol=1e-12)


def test_multi_head_attention_needs_divisible_d_model_or_d_k():
    """d_model not divisible by h without an explicit d_k is a clear error."""
    with pytest.raises(ValueError, match="not divisible"):
        MultiHeadAttention(10, 3)
    assert MultiHeadAttention(10, 3, d_k=4, d_v=4).params["W_q"].shape == (10, 12)


# -- positions -------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["sinusoidal", "learned"])
def test_positional_encoding_offset(kind):
    """forward(x, offset) adds rows offset .. offset + T - 1 of the table."""
    with B.precision("float64"):
        pe = PositionalEncoding(12, 6, kind)
        table = host(pe.params["P"]) if kind == "learned" else host(pe.table)
        if kind == "sinusoidal":
            np.testing.assert_allclose(table, host(sinusoidal_table(12, 6, np.float64)))
        x = randn(0, 2, 3, 6)
        out, cache = pe.forward(x, offset=4)
        np.testing.assert_allclose(host(out), host(x) + table[4:7], rtol=1e-15)
        dout = randn(1, 2, 3, 6)
        dx = pe.backward(dout, cache)
        np.testing.assert_array_equal(host(dx), host(dout))
        if kind == "learned":
            dP = host(pe.grads["P"])
            assert np.all(dP[:4] == 0) and np.all(dP[7:] == 0)
            np.testing.assert_allclose(dP[4:7], host(dout).sum(0), rtol=1e-14)


def test_positional_encoding_rejects_unknown_kind():
    """Only 'sinusoidal' and 'learned' positions exist."""
    with pytest.raises(ValueError, match="unknown positions"):
        PositionalEncoding(8, 4, "rotary")


# -- naming, dtype conversion -------------------------------------------------------------
def test_dotted_names_and_shared_module_named_once():
    """Sub-modules give dotted names; a module used twice is named at its first path."""

    class Net(Module):
        def __init__(self):
            super().__init__()
            self.a = Linear(3, 2)
            self.layers = ModuleList([LayerNorm(2), Linear(2, 2, bias=False)])
            self.again = self.a  # shared, like the tied embedding

    net = Net()
    assert list(net.parameters()) == [
        "a.W",
        "a.b",
        "layers.0.gamma",
        "layers.0.beta",
        "layers.1.W",
    ]
    assert list(net.gradients()) == list(net.parameters())
    assert net.num_parameters() == 3 * 2 + 2 + 2 + 2 + 4


def test_astype_converts_parameters_gradients_and_tables():
    """astype(float64) converts parameters, gradients and constant tables in place."""
    pe = PositionalEncoding(8, 4, "sinusoidal")
    lin = Linear(4, 3)
    assert pe.table.dtype == np.float32 and lin.params["W"].dtype == np.float32
    pe.astype(np.float64)
    lin.astype(np.float64)
    assert pe.table.dtype == np.float64
    assert lin.params["W"].dtype == np.float64 and lin.grads["b"].dtype == np.float64
