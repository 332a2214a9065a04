"""Performance changes that must not change results: float32 stays float32 everywhere in
a training step (no silent float64 upcast), the fused Q/K/V buffer keeps the documented
parameters and survives every way arrays get replaced, and the in-place loss/backward
paths equal the pure ops.

Dimension key: B batch, S source length, T target length, D d_model, V vocabulary.
"""

import copy
import pickle

import numpy as np
import pytest

from scratchformer import backend as B
from scratchformer.gradcheck import check_model, rel_error
from scratchformer.models import Transformer, TransformerConfig
from scratchformer.nn import MultiHeadAttention
from scratchformer.ops import cross_entropy_backward, cross_entropy_forward
from scratchformer.optim import Adam

pytestmark = pytest.mark.usefixtures("backend")


def batch(vocab=23, seed=0):
    r = np.random.default_rng(seed)
    src = r.integers(3, vocab, (3, 6))
    src[2, 4:] = 0
    tgt_in, tgt_out = r.integers(3, vocab, (3, 5)), r.integers(3, vocab, (3, 5))
    tgt_in[1, 3:] = tgt_out[1, 3:] = 0
    return tuple(B.asarray(a) for a in (src, tgt_in, tgt_out))


def float_arrays(obj, path="", seen=None):
    """Every floating array reachable from obj (caches, tuples, lists, dicts), by path."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if B.is_array(obj):
        if obj.dtype.kind == "f":
            yield path, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from float_arrays(v, f"{path}.{k}", seen)
    elif isinstance(obj, (tuple, list)):
        names = getattr(obj, "_fields", range(len(obj)))
        for k, v in zip(names, obj):
            yield from float_arrays(v, f"{path}.{k}", seen)
    elif hasattr(obj, "dtype") and getattr(obj.dtype, "kind", "") == "f":  # NumPy scalar
        yield path, obj


@pytest.mark.parametrize("block", [None, 3])
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_float32_training_step_makes_no_float64(norm, block):
    """Params, grads, Adam moments, logits, loss, every cached activation: float32."""
    cfg = TransformerConfig.preset(
        "tiny", vocab_size=23, norm=norm, attention_block=block, P_drop_attn=0.1
    )
    m = Transformer(cfg)
    opt = Adam(m.parameters())
    src, tgt_in, tgt_out = batch()
    for _ in range(2):
        m.zero_grad()
        loss, cache = m.loss_forward(src, tgt_in, tgt_out, rng=B.rng(0))
        found = dict(float_arrays(cache, "cache"))
        m.loss_backward(cache)
        opt.step(m.gradients(), 1e-3)
    logits, _ = m.forward(src, tgt_in)
    found.update(loss=loss, logits=logits)
    found.update({f"param {k}": v for k, v in m.parameters().items()})
    found.update({f"grad {k}": v for k, v in m.gradients().items()})
    found.update({f"adam m {k}": v for k, v in opt.m.items()})
    found.update({f"adam v {k}": v for k, v in opt.v.items()})
    assert len(found) > 100
    wide = sorted(k for k, v in found.items() if v.dtype != np.float32)
    assert not wide, f"float64 (or other) arrays in a float32 step: {wide[:10]}"


def fused_ok(mha):
    return mha._is_fused("params") and mha._is_fused("grads")


def test_qkv_parameters_are_views_of_one_buffer_with_documented_names():
    m = Transformer(TransformerConfig.preset("tiny", vocab_size=23, d_k=6, d_v=5))
    sa = m.encoder.layers[0].self_attn
    assert fused_ok(sa)
    D, H = 16, 2
    for name, width in (("W_q", H * 6), ("W_k", H * 6), ("W_v", H * 5)):
        key = f"encoder.layers.0.self_attn.{name}"
        assert m.parameters()[key].shape == (D, width)
        assert m.gradients()[key].shape == (D, width)
    assert sa._fused["W"].shape == (D, 2 * H * 6 + H * 5)
    assert "encoder.layers.0.self_attn.W_qkv" not in m.parameters()


def _loss_and_grads(m, seed=3):
    m.zero_grad()
    loss, cache = m.loss_forward(*batch(), rng=B.rng(seed))
    m.loss_backward(cache)
    return float(loss), {k: B.asnumpy(g).copy() for k, g in m.gradients().items()}


def test_fusion_survives_deepcopy_pickle_astype_and_updates(f64):
    m = Transformer(TransformerConfig.preset("tiny", vocab_size=23))
    ref_loss, ref = _loss_and_grads(m)
    for other in (copy.deepcopy(m), pickle.loads(pickle.dumps(m)), copy.deepcopy(m).astype("f8")):
        for layer in list(other.encoder.layers) + list(other.decoder.layers):
            assert fused_ok(layer.self_attn)
        loss, grads = _loss_and_grads(other)
        assert loss == pytest.approx(ref_loss, rel=1e-12)
        for k in ref:
            assert rel_error(grads[k], ref[k]) < 1e-12, k
    # in-place writers keep the views: the optimizer and load_state_dict
    opt = Adam(m.parameters())
    opt.step(m.gradients(), 1e-2)
    m.load_state_dict(m.state_dict())
    sa = m.decoder.layers[0].self_attn
    assert fused_ok(sa)
    np.testing.assert_array_equal(B.asnumpy(sa._fused["W"][:, :16]), B.asnumpy(sa.params["W_q"]))


def test_replaced_parameter_array_falls_back_to_concatenation(f64):
    """A parameter replaced from outside is not silently ignored: the product is then
    concatenated on the fly, and gradients still go to each array."""
    m = Transformer(TransformerConfig.preset("tiny", vocab_size=23))
    ref_loss, ref = _loss_and_grads(m)
    sa = m.decoder.layers[1].cross_attn
    sa.params["W_k"] = sa.params["W_k"].copy()
    sa.grads["W_v"] = sa.grads["W_v"].copy()
    assert not sa._is_fused("params") and not sa._is_fused("grads")
    loss, grads = _loss_and_grads(m)
    assert loss == pytest.approx(ref_loss, rel=1e-12)
    for k in ref:
        assert rel_error(grads[k], ref[k]) < 1e-12, k
    sa.params["W_k"][...] += 1.0  # the replaced array is the one that is used
    assert float(m.loss_forward(*batch())[0]) != pytest.approx(ref_loss)
    sa._rebuild()
    assert fused_ok(sa)


def test_self_attention_backward_contract():
    """For self-attention the fused path returns the whole input gradient as dx_q and
    None for dx_kv (no zero array to allocate and add)."""
    mha = MultiHeadAttention(8, 2, rng=B.host_rng(1))
    x = B.asarray(np.random.default_rng(0).standard_normal((2, 5, 8)).astype(np.float32))
    out, cache = mha.forward(x, x)
    dx_q, dx_kv = mha.backward(B.asarray(np.ones(out.shape, np.float32)), cache)
    assert dx_q.shape == x.shape
    assert dx_kv is None


def test_gradient_check_of_the_fused_model_passes():
    for norm in ("post", "pre"):
        cfg = TransformerConfig.preset("tiny", vocab_size=19, norm=norm)
        report = check_model(Transformer(cfg), *batch(19), rng=3, max_entries=8)
        assert report.passed, report.table()


def test_in_place_loss_equals_pure_op_and_is_spent_once(f64):
    m = Transformer(TransformerConfig.preset("tiny", vocab_size=23))
    src, tgt_in, tgt_out = batch()
    logits, _ = m.forward(src, tgt_in)
    kept = logits.copy()
    loss_pure, c_pure = cross_entropy_forward(logits, tgt_out, 0.1, 0)
    np.testing.assert_array_equal(B.asnumpy(logits), B.asnumpy(kept))  # untouched
    loss, cache = m.loss_forward(src, tgt_in, tgt_out)
    assert float(loss) == pytest.approx(float(loss_pure), rel=1e-13)
    assert cache.loss.nll_sum == pytest.approx(c_pure.nll_sum, rel=1e-13)
    d_pure = cross_entropy_backward(1.0, c_pure)
    np.testing.assert_allclose(
        B.asnumpy(cross_entropy_backward(1.0, cache.loss)), B.asnumpy(d_pure), atol=1e-15
    )
    m.loss_backward(cache)
    with pytest.raises(ValueError, match="spent"):
        m.loss_backward(cache)
    with pytest.raises(ValueError, match="spent"):
        cross_entropy_backward(1.0, cache.loss)


def test_shallow_copy_leaves_the_original_fused_and_trainable():
    """copy.copy shares the parameters (shallow); it must not re-point the original's
    W_q/W_k/W_v away from the buffer its optimizer updates."""
    m = MultiHeadAttention(16, 2)
    c = copy.copy(m)
    assert fused_ok(m)
    assert c.params["W_q"] is m.params["W_q"]
    before = B.asnumpy(m.params["W_q"]).copy()
    grads = {k: B.xp.ones_like(v) for k, v in m.parameters().items()}
    Adam(m.parameters()).step(grads, lr=0.1)
    assert not np.array_equal(B.asnumpy(m.params["W_q"]), before)
