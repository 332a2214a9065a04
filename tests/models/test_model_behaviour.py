"""Behaviour of the whole model: causality, padding invariance, tied-weight gradients.

All in float64, so "unchanged" means equal to 1e-12 (causality) or 1e-10 (padding,
where sums run over a different number of exact zeros).

Dimension key: B batch, S source length, T target length, D d_model, V vocabulary.
"""

import numpy as np
import pytest

from scratchformer.engine import backend as B
from scratchformer.engine import device
from scratchformer.engine.models import Transformer, TransformerConfig

pytestmark = pytest.mark.usefixtures("backend", "f64")

V = 17
PAD, BOS, EOS = 0, 1, 2


def model(**overrides):
    kw = dict(vocab_size=V, N=2)
    kw.update(overrides)
    return Transformer(TransformerConfig.preset("tiny", **kw))


def ids(rows, width=None):
    """Pad each row of ids to ``width`` (default: the longest) -> (B, L) on the backend."""
    width = width or max(len(r) for r in rows)
    out = np.full((len(rows), width), PAD, dtype=np.int64)
    for b, r in enumerate(rows):
        out[b, : len(r)] = r
    return B.asarray(out)


SRC = [[5, 9, 3, 12, 7, 4, 16], [8, 6, 11, 3, 9]]  # S = 7 with a padded row
TGT_IN = [[BOS, 4, 8, 15, 6], [BOS, 13, 3]]  # T = 5 with a padded row


def logits_of(m, src, tgt_in):
    return B.asnumpy(m.forward(src, tgt_in)[0])


# -- (g) causality -----------------------------------------------------------------------
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_decoder_is_causal(norm):
    """Bug (g): a decoder that leaked future tokens. Changing target inputs t+1 .. T-1
    leaves the logits at positions <= t unchanged (to 1e-12), and does change later ones."""
    m = model(norm=norm)
    src = ids(SRC)
    tgt = B.asnumpy(ids([[BOS, 4, 8, 15, 6, 10], [BOS, 13, 3, 7, 9, 12]]))
    base = logits_of(m, src, B.asarray(tgt))
    r = np.random.default_rng(0)
    T = tgt.shape[1]
    for t in range(T - 1):
        changed = tgt.copy()
        shift = r.integers(1, V - 3, (2, T - t - 1))  # a different real token, ids 3 .. V-1
        changed[:, t + 1 :] = (tgt[:, t + 1 :] - 3 + shift) % (V - 3) + 3
        assert np.all(changed[:, t + 1 :] != tgt[:, t + 1 :])
        out = logits_of(m, src, B.asarray(changed))
        np.testing.assert_allclose(out[:, : t + 1], base[:, : t + 1], rtol=0, atol=1e-12)
        assert np.abs(out[:, t + 1 :] - base[:, t + 1 :]).max() > 1e-6, "setup not sensitive"


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_decoder_is_causal_with_dropout_replayed(norm):
    """Causality also holds in training mode (same dropout seed for both runs)."""
    m = model(norm=norm, P_drop_attn=0.1)
    src = ids(SRC)
    tgt = B.asnumpy(ids(TGT_IN))
    changed = tgt.copy()
    changed[:, 3:] = np.where(tgt[:, 3:] == PAD, PAD, 14)
    a = B.asnumpy(m.forward(src, B.asarray(tgt), rng=device.generator(3))[0])
    b = B.asnumpy(m.forward(src, B.asarray(changed), rng=device.generator(3))[0])
    np.testing.assert_allclose(b[:, :3], a[:, :3], rtol=0, atol=1e-12)


# -- padding invariance ------------------------------------------------------------------
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_extra_source_padding_changes_no_logit(norm):
    """Adding pad columns to the source changes no logit (pad keys are masked exactly)."""
    m = model(norm=norm)
    base = logits_of(m, ids(SRC), ids(TGT_IN))
    padded = logits_of(m, ids(SRC, width=11), ids(TGT_IN))
    np.testing.assert_allclose(padded, base, rtol=0, atol=1e-10)


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_extra_target_padding_leaves_real_logits_unchanged(norm):
    """Adding pad columns to the decoder input leaves the logits at real positions as they
    were."""
    m = model(norm=norm, positions="learned")
    base = logits_of(m, ids(SRC), ids(TGT_IN))
    padded = logits_of(m, ids(SRC), ids(TGT_IN, width=8))
    np.testing.assert_allclose(padded[:, :5], base, rtol=0, atol=1e-10)


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_logits_do_not_depend_on_batch_neighbours(norm):
    """A sentence translated alone (no padding) equals the same sentence padded in a batch
    with a longer one, at its real target positions."""
    m = model(norm=norm)
    batch = logits_of(m, ids(SRC), ids(TGT_IN))
    alone = logits_of(m, ids(SRC[1:]), ids(TGT_IN[1:]))
    np.testing.assert_allclose(batch[1:, :3], alone, rtol=0, atol=1e-10)


def test_padding_affects_loss_only_through_real_tokens():
    """Extra padding in source and target leaves the loss (mean over real tokens) unchanged."""
    m = model()
    tgt_out = [[4, 8, 15, 6, EOS], [13, 3, EOS]]
    a = float(m.loss_forward(ids(SRC), ids(TGT_IN), ids(tgt_out))[0])
    b = float(m.loss_forward(ids(SRC, 10), ids(TGT_IN, 7), ids(tgt_out, 7))[0])
    assert b == pytest.approx(a, abs=1e-12)


# -- (f) tied output projection ------------------------------------------------------------
def untied_copy(tied, share):
    """A model with share_embeddings=``share`` holding the tied model's weights in every
    slot: src_embed.E and embed.E = E, out_proj.W = E^T (D, V)."""
    cfg = TransformerConfig(**{**tied.config.to_dict(), "share_embeddings": share})
    untied = Transformer(cfg)
    state = tied.state_dict()
    E = state["embed.E"]
    state["src_embed.E"] = E.copy()
    if share == "none":
        state["out_proj.W"] = E.T.copy()
    untied.load_state_dict(state)
    return untied


def grads_of_loss(m, src, tgt_in, tgt_out):
    m.zero_grad()
    loss, cache = m.loss_forward(src, tgt_in, tgt_out)
    m.loss_backward(cache)
    return float(loss), {k: B.asnumpy(g).copy() for k, g in m.gradients().items()}


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_tied_embedding_gradient_is_sum_of_its_three_uses(norm):
    """Bug (f): the tied output projection's gradient never reached the embedding.

    An untied model with the same weights in src_embed.E, embed.E and out_proj.W = E^T
    computes the same loss; the tied dE equals the sum of the three untied gradients,
    and each of the three contributions is non-zero (dropping one would fail)."""
    tied = model(norm=norm)
    untied = untied_copy(tied, "none")
    batch = ids(SRC), ids(TGT_IN), ids([[4, 8, 15, 6, EOS], [13, 3, EOS]])
    loss_t, g_t = grads_of_loss(tied, *batch)
    loss_u, g_u = grads_of_loss(untied, *batch)
    assert loss_u == pytest.approx(loss_t, abs=1e-12)
    parts = [g_u["src_embed.E"], g_u["embed.E"], g_u["out_proj.W"].T]
    np.testing.assert_allclose(g_t["embed.E"], sum(parts), rtol=1e-10, atol=1e-13)
    scale = np.abs(g_t["embed.E"]).max()
    for part in parts:
        assert np.abs(part).max() > 1e-3 * scale, "every use must contribute"
    # and every other parameter's gradient is the same in both models
    for name, g in g_t.items():
        if name != "embed.E":
            np.testing.assert_allclose(g, g_u[name], rtol=1e-10, atol=1e-13)


def test_decoder_tied_embedding_gradient_is_sum_of_lookup_and_projection():
    """share_embeddings='decoder': embed.E's gradient = target lookup + output projection."""
    tied = model(share_embeddings="decoder")
    untied = untied_copy(tied, "none")
    untied.load_state_dict({**untied.state_dict(), "src_embed.E": tied.state_dict()["src_embed.E"]})
    batch = ids(SRC), ids(TGT_IN), ids([[4, 8, 15, 6, EOS], [13, 3, EOS]])
    _, g_t = grads_of_loss(tied, *batch)
    _, g_u = grads_of_loss(untied, *batch)
    np.testing.assert_allclose(
        g_t["embed.E"], g_u["embed.E"] + g_u["out_proj.W"].T, rtol=1e-10, atol=1e-13
    )
    np.testing.assert_allclose(g_t["src_embed.E"], g_u["src_embed.E"], rtol=1e-10, atol=1e-13)


def test_embeddings_are_scaled_by_sqrt_d_model():
    """The paper multiplies embeddings by sqrt(d_model); the output projection is unscaled."""
    m = model()
    assert m.embed.scale == pytest.approx(16**0.5)
    assert m.src_embed is m.embed
    assert m.out_proj is None
