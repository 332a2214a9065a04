"""Bad input fails at the boundary with an error that names the problem.

Every input error is a ``scratchformer.engine.errors.ScratchformerError`` subclass (itself a
ValueError); invalid configurations raise ValueError. Each test asserts on a phrase of
the message, so a NumPy broadcasting traceback from deep inside would not pass.

Dimension key: B batch, S source length, T target length, V vocabulary.
"""

import re

import numpy as np
import pytest

from scratchformer.engine import backend as B
from scratchformer.engine.errors import (
    ScratchformerError,
    SequenceTooLongError,
    ShapeError,
    StateDictError,
    TokenError,
)
from scratchformer.engine.models import LanguageModel, Transformer, TransformerConfig
from scratchformer.engine.models.classifier import EncoderClassifier
from scratchformer.engine.nn import Dropout, PositionwiseFeedForward

pytestmark = pytest.mark.usefixtures("backend")

V, MAX_LEN = 13, 8


@pytest.fixture
def model():
    return Transformer(TransformerConfig.preset("tiny", vocab_size=V, max_len=MAX_LEN))


def arr(x, dtype=np.int64):
    return B.asarray(np.array(x, dtype=dtype))


SRC = [[5, 6, 7, 8, 9], [4, 5, 6, 0, 0]]  # (B=2, S=5)
TGT_IN = [[1, 4, 5], [1, 7, 0]]  # (B=2, T=3)
TGT_OUT = [[4, 5, 2], [7, 2, 0]]


def test_error_classes_form_one_hierarchy():
    """Every input error can be caught as ScratchformerError, and as ValueError."""
    for cls in (ShapeError, TokenError, SequenceTooLongError, StateDictError):
        assert issubclass(cls, ScratchformerError) and issubclass(cls, ValueError)


# -- shapes -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "src, match",
    [
        ([5, 6, 7], r"src must have shape \(B, S\) \(rank 2\), got \(3,\)"),
        ([[[5, 6, 7]]], r"src must have shape \(B, S\)"),
    ],
    ids=["rank1", "rank3"],
)
def test_src_of_wrong_rank(model, src, match):
    """src must be (B, S): a rank-1 or rank-3 array is a ShapeError naming src."""
    with pytest.raises(ShapeError, match=match):
        model.forward(arr(src), arr(TGT_IN))


def test_tgt_in_of_wrong_rank(model):
    """tgt_in must be (B, T)."""
    with pytest.raises(ShapeError, match=r"tgt_in must have shape \(B, T\)"):
        model.forward(arr(SRC), arr([1, 4, 5]))


def test_tgt_out_of_wrong_rank(model):
    """tgt_out must be (B, T)."""
    with pytest.raises(ShapeError, match=r"tgt_out must have shape \(B, T\)"):
        model.loss_forward(arr(SRC), arr(TGT_IN), arr([4, 5, 2]))


def test_tgt_out_of_other_shape_than_tgt_in(model):
    """tgt_out must have the shape of tgt_in (targets shifted by one, same length)."""
    with pytest.raises(ShapeError, match=r"tgt_out \(2, 2\) must have the shape of tgt_in"):
        model.loss_forward(arr(SRC), arr(TGT_IN), arr([[4, 5], [7, 2]]))


def test_batch_size_mismatch(model):
    """src and tgt_in with different batch sizes are rejected, naming both sizes."""
    with pytest.raises(ShapeError, match="src and tgt_in disagree on batch size: 2 vs 1"):
        model.forward(arr(SRC), arr([[1, 4, 5]]))


def test_empty_sequence(model):
    """A length-0 source is an error, not an empty attention."""
    with pytest.raises(ShapeError, match="src is empty"):
        model.forward(B.asarray(np.zeros((2, 0), dtype=np.int64)), arr(TGT_IN))


def test_non_array_input(model):
    """A Python list instead of an array is named, not an AttributeError."""
    with pytest.raises(ShapeError, match="src must have shape"):
        model.forward(SRC, arr(TGT_IN))


# -- token ids ----------------------------------------------------------------------------
def test_token_id_out_of_range(model):
    """An id >= V is a TokenError giving the id and the vocabulary size."""
    with pytest.raises(TokenError, match=r"src holds token id 13, out of range .* 13"):
        model.forward(arr([[5, 13, 7], [4, 5, 6]]), arr(TGT_IN))


def test_negative_token_id(model):
    """A negative id is a TokenError (NumPy would silently index from the end)."""
    with pytest.raises(TokenError, match=r"tgt_in holds a negative token id \(-1\)"):
        model.forward(arr(SRC), arr([[1, -1, 5], [1, 7, 0]]))


def test_float_token_ids(model):
    """Float ids are a TokenError naming the dtype."""
    with pytest.raises(TokenError, match="src must hold integer token ids, got dtype float"):
        model.forward(arr(SRC, np.float64), arr(TGT_IN))


def test_target_id_out_of_range(model):
    """tgt_out ids are checked too."""
    with pytest.raises(TokenError, match="tgt_out holds token id 20"):
        model.loss_forward(arr(SRC), arr(TGT_IN), arr([[4, 5, 20], [7, 2, 0]]))


def test_source_id_out_of_separate_source_vocabulary():
    """With a separate source vocabulary, src ids are checked against its size."""
    cfg = TransformerConfig.preset("tiny", vocab_size=V, share_embeddings="none", src_vocab_size=6)
    m = Transformer(cfg)
    with pytest.raises(
        TokenError, match="src holds token id 9, out of range for a vocabulary of 6"
    ):
        m.forward(arr(SRC), arr(TGT_IN))


# -- length --------------------------------------------------------------------------------
@pytest.mark.parametrize("which", ["src", "tgt_in"])
def test_sequence_longer_than_max_len(model, which):
    """A sequence longer than config.max_len is a SequenceTooLongError naming max_len."""
    long = arr([list(range(3, 3 + MAX_LEN + 1))] * 2)
    src, tgt_in = (long, arr(TGT_IN)) if which == "src" else (arr(SRC), long)
    with pytest.raises(SequenceTooLongError, match=rf"{which} has length 9, .*max_len"):
        model.forward(src, tgt_in)


def test_sequence_of_exactly_max_len_is_fine(model):
    """max_len itself is allowed."""
    full = arr([list(range(3, 3 + MAX_LEN))] * 2)
    logits, _ = model.forward(full, full)
    assert logits.shape == (2, MAX_LEN, V)


# -- state dict ----------------------------------------------------------------------------
def test_load_state_dict_missing_key(model):
    """A missing parameter is named."""
    state = model.state_dict()
    del state["decoder.layers.1.ffn.W_2"]
    with pytest.raises(StateDictError, match=r"missing keys \['decoder.layers.1.ffn.W_2'\]"):
        model.load_state_dict(state)


def test_load_state_dict_unexpected_key(model):
    """An extra entry (e.g. from an untied model) is named."""
    state = model.state_dict()
    state["out_proj.W"] = np.zeros((16, V))
    with pytest.raises(StateDictError, match=r"unexpected keys \['out_proj.W'\]"):
        model.load_state_dict(state)


def test_load_state_dict_wrong_shape_changes_nothing(model):
    """A mis-shaped entry names the key and both shapes, and nothing is written."""
    before = model.state_dict()
    state = model.state_dict()
    state["embed.E"] = np.zeros((V + 1, 16))
    state["encoder.layers.0.ffn.b_1"] = np.ones(32)  # a valid entry that must not be written
    with pytest.raises(StateDictError, match=r"embed.E: model \(13, 16\) vs state \(14, 16\)"):
        model.load_state_dict(state)
    after = model.state_dict()
    assert all(np.array_equal(before[k], after[k]) for k in before)


def test_load_state_dict_non_strict_allows_missing_keys(model):
    """strict=False loads what is there (shapes still checked)."""
    state = {"embed.E": np.full((V, 16), 0.25)}
    model.load_state_dict(state, strict=False)
    assert np.all(B.asnumpy(model.parameters()["embed.E"]) == 0.25)
    with pytest.raises(StateDictError, match="shapes do not match"):
        model.load_state_dict({"embed.E": np.zeros((2, 2))}, strict=False)


# -- configuration ---------------------------------------------------------------------------
CONFIG_ERRORS = [
    (dict(vocab_size=1), "vocab_size must be >= 2"),
    (dict(N_dec=0), "N_dec >= 1"),
    (dict(d_model=0), "d_model, d_ff and h must be positive"),
    (dict(h=3), "d_model=16 not divisible by h=3"),
    (dict(P_drop=1.0), r"P_drop must be in \[0, 1\)"),
    (dict(P_drop_attn=-0.1), r"P_drop_attn must be in \[0, 1\)"),
    (dict(eps_ls=1.0), r"eps_ls must be in \[0, 1\)"),
    (dict(positions="rotary"), "positions='rotary'"),
    (dict(norm="sandwich"), "norm='sandwich': expected 'post' or 'pre'"),
    (dict(share_embeddings="encoder"), "share_embeddings='encoder'"),
    (dict(activation="tanh"), "activation='tanh'"),
    (dict(pad_id=14), "pad_id=14 is outside the vocabulary of 13"),
    (dict(eos_id=-1), "eos_id=-1 is outside the vocabulary"),
    (dict(max_len=0), "max_len must be >= 1"),
    (dict(src_vocab_size=7), "src_vocab_size needs share_embeddings"),
    # d_k = 0 is silently replaced by d_model / h, d_k < 0 fails later inside NumPy
    (dict(d_k=0), "d_k"),
    (dict(d_k=-4), "d_k"),
    (dict(d_v=0), "d_v"),
    # the source is padded with pad_id too: it must be inside the source vocabulary
    (dict(share_embeddings="none", src_vocab_size=4, pad_id=5), "pad_id"),
]


@pytest.mark.parametrize(
    "overrides, match",
    [pytest.param(o, m, id=",".join(f"{k}={v}" for k, v in o.items())) for o, m in CONFIG_ERRORS],
)
def test_invalid_config_values(overrides, match):
    """Each invalid configuration value is a ValueError whose message names it."""
    with pytest.raises(ValueError, match=match):
        TransformerConfig.preset("tiny", **{"vocab_size": V, **overrides})


def test_padding_outside_the_vocabulary_is_for_the_language_model_only(backend):
    """``pad_id = vocab_size`` (padding that is no token, GPT-2's) builds a language
    model; the encoder-decoder and the classifier refuse it in one line."""
    cfg = TransformerConfig.preset("tiny", vocab_size=V, pad_id=V)
    assert cfg.pad_outside
    LanguageModel(cfg)
    for cls in (Transformer, EncoderClassifier):
        with pytest.raises(ValueError, match="pad_id = vocab_size .* is for the decoder-only"):
            cls(cfg, *(() if cls is Transformer else (3,)))


def test_unknown_preset_and_unknown_keys():
    """An unknown preset name or config key is a ValueError naming it."""
    with pytest.raises(ValueError, match="unknown preset 'huge'"):
        TransformerConfig.preset("huge", vocab_size=V)
    with pytest.raises(ValueError, match=r"unknown config keys \['d_modle'\]"):
        TransformerConfig.from_dict({"vocab_size": V, "d_modle": 8})


def test_invalid_module_arguments():
    """Modules reject a dropout probability outside [0, 1) and an unknown activation."""
    with pytest.raises(ValueError, match=r"dropout probability must be in \[0, 1\)"):
        Dropout(1.0)
    with pytest.raises(ValueError, match="unknown activation 'swish'"):
        PositionwiseFeedForward(8, 16, "swish")


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"d_model": "abc"}, "d_model must be a whole number, got 'abc'"),
        ({"h": 4.5}, "h must be a whole number, got 4.5"),
        ({"N": True}, "N must be a whole number, got True"),
        ({"d_k": "8"}, "d_k must be a whole number or left out, got '8'"),
        ({"P_drop": "0.1"}, "P_drop must be a number, got '0.1'"),
    ],
)
def test_config_values_of_the_wrong_type_are_named(overrides, message):
    """A value of the wrong type (a typo in --set, a string from a hand-edited file) is
    a sentence naming the field, not a TypeError from a comparison inside validate."""
    with pytest.raises(ValueError, match=re.escape(message)):
        TransformerConfig(**{**dict(vocab_size=11, N=1, d_model=16, d_ff=32, h=2), **overrides})
    TransformerConfig(vocab_size=11, N=1, d_model=16, d_ff=32, h=2, P_drop=0)  # int for float
    TransformerConfig(vocab_size=np.int64(11), N=1, d_model=16, d_ff=32, h=2)  # NumPy ints


# -- the Python API's entry: the config, the generator, the cache, the backend -----------------
@pytest.mark.parametrize(
    "config, message",
    [
        (None, "Transformer(config): config must be a TransformerConfig, got NoneType"),
        ({"vocab_size": V}, "got dict (make one: TransformerConfig(**d)"),
    ],
)
def test_a_model_of_something_that_is_not_a_config_is_refused_in_one_line(config, message):
    from scratchformer.engine.models.classifier import EncoderClassifier  # noqa: PLC0415
    from scratchformer.engine.models.lm import LanguageModel  # noqa: PLC0415

    with pytest.raises(ScratchformerError, match=re.escape(message)) as e:
        Transformer(config)
    assert "\n" not in str(e.value)
    with pytest.raises(ScratchformerError, match=r"^LanguageModel\(config\): config must be"):
        LanguageModel(config)
    with pytest.raises(ScratchformerError, match=r"^EncoderClassifier\(config\): config must"):
        EncoderClassifier(config, 3)


def test_a_generator_that_is_not_one_is_refused_in_one_line(model):
    from scratchformer.engine import device  # noqa: PLC0415

    with pytest.raises(ScratchformerError, match=r"rng must be a generator, .*got str 'x'"):
        model.forward(arr(SRC), arr([[1, 4, 5], [1, 6, 7]]), rng="x")
    with pytest.raises(ScratchformerError, match="seed must be a whole number >= 0 .*got str 'x'"):
        device.generator("x")
    with pytest.raises(ScratchformerError, match="seed must be a whole number >= 0, got -1"):
        device.generator(-1)


def test_another_models_cache_is_refused_in_one_line(model):
    """Even of the same sizes: its gradients would land on this model's parameters."""
    other = Transformer(TransformerConfig.preset("tiny", vocab_size=V, max_len=MAX_LEN))
    tgt = arr([[1, 4, 5], [1, 6, 7]])
    logits, cache = other.forward(arr(SRC), tgt)
    with pytest.raises(ScratchformerError, match="this cache was made by another model's"):
        model.backward(B.xp.ones_like(logits), cache)
    _, loss_cache = other.loss_forward(arr(SRC), tgt, tgt)
    with pytest.raises(ScratchformerError, match="this cache was made by another model's"):
        model.loss_backward(loss_cache)
    with pytest.raises(ScratchformerError, match="expected the TransformerCache its forward"):
        model.backward(B.xp.ones_like(logits), ("not", "a", "cache"))
    other.loss_backward(loss_cache)  # its own: fine


def test_a_backend_the_environment_named_that_cannot_start_is_refused(monkeypatch):
    """SCRATCHFORMER_BACKEND=cupy without CuPy: the command line refuses to start, and so
    does building a model (it would otherwise run on NumPy without a word)."""
    error = B.BackendError("SCRATCHFORMER_BACKEND=cupy: CuPy is not installed")
    monkeypatch.setattr(B, "env_error", error)
    with pytest.raises(B.BackendError, match="SCRATCHFORMER_BACKEND=cupy"):
        Transformer(TransformerConfig.preset("tiny", vocab_size=V))
    B.set_backend(B.backend_name())  # a backend chosen in the program: the variable is moot
    assert B.env_error is None
    Transformer(TransformerConfig.preset("tiny", vocab_size=V))
