"""Performance choices that must not change results: float32 stays float32 everywhere in
a training step (no silent float64 upcast), the Q/K/V projections are the documented
separate parameters and survive every way arrays get replaced (copies, pickles, float64),
and the in-place loss and its one-backward cache equal the pure op.

Dimension key: B batch, S source length, T target length, D d_model, V vocabulary.
"""

import copy
import pickle

import numpy as np
import pytest

from scratchformer.engine import backend as B
from scratchformer.engine import device
from scratchformer.engine.gradcheck import check_model, rel_error
from scratchformer.engine.models import Transformer, TransformerConfig
from scratchformer.engine.nn import MultiHeadAttention
from scratchformer.engine.ops import cross_entropy_backward, cross_entropy_forward
from scratchformer.engine.ops.loss import cross_entropy
from scratchformer.engine.optim import Adam

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
    opt = Adam(m.flatten())
    src, tgt_in, tgt_out = batch()
    for _ in range(2):
        m.zero_grad()
        loss, cache = m.loss_forward(src, tgt_in, tgt_out, rng=device.generator(0))
        found = dict(float_arrays(cache, "cache"))
        m.loss_backward(cache)
        opt.step(1e-3)
    logits, _ = m.forward(src, tgt_in)
    found.update(loss=loss, logits=logits)
    found.update({f"param {k}": v for k, v in m.parameters().items()})
    found.update({f"grad {k}": v for k, v in m.gradients().items()})
    found.update({"adam m": opt.m, "adam v": opt.v, "flat grads": m.flat.grads})
    assert len(found) > 100
    wide = sorted(k for k, v in found.items() if v.dtype != np.float32)
    assert not wide, f"float64 (or other) arrays in a float32 step: {wide[:10]}"


def test_qkv_parameters_are_separate_arrays_with_documented_names():
    m = Transformer(TransformerConfig.preset("tiny", vocab_size=23, d_k=6, d_v=5))
    D, H = 16, 2
    for name, width in (("W_q", H * 6), ("W_k", H * 6), ("W_v", H * 5)):
        key = f"encoder.layers.0.self_attn.{name}"
        assert m.parameters()[key].shape == (D, width)
        assert m.parameters()[key].flags.c_contiguous
        assert m.gradients()[key].shape == (D, width)


def _loss_and_grads(m, seed=3):
    m.zero_grad()
    loss, cache = m.loss_forward(*batch(), rng=device.generator(seed))
    m.loss_backward(cache)
    return float(loss), {k: B.asnumpy(g).copy() for k, g in m.gradients().items()}


def test_copies_give_the_same_loss_and_gradients(f64):
    """A deep copy, a pickle round trip and a float64 copy train like the original."""
    m = Transformer(TransformerConfig.preset("tiny", vocab_size=23))
    ref_loss, ref = _loss_and_grads(m)
    for other in (copy.deepcopy(m), pickle.loads(pickle.dumps(m)), copy.deepcopy(m).astype("f8")):
        loss, grads = _loss_and_grads(other)
        assert loss == pytest.approx(ref_loss, rel=1e-12)
        for k in ref:
            assert rel_error(grads[k], ref[k]) < 1e-12, k


def test_self_attention_backward_contract():
    """For self-attention ``backward`` returns the gradients of both uses of x (as
    queries, as keys/values); their sum is the input's gradient."""
    mha = MultiHeadAttention(8, 2, rng=B.host_rng(1))
    x = B.asarray(np.random.default_rng(0).standard_normal((2, 5, 8)).astype(np.float32))
    out, cache = mha.forward(x, x)
    dx_q, dx_kv = mha.backward(B.asarray(np.ones(out.shape, np.float32)), cache)
    assert dx_q.shape == dx_kv.shape == x.shape


def test_gradient_check_of_the_model_passes_in_both_norms():
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
    nll_sum = cross_entropy.read(cache.loss, "nll_sum")
    assert nll_sum == pytest.approx(c_pure.nll_sum, rel=1e-13)
    assert cache.loss.impl.name == "inplace"  # the model gives its logits up
    d_pure = cross_entropy_backward(1.0, c_pure)
    np.testing.assert_allclose(
        B.asnumpy(cross_entropy.backward(1.0, cache.loss)), B.asnumpy(d_pure), atol=1e-15
    )
    with pytest.raises(ValueError, match="spent"):
        m.loss_backward(cache)
    with pytest.raises(ValueError, match="spent"):
        cross_entropy.backward(1.0, cache.loss)
    assert cross_entropy.read(cache.loss, "nll_sum") == nll_sum  # still readable
