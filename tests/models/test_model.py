"""The model's configuration presets, parameter names, state dict and dtype policy.

No test here builds a base-sized model (too slow for the suite): presets are checked as
configurations, and models are built at tiny sizes.

Dimension key: B batch, S source length, T target length, D d_model, V vocabulary.
"""

import numpy as np
import pytest

from scratchformer.engine import backend as B
from scratchformer.engine import device
from scratchformer.engine.models import PRESETS, Transformer, TransformerConfig
from scratchformer.engine.ops.loss import cross_entropy

pytestmark = pytest.mark.usefixtures("backend")

V = 19


def batch():
    """src (2, 6), tgt_in (2, 4), tgt_out (2, 4) with padding (pad 0, bos 1, eos 2)."""
    src = np.array([[5, 6, 7, 8, 9, 10], [11, 12, 13, 0, 0, 0]])
    tgt_in = np.array([[1, 4, 5, 6], [1, 7, 0, 0]])
    tgt_out = np.array([[4, 5, 6, 2], [7, 2, 0, 0]])
    return B.asarray(src), B.asarray(tgt_in), B.asarray(tgt_out)


# -- presets: the paper's Table 3 --------------------------------------------------------------
PAPER_BASE = dict(N=6, d_model=512, d_ff=2048, h=8, P_drop=0.1, eps_ls=0.1)

TABLE_3 = {
    "base": {},
    "base-A1": dict(h=1, d_k=512, d_v=512),
    "base-A2": dict(h=4, d_k=128, d_v=128),
    "base-A3": dict(h=16, d_k=32, d_v=32),
    "base-A4": dict(h=32, d_k=16, d_v=16),
    "base-B1": dict(d_k=16),
    "base-B2": dict(d_k=32),
    "base-C1": dict(N=2),
    "base-C2": dict(N=4),
    "base-C3": dict(N=8),
    "base-C4": dict(d_model=256, d_k=32, d_v=32),
    "base-C5": dict(d_model=1024, d_k=128, d_v=128),
    "base-C6": dict(d_ff=1024),
    "base-C7": dict(d_ff=4096),
    "base-D1": dict(P_drop=0.0),
    "base-D2": dict(P_drop=0.2),
    "base-D3": dict(eps_ls=0.0),
    "base-D4": dict(eps_ls=0.2),
    "base-E": dict(positions="learned"),
}


def test_every_named_preset_exists():
    """tiny, small, base, big and the Table 3 rows base-A1 .. base-E are all defined."""
    assert {"tiny", "small", "base", "big"} | set(TABLE_3) <= set(PRESETS)


@pytest.mark.parametrize("name", sorted(TABLE_3))
def test_table3_rows_match_the_paper(name):
    """Each base-* preset is the base model with exactly that Table 3 row's changes."""
    cfg = TransformerConfig.preset(name, vocab_size=37000)
    expected = {**PAPER_BASE, "d_k": None, "d_v": None, "positions": "sinusoidal"}
    expected.update(TABLE_3[name])
    for key, value in expected.items():
        assert getattr(cfg, key) == value, f"{name}.{key}"
    # unchanged paper defaults
    assert (cfg.norm, cfg.share_embeddings, cfg.activation) == ("post", "all", "relu")
    assert cfg.P_drop_attn == 0.0 and cfg.P_drop_ffn == 0.0


def test_base_preset_is_the_paper_base_model():
    """base: N=6, d_model=512, d_ff=2048, h=8 (d_k = d_v = 64), P_drop=0.1, eps_ls=0.1."""
    cfg = TransformerConfig.preset("base", vocab_size=37000)
    assert (cfg.N, cfg.N_dec, cfg.d_model, cfg.d_ff, cfg.h) == (6, 6, 512, 2048, 8)
    assert cfg.d_model // cfg.h == 64
    assert (cfg.P_drop, cfg.eps_ls) == (0.1, 0.1)


def test_big_preset_is_the_paper_big_model():
    """big: N=6, d_model=1024, d_ff=4096, h=16, P_drop=0.3, eps_ls=0.1."""
    cfg = TransformerConfig.preset("big", vocab_size=37000)
    assert (cfg.N, cfg.d_model, cfg.d_ff, cfg.h) == (6, 1024, 4096, 16)
    assert (cfg.P_drop, cfg.eps_ls) == (0.3, 0.1)


def test_preset_overrides_and_round_trip():
    """preset(name, **overrides) applies the overrides; to_dict/from_dict round-trips."""
    cfg = TransformerConfig.preset("tiny", vocab_size=50, norm="pre", N=3)
    assert (cfg.vocab_size, cfg.norm, cfg.N, cfg.d_model) == (50, "pre", 3, 16)
    assert TransformerConfig.from_dict(cfg.to_dict()) == cfg


# -- parameter names (the docstring of scratchformer/engine/models/transformer.py) ---------
def expected_names(N, share, norm, positions):
    names = {"embed.E"}
    if share in ("decoder", "none"):
        names.add("src_embed.E")
    if share == "none":
        names.add("out_proj.W")
    attn = ["W_q", "W_k", "W_v", "W_o"]
    ffn = ["W_1", "b_1", "W_2", "b_2"]
    ln = ["gamma", "beta"]
    for i in range(N):
        e, d = f"encoder.layers.{i}", f"decoder.layers.{i}"
        names |= {f"{e}.self_attn.{w}" for w in attn} | {f"{d}.self_attn.{w}" for w in attn}
        names |= {f"{d}.cross_attn.{w}" for w in attn}
        names |= {f"{p}.ffn.{w}" for p in (e, d) for w in ffn}
        for sub in ("self_attn_norm", "ffn_norm"):
            names |= {f"{p}.{sub}.{g}" for p in (e, d) for g in ln}
        names |= {f"{d}.cross_attn_norm.{g}" for g in ln}
    if norm == "pre":
        names |= {f"{s}.norm.{g}" for s in ("encoder", "decoder") for g in ln}
    if positions == "learned":
        names |= {"encoder.pos.P", "decoder.pos.P"}
    return names


@pytest.mark.parametrize("share", ["all", "decoder", "none"])
@pytest.mark.parametrize("norm, positions", [("post", "sinusoidal"), ("pre", "learned")])
def test_parameter_names_match_the_docstring(share, norm, positions):
    """model.parameters() has exactly the documented names for each sharing mode."""
    cfg = TransformerConfig.preset(
        "tiny", vocab_size=V, share_embeddings=share, norm=norm, positions=positions
    )
    m = Transformer(cfg)
    assert set(m.parameters()) == expected_names(2, share, norm, positions)
    assert list(m.gradients()) == list(m.parameters())
    shapes = {k: tuple(p.shape) for k, p in m.parameters().items()}
    assert shapes["embed.E"] == (V, 16)
    if share == "none":
        assert shapes["out_proj.W"] == (16, V)
    if positions == "learned":
        assert shapes["encoder.pos.P"] == (64, 16)


def test_tied_embedding_is_one_array():
    """share_embeddings='all': source, target and output use one E, named once."""
    m = Transformer(TransformerConfig.preset("tiny", vocab_size=V))
    assert m.src_embed is m.embed
    assert "src_embed.E" not in m.parameters()
    n = sum(int(np.prod(p.shape)) for p in m.parameters().values())
    assert m.num_parameters() == n


# -- state dict ---------------------------------------------------------------------------------
@pytest.mark.parametrize("share", ["all", "none"])
def test_state_dict_round_trip_reproduces_logits(share):
    """Loading a state dict into a differently seeded model reproduces the logits exactly."""
    a = Transformer(TransformerConfig.preset("tiny", vocab_size=V, share_embeddings=share, seed=1))
    b = Transformer(TransformerConfig.preset("tiny", vocab_size=V, share_embeddings=share, seed=2))
    src, tgt_in, _ = batch()
    la = B.asnumpy(a.forward(src, tgt_in)[0])
    assert not np.allclose(la, B.asnumpy(b.forward(src, tgt_in)[0]))
    b.load_state_dict(a.state_dict())
    np.testing.assert_array_equal(B.asnumpy(b.forward(src, tgt_in)[0]), la)


def test_state_dict_holds_host_copies():
    """state_dict() returns NumPy copies: editing them does not change the model."""
    m = Transformer(TransformerConfig.preset("tiny", vocab_size=V))
    state = m.state_dict()
    assert all(type(v) is np.ndarray for v in state.values())
    before = B.asnumpy(m.parameters()["embed.E"]).copy()
    state["embed.E"] += 1.0
    np.testing.assert_array_equal(B.asnumpy(m.parameters()["embed.E"]), before)


def test_load_state_dict_writes_in_place():
    """Loading writes into the existing arrays (references held elsewhere stay valid)."""
    m = Transformer(TransformerConfig.preset("tiny", vocab_size=V))
    ref = m.parameters()["embed.E"]
    state = m.state_dict()
    state["embed.E"] = np.full_like(state["embed.E"], 0.5)
    m.load_state_dict(state)
    assert m.parameters()["embed.E"] is ref
    assert np.all(B.asnumpy(ref) == 0.5)


# -- dtype policy -------------------------------------------------------------------------------
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_float32_model_stays_float32(norm):
    """A float32 model (the default) gives float32 logits, loss, dlogits and gradients:
    no silent float64 upcast anywhere, with every dropout on."""
    cfg = TransformerConfig.preset(
        "tiny",
        vocab_size=V,
        norm=norm,
        positions="learned",
        share_embeddings="none",
        P_drop_attn=0.1,
        P_drop_ffn=0.1,
        activation="gelu",
    )
    m = Transformer(cfg)
    assert all(p.dtype == np.float32 for p in m.parameters().values())
    src, tgt_in, tgt_out = batch()
    logits, _ = m.forward(src, tgt_in)
    assert logits.dtype == np.float32
    loss, cache = m.loss_forward(src, tgt_in, tgt_out, rng=device.generator(0))
    assert loss.dtype == np.float32
    _, c_loss = cross_entropy.forward(logits, tgt_out, 0.1, 0)  # not donated
    assert cross_entropy.backward(1.0, c_loss).dtype == np.float32
    m.loss_backward(cache)
    bad = {k: g.dtype for k, g in m.gradients().items() if g.dtype != np.float32}
    assert not bad, f"gradients upcast: {bad}"
    assert all(p.dtype == np.float32 for p in m.parameters().values())


def test_float32_sinusoidal_model_keeps_table_float32():
    """The sinusoid table is built in the model's dtype, so x + PE stays float32."""
    m = Transformer(TransformerConfig.preset("tiny", vocab_size=V))
    assert m.encoder.pos.table.dtype == np.float32
    assert m.decoder.pos.table.dtype == np.float32


def test_float64_model_under_precision_context():
    """Built inside precision('float64'), parameters and logits are float64."""
    with B.precision("float64"):
        m = Transformer(TransformerConfig.preset("tiny", vocab_size=V))
    src, tgt_in, _ = batch()
    assert m.forward(src, tgt_in)[0].dtype == np.float64
    assert all(p.dtype == np.float64 for p in m.parameters().values())


def test_initialisation_is_seeded():
    """The same config (seed) gives the same parameters; another seed different ones."""
    make = lambda seed: Transformer(TransformerConfig.preset("tiny", vocab_size=V, seed=seed))  # noqa: E731
    a, b, c = make(3).state_dict(), make(3).state_dict(), make(4).state_dict()
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["embed.E"], c["embed.E"])


def test_evaluation_is_deterministic_and_dropout_needs_a_generator():
    """Without a generator forward is deterministic; with one, dropout changes the logits."""
    m = Transformer(TransformerConfig.preset("tiny", vocab_size=V))
    src, tgt_in, _ = batch()
    a = B.asnumpy(m.forward(src, tgt_in)[0])
    np.testing.assert_array_equal(B.asnumpy(m.forward(src, tgt_in)[0]), a)
    train = B.asnumpy(m.forward(src, tgt_in, rng=device.generator(0))[0])
    assert not np.allclose(train, a)
    np.testing.assert_array_equal(
        B.asnumpy(m.forward(src, tgt_in, rng=device.generator(0))[0]), train
    )
