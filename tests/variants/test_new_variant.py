"""A new attention variant is one logits function and one class: here an ALiBi-like one
(Press et al., 2022: a per-head linear penalty on the distance, no position embeddings
needed), defined in this file alone. Registered, it is a value of
``TransformerConfig.attention``: it trains, passes the gradient check, and decodes at
every offset equal to its full forward, with nothing else of the package changed.

Dimension key: B batch, H heads, T queries, S keys, Dh d_k, V vocabulary.
"""

import math
from typing import NamedTuple

import numpy as np
import pytest

from scratchformer.engine import backend as B
from scratchformer.engine import device
from scratchformer.engine.backend import xp
from scratchformer.engine.gradcheck import check_model, check_module
from scratchformer.engine.models import LanguageModel, Transformer, TransformerConfig
from scratchformer.engine.nn import ATTENTION_VARIANTS, MultiHeadAttention
from scratchformer.engine.optim import Adam

pytestmark = pytest.mark.usefixtures("backend")


# -- the variant: one logits function (a forward/backward pair) ... ----------------------------
class AlibiLogitsCache(NamedTuple):
    Q: object  # (B, H, T, Dh)
    K: object  # (B, H, S, Dh)
    scale: float  # 1 / sqrt(Dh)


def alibi_logits_forward(Q, K, offset: int = 0):
    """``Z = s Q K^T - m_h |p_i - j|``, ``m_h = 2^(-8 (h+1) / H)``, ``p_i = offset + i``:
    Q (B, H, T, Dh), K (B, H, S, Dh)  ->  Z (B, H, T, S). The penalty is a constant."""
    H, T, S = Q.shape[1], Q.shape[-2], K.shape[-2]
    scale = 1.0 / math.sqrt(Q.shape[-1])
    slopes = 2.0 ** (-8.0 * xp.arange(1, H + 1) / H)  # (H,)
    distance = xp.abs(xp.arange(T)[:, None] + offset - xp.arange(S)[None, :])  # (T, S)
    Z = Q @ K.swapaxes(-1, -2) * scale - (slopes[:, None, None] * distance).astype(Q.dtype)
    return Z, AlibiLogitsCache(Q, K, scale)


def alibi_logits_backward(dZ, cache: AlibiLogitsCache):
    """The penalty has no gradient: ``dQ = s dZ K``, ``dK = s dZ^T Q``."""
    dZ = dZ * cache.scale
    return dZ @ cache.K, dZ.swapaxes(-1, -2) @ cache.Q


# -- ... and one class --------------------------------------------------------------------------
class AlibiAttention(MultiHeadAttention):
    kind = "alibi"

    def logits(self, Q, K, offset: int = 0):
        return alibi_logits_forward(Q, K, offset)

    def logits_backward(self, dZ, cache):
        return alibi_logits_backward(dZ, cache)


@pytest.fixture(autouse=True)
def registered():
    """The variant is registered for these tests only (as a user's own code would
    register it with ``@register_attention``)."""
    ATTENTION_VARIANTS[AlibiAttention.kind] = AlibiAttention
    yield
    del ATTENTION_VARIANTS[AlibiAttention.kind]


V = 13


def config(**kw):
    return TransformerConfig.preset("tiny", vocab_size=V, attention="alibi", **kw)


def test_it_is_a_value_of_the_config_and_builds_every_model():
    m = Transformer(config())
    assert isinstance(m.encoder.layers[0].self_attn, AlibiAttention)
    assert isinstance(m.decoder.layers[0].self_attn, AlibiAttention)
    assert type(m.decoder.layers[0].cross_attn).kind == "dense"
    assert isinstance(LanguageModel(config()).decoder.layers[1].self_attn, AlibiAttention)


@pytest.mark.slow
def test_it_passes_the_gradient_check(f64):
    """The module (inputs, W_q W_k W_v W_o, attention dropout replayed) and a whole
    encoder-decoder with the variant in both stacks, every parameter."""
    r = np.random.default_rng(0)
    m = AlibiAttention(12, 3, d_k=5, d_v=4, P_drop_attn=0.2, causal=True)
    x_q, x_kv = (B.asarray(r.standard_normal((2, 6, 12))) for _ in range(2))
    rep = check_module(m, x_q, x_kv, None, rng=3)
    assert rep.passed, rep.table()
    src = B.asarray(np.array([[5, 6, 7, 0], [8, 9, 10, 11]]))
    tgt_in = B.asarray(np.array([[1, 12, 4, 5], [1, 4, 0, 0]]))
    tgt_out = B.asarray(np.array([[12, 4, 5, 2], [4, 2, 0, 0]]))
    rep = check_model(Transformer(config(P_drop_attn=0.1)), src, tgt_in, tgt_out, rng=5)
    assert rep.passed, rep.table()


def test_it_decodes_at_every_offset_equal_to_its_full_forward():
    """A language model: a prefix of 3, then one token at a time through the key/value
    cache, every step's logits equal to the whole sequence's forward."""
    with B.precision("float64"):
        lm = LanguageModel(config(norm="pre"))
        ids = B.asarray(np.random.default_rng(1).integers(3, V, (2, 10)))
        full = B.asnumpy(lm.forward(ids)[0])
        kv = lm.init_kv(2)
        steps = [lm.decode_step(ids[:, :3], kv)]
        steps += [lm.decode_step(ids[:, t : t + 1], kv) for t in range(3, 10)]
    np.testing.assert_allclose(np.concatenate([B.asnumpy(s) for s in steps], 1), full, atol=1e-10)


def test_it_trains():
    """Adam on a copy task: the label-smoothed loss falls below a third of its start."""
    r = np.random.default_rng(2)
    seqs = r.integers(3, V, (16, 6))
    src = B.asarray(seqs)
    tgt_in = B.asarray(np.concatenate([np.ones((16, 1), int), seqs], 1))
    tgt_out = B.asarray(np.concatenate([seqs, np.full((16, 1), 2)], 1))
    m = Transformer(config(eps_ls=0.0, P_drop=0.0))
    opt = Adam(m.flatten())
    losses = []
    for step in range(150):
        m.zero_grad()
        loss, cache = m.loss_forward(src, tgt_in, tgt_out, rng=device.generator(step))
        m.loss_backward(cache)
        opt.step(3e-3)
        losses.append(float(loss))
    assert losses[-1] < losses[0] / 3, losses[::25]


def test_the_trainer_runs_it_from_the_config(tmp_path, capsys):
    """``--set model.attention=alibi`` through the one training loop: trains, saves,
    averages, reloads the checkpoints and judges the test set."""
    from task_data import TINY_RUN

    from scratchformer.app.cli import main

    argv = ["train", *TINY_RUN, "--set", "model.attention=alibi", "--steps", "12"]
    assert main([*argv, "--run-dir", str(tmp_path / "run"), "--checkpoint-every", "2"]) == 0
    out = capsys.readouterr().out
    assert "alibi" in (tmp_path / "run" / "config.json").read_text()
    assert "exact match" in out and "average of 2 checkpoints (10, 12)" in out
