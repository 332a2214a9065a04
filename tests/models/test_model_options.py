"""Behaviour of the model options GPT-2 (and Marian) need, beside their gradient checks
(tests/models/test_model_gradients.py, tests/nn, tests/ops): attention biases, unscaled
embeddings, and padding that is no token of the vocabulary (``pad_id = vocab_size``).

The defaults leave every model as it was (benchmarks/seam_equality.py shows it bit for
bit); here: what each option changes, and what it must not.
"""

import numpy as np
import pytest

from scratchformer.engine import backend as B
from scratchformer.engine.decode.sample import generate
from scratchformer.engine.errors import TokenError
from scratchformer.engine.models import LanguageModel, TransformerConfig
from scratchformer.engine.ops.loss import cross_entropy

pytestmark = pytest.mark.usefixtures("backend")

V = 13
EOT = V - 1  # <|endoftext|>: <bos> and <eos>


def gpt2_like(**overrides):
    kw = dict(vocab_size=V, N=2, norm="pre", positions="learned", activation="gelu",
              attention_bias=True, scale_embedding=False, pad_id=V, bos_id=EOT, eos_id=EOT,
              P_drop=0.0, eps_ls=0.0)
    m = LanguageModel(TransformerConfig.preset("tiny", **{**kw, **overrides}))
    r = np.random.default_rng(2)
    for name, p in m.parameters().items():
        if ".b_" in name:
            p[...] = B.asarray(0.3 * r.standard_normal(p.shape))
    return m


def logits_of(m, ids):
    return B.asnumpy(m.forward(B.asarray(np.asarray(ids)))[0]).astype(np.float64)


def test_padding_outside_the_vocabulary_changes_no_real_logit():
    """Rows padded with pad_id = V give the logits of the same rows alone, at every real
    position (the padding is masked, and embeds to zero)."""
    m = gpt2_like()
    rows = [[EOT, 3, 5, 7, 2], [EOT, 4, EOT, 1]]
    padded = np.full((2, 7), V)
    for b, r in enumerate(rows):
        padded[b, : len(r)] = r
    out = logits_of(m, padded)
    for b, r in enumerate(rows):
        np.testing.assert_allclose(out[b, : len(r)], logits_of(m, [r])[0], rtol=1e-5, atol=1e-6)


def test_endoftext_inside_a_row_is_a_real_token():
    """<|endoftext|> is both <bos> and <eos> and a token like any: it is attended to, its
    target counts in the loss (the padding id does not)."""
    m = gpt2_like()
    ids = B.asarray(np.array([[EOT, 3, EOT, 4, V]]))
    targets = B.asarray(np.array([[3, EOT, 4, EOT, V]]))
    _, cache = m.loss_forward(ids, targets)
    assert int(cross_entropy.read(cache.loss, "n_tokens")) == 4
    other = logits_of(m, [[3, 3, EOT, 4]])  # a different first token changes what follows
    assert not np.allclose(logits_of(m, [[EOT, 3, EOT, 4]])[0, 1:], other[0, 1:])


def test_the_keys_bias_changes_nothing():
    """b_k adds q.b_k to every logit of a query's row: the softmax does not see it, so the
    output is the same whatever b_k is (to rounding), and its gradient is zero."""
    m = gpt2_like()
    ids = [[EOT, 3, 5, 7, 2, 9]]
    before = logits_of(m, ids)
    for i in range(2):
        m.parameters()[f"decoder.layers.{i}.self_attn.b_k"][...] = 5.0
    np.testing.assert_allclose(logits_of(m, ids), before, rtol=1e-5, atol=1e-5)


def test_unscaled_embeddings_enter_as_they_are():
    """scale_embedding=False: the first layer sees E[x] + P, not E[x] sqrt(D) + P."""
    scaled, plain = gpt2_like(scale_embedding=True), gpt2_like()
    assert scaled.embed.scale == pytest.approx(16**0.5) and plain.embed.scale == 1.0
    plain.load_state_dict(scaled.state_dict())
    assert not np.allclose(logits_of(scaled, [[EOT, 3]]), logits_of(plain, [[EOT, 3]]))


def test_cached_decoding_equals_the_forward_and_causality():
    m = gpt2_like()
    ids = np.array([[EOT, 3, 5, 7, 2, 9]])
    full = logits_of(m, ids)
    kv = m.init_kv(1)
    steps = [B.asnumpy(m.decode_step(B.asarray(ids[:, t : t + 1]), kv))[0, 0] for t in range(6)]
    np.testing.assert_allclose(np.stack(steps), full[0], rtol=1e-5, atol=1e-6)
    changed = ids.copy()
    changed[0, 4] = 1
    np.testing.assert_allclose(logits_of(m, changed)[0, :4], full[0, :4], rtol=1e-6, atol=1e-7)


def test_sampling_ends_at_endoftext_and_never_draws_the_padding():
    """<bos> = <eos>: drawing it ends the sample (greedy stops where the argmax is
    <|endoftext|>); the padding id has no logit to draw."""
    m = gpt2_like()
    E = B.asnumpy(m.parameters()["embed.E"])
    # push the last hidden state towards E[EOT]: greedy then draws <|endoftext|> at once
    m.parameters()["decoder.norm.beta"][...] = B.asarray(10.0 * E[EOT])
    assert generate(m, [EOT, 3], max_new_tokens=5, temperature=0) == [[]]
    samples = generate(m, [EOT], max_new_tokens=4, temperature=1.0, seed=3, num_samples=4)
    assert all(all(0 <= t < V for t in s) for s in samples)


def test_ids_may_hold_the_padding_id_but_nothing_beyond():
    m = gpt2_like()
    m.forward(B.asarray(np.array([[EOT, V]])))
    with pytest.raises(TokenError, match="token id 14"):
        m.forward(B.asarray(np.array([[EOT, V + 1]])))
    with pytest.raises(TokenError):
        m.decode_step(B.asarray(np.array([[V]])), m.init_kv(1))
