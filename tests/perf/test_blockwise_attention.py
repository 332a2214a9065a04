"""Memory-efficient (blockwise) attention equals dense attention: values and gradients in
float64, with every kind of mask (none, padding, causal, both, random with fully masked
rows), T not a multiple of the block, one block, blocks of 1, for the paper's attention
and the relative variants (the same logits and core on blocks of queries); its own
finite-difference check with dropout replayed; the model with ``attention_block``
equals the dense model; and the attention step's peak memory at 2,048 tokens is at
least 8x below dense.

Dimension key: B batch, H heads, T queries, S keys, Dh d_k, Dv d_v.
"""

import tracemalloc

import numpy as np
import pytest
from arrays import randn

from scratchformer.engine import backend as B
from scratchformer.engine import device
from scratchformer.engine.gradcheck import check_model, check_op, rel_error
from scratchformer.engine.models import Transformer, TransformerConfig
from scratchformer.engine.nn.attention import BlockwiseCache, MultiHeadAttention
from scratchformer.engine.nn.relative_attention import (
    RelativeMultiHeadAttention,
    SkewMultiHeadAttention,
)
from scratchformer.engine.ops import causal_mask

pytestmark = pytest.mark.usefixtures("backend")

Bsz, H, T, S, DH, DV = 2, 3, 13, 11, 5, 4


def attention(block=None, p_drop=0.0, cls=MultiHeadAttention, **kw):
    """A module's per-head attention as a forward/backward pair of (Q, K, V, mask):
    ``attend`` with query blocks of ``block`` (None: dense)."""
    m = cls(H * DH, H, d_k=DH, d_v=DV, P_drop_attn=p_drop, rng=B.host_rng(0), **kw)
    m.attention_block = block

    def forward(Q, K, V, mask=None, p_drop=0.0, rng=None):
        return m.attend(Q, K, V, mask, rng)

    return forward, m.attend_backward


def masks():
    """Name -> mask broadcastable to (B, H, T, S) (None: no mask)."""
    r = np.random.default_rng(7)
    pad = np.ones((Bsz, 1, 1, S), dtype=bool)
    pad[1, ..., 6:] = False  # a padded source row
    rand = r.random((Bsz, H, T, S)) > 0.5
    rand[0, 1, 3] = False  # fully masked rows: they must output zeros, not NaN
    rand[1, 2, 12] = False
    causal = np.asarray(B.asnumpy(causal_mask(T, S, offset=S - T)))  # (T, S)
    return {
        "none": None,
        "padding": pad,
        "causal": causal,
        "causal+padding": causal[None, None] & pad,
        "all-masked row": np.broadcast_to(pad, (Bsz, 1, T, S)) & ~(np.arange(T) == 4)[:, None],
        "random": rand,
    }


@pytest.mark.parametrize("block", [1, 4, 5, 13, 64])
@pytest.mark.parametrize("name", list(masks()))
def test_blockwise_equals_dense_values_and_gradients(f64, name, block):
    mask = masks()[name]
    mask = None if mask is None else B.asarray(mask)
    Q, K, V, dO = (
        randn(0, Bsz, H, T, DH),
        randn(1, Bsz, H, S, DH),
        randn(2, Bsz, H, S, DV),
        (randn(3, Bsz, H, T, DV)),
    )
    dense_f, dense_b = attention()
    block_f, block_b = attention(block)
    O_dense, c_dense = dense_f(Q, K, V, mask)
    O_block, c_block = block_f(Q, K, V, mask)
    assert isinstance(c_block, BlockwiseCache) == (block < T)
    assert O_block.dtype == np.float64
    assert np.isfinite(B.asnumpy(O_block)).all()
    np.testing.assert_allclose(B.asnumpy(O_block), B.asnumpy(O_dense), rtol=1e-12, atol=1e-13)
    for gd, gb in zip(dense_b(dO, c_dense), block_b(dO, c_block)):
        assert np.isfinite(B.asnumpy(gb)).all()
        assert rel_error(gb, gd) < 1e-12


@pytest.mark.parametrize(
    "cls, kw",
    [(RelativeMultiHeadAttention, {"max_relative_position": 3}),
     (SkewMultiHeadAttention, {"max_relative_position": 3, "causal": True})],
    ids=["shaw", "skew"],
)
def test_blockwise_serves_the_relative_variants(f64, cls, kw):
    """Shaw's and the skew's logits take their queries' positions (``offset``), so blocks
    of queries give their dense values and gradients, the relative tables' too."""
    L = 10
    mask = B.asarray(
        causal_mask(L)[None, None] if kw.get("causal") else masks()["padding"][..., :L]
    )
    Q, K, V, dO = (
        randn(0, Bsz, H, L, DH),
        randn(1, Bsz, H, L, DH),
        randn(2, Bsz, H, L, DV),
        randn(3, Bsz, H, L, DV),
    )
    results = []
    for block in (None, 3):
        m = cls(H * DH, H, d_k=DH, d_v=DV, rng=B.host_rng(0), **kw)
        m.attention_block = block
        O, cache = m.attend(Q, K, V, mask)
        grads = m.attend_backward(dO, cache)
        results.append(
            (O, *grads, *(m.grads[k].copy() for k in sorted(m.grads) if k.startswith("E")))
        )
    for got, want in zip(*results[::-1]):
        assert rel_error(got, want) < 1e-12


def test_fully_masked_rows_give_zero_output_and_gradient(f64):
    mask = np.ones((1, 1, 6, 5), dtype=bool)
    mask[..., 2, :] = False
    Q, K, V = randn(0, 1, 2, 6, 3), randn(1, 1, 2, 5, 3), randn(2, 1, 2, 5, 4)
    m = MultiHeadAttention(6, 2, d_k=3, d_v=4, rng=B.host_rng(0))
    m.attention_block = 4
    O, cache = m.attend(Q, K, V, B.asarray(mask))
    dQ, _, _ = m.attend_backward(randn(3, 1, 2, 6, 4), cache)
    assert np.all(B.asnumpy(O)[..., 2, :] == 0.0)
    assert np.all(B.asnumpy(dQ)[..., 2, :] == 0.0)


@pytest.mark.parametrize("name", ["causal+padding", "random"])
def test_blockwise_finite_differences_with_dropout(name):
    """Its own float64 check, attention dropout on: each block's mask is regenerated
    from the seed in backward (replayed by ``rng=<seed>``)."""
    mask = B.asarray(masks()[name])
    Q, K, V = randn(0, Bsz, H, T, DH), randn(1, Bsz, H, S, DH), randn(2, Bsz, H, S, DV)
    report = check_op(*attention(4, p_drop=0.3), Q, K, V, mask, p_drop=0.3, rng=5)
    assert report.passed, report.table()
    assert [r.name for r in report.rows] == ["Q", "K", "V"]


def test_a_bad_block_is_refused_where_it_enters():
    """The block size and the dropout probability are checked by the config, once."""
    with pytest.raises(ValueError, match="attention_block"):
        TransformerConfig.preset("tiny", vocab_size=20, attention_block=0)
    with pytest.raises(ValueError, match="P_drop_attn"):
        TransformerConfig.preset("tiny", vocab_size=20, P_drop_attn=1.0)


def _batch(vocab, seed=0):
    r = np.random.default_rng(seed)
    src = r.integers(3, vocab, (3, 9))
    src[1, 6:] = 0  # padding in the source
    tgt_in = r.integers(3, vocab, (3, 7))
    tgt_out = r.integers(3, vocab, (3, 7))
    tgt_in[2, 4:] = tgt_out[2, 4:] = 0
    return tuple(B.asarray(a) for a in (src, tgt_in, tgt_out))


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_model_with_attention_block_equals_dense_model(f64, norm):
    """Same loss and the same gradient for every parameter, dropout on (the residual
    dropout masks are drawn in the same order: attention dropout is 0)."""
    batch = _batch(23)
    grads = {}
    for block in (None, 3):
        cfg = TransformerConfig.preset("tiny", vocab_size=23, norm=norm, attention_block=block)
        m = Transformer(cfg)
        m.zero_grad()
        loss, cache = m.loss_forward(*batch, rng=device.generator(4))
        m.loss_backward(cache)
        grads[block] = (float(loss), {k: B.asnumpy(g).copy() for k, g in m.gradients().items()})
    assert grads[3][0] == pytest.approx(grads[None][0], rel=1e-12)
    for k, g in grads[None][1].items():
        assert rel_error(grads[3][1][k], g) < 1e-10, k


def test_model_with_attention_block_passes_gradient_check():
    cfg = TransformerConfig.preset("tiny", vocab_size=19, attention_block=2, P_drop_attn=0.2)
    report = check_model(Transformer(cfg), *_batch(19), rng=3, max_entries=6)
    assert report.passed, report.table()


def test_inference_paths_use_blocks_and_agree(f64):
    cfg = TransformerConfig.preset("tiny", vocab_size=23)
    dense = Transformer(cfg)
    blocked = Transformer(TransformerConfig.preset("tiny", vocab_size=23, attention_block=2))
    blocked.load_state_dict(dense.state_dict())
    src, tgt_in, _ = _batch(23)
    mem_d, mask = dense.encode_infer(src)
    mem_b, _ = blocked.encode_infer(src)
    np.testing.assert_allclose(B.asnumpy(mem_b), B.asnumpy(mem_d), rtol=1e-11, atol=1e-12)
    out_d = dense.decode_step(tgt_in, dense.init_kv(mem_d, mask))
    out_b = blocked.decode_step(tgt_in, blocked.init_kv(mem_b, mask))
    np.testing.assert_allclose(B.asnumpy(out_b), B.asnumpy(out_d), rtol=1e-10, atol=1e-11)


def _attention_peak(fn_f, fn_b, Q, K, V, mask, dO, **kw):
    tracemalloc.start()
    O, cache = fn_f(Q, K, V, mask, **kw)
    grads = fn_b(dO, cache)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    del O, cache, grads
    return peak


def test_attention_memory_at_2048_tokens_is_8x_below_dense(backend):
    """Peak memory of one attention forward + backward (causal, float32, B=1, H=2,
    T=S=2048, Dh=64, block 64): what NumPy allocates beyond the inputs. Memory is
    deterministic (not a timing), so this one is asserted."""
    if backend != "numpy":
        pytest.skip("tracemalloc sees NumPy allocations only")
    T2, H2 = 2048, 2
    r = np.random.default_rng(0)
    Q, K, V, dO = (r.standard_normal((1, H2, T2, 64), dtype=np.float32) for _ in range(4))
    mask = np.asarray(causal_mask(T2))
    m = MultiHeadAttention(128, H2, rng=B.host_rng(0))
    dense = _attention_peak(m.attend, m.attend_backward, Q, K, V, mask, dO)
    m.attention_block = 64
    block = _attention_peak(m.attend, m.attend_backward, Q, K, V, mask, dO)
    assert dense >= 8 * block, (dense / 2**20, block / 2**20)
