"""Checkpoints that work: the round trip of every model class, the plain .npz format,
loading on NumPy whatever wrote it, averaging, file permissions. What is refused (a
damaged, tampered or foreign file, a failed write, checkpoints that cannot be averaged):
tests/faults/test_checkpoints.py."""

import json
import os

import numpy as np
import pytest

from scratchformer.app.checkpoint import (
    CheckpointError,
    average_checkpoints,
    checkpoint_name,
    last_checkpoints,
    load_checkpoint,
    load_with_tokenizer,
    save_checkpoint,
)
from scratchformer.app.data import CharTokenizer
from scratchformer.engine import backend as B
from scratchformer.engine.models import (
    EncoderClassifier,
    LanguageModel,
    Transformer,
    TransformerConfig,
)
from scratchformer.engine.optim import Adam


def tiny_model(seed=0, **kw):
    return Transformer(TransformerConfig.preset("tiny", vocab_size=13, seed=seed, **kw))


def _params_equal(a, b):
    pa, pb = a.state_dict(), b.state_dict()
    return set(pa) == set(pb) and all(np.array_equal(pa[k], pb[k]) for k in pa)


def test_round_trip_with_optimizer_and_metadata(tmp_path, backend):
    model = tiny_model()
    opt = Adam(model.flatten())
    model.flat.grads += 0.01
    opt.step(1e-3)
    tok = CharTokenizer.fit(["abc"])
    path = save_checkpoint(
        tmp_path / "checkpoint_7.npz",
        model,
        step=7,
        optimizer=opt,
        meta={"tokenizer": tok.to_dict()},
        train_state={"epoch": 2, "batch_index": 5},
    )
    ck = load_checkpoint(path)
    assert ck.step == 7 and ck.path == path
    assert ck.config == model.config
    assert _params_equal(ck.model, model)
    assert ck.meta["tokenizer"] == tok.to_dict()
    assert ck.train_state == {"epoch": 2, "batch_index": 5}
    assert ck.optimizer_state["t"] == 1
    for k, m in model.flat.views(opt.m).items():
        np.testing.assert_array_equal(ck.optimizer_state["m"][k], B.asnumpy(m))
        np.testing.assert_array_equal(
            ck.optimizer_state["v"][k], B.asnumpy(opt.flat.view(opt.v, k))
        )
    fresh = Adam(ck.model.flatten())
    fresh.load_state_dict(ck.optimizer_state)
    assert fresh.t == 1


def test_plain_npz_without_pickle(tmp_path):
    """Readable by numpy alone, pickle off; host arrays only; the tied matrix once."""
    model = tiny_model()
    path = save_checkpoint(tmp_path / "c.npz", model)
    with np.load(path, allow_pickle=False) as z:
        names = set(z.files)
        header = json.loads(z["__meta__"].tobytes())
    assert {k for k in names if k.startswith("model/")} == {
        "model/" + k for k in model.parameters()
    }
    assert sum(k.endswith("embed.E") for k in names) == 1
    assert header["config"] == model.config.to_dict()
    assert not any(n.endswith(".tmp") for n in os.listdir(tmp_path))  # no temp file left


def test_loads_on_numpy_whatever_wrote_it(tmp_path, backend):
    model = tiny_model()
    path = save_checkpoint(tmp_path / "c.npz", model)
    B.set_backend("numpy")
    ck = load_checkpoint(path)
    assert all(isinstance(p, np.ndarray) for p in ck.model.parameters().values())
    assert _params_equal(ck.model, model)


# -- averaging -----------------------------------------------------------------------------
def _synthetic(tmp_path, steps, **kw):
    """Checkpoints whose every parameter is filled with the step number."""
    paths = []
    for s in steps:
        m = tiny_model(**kw)
        for p in m.parameters().values():
            p[...] = float(s)
        paths.append(save_checkpoint(tmp_path / checkpoint_name(s), m, step=s))
    return paths


def test_average_is_the_elementwise_mean(tmp_path):
    models = [tiny_model() for _ in range(3)]  # one run's: its later steps moved each
    for i, m in enumerate(models):
        for p in m.parameters().values():
            p += 0.01 * i * np.sin(np.arange(p.size).reshape(p.shape) + i)
    paths = [save_checkpoint(tmp_path / f"c{i}.npz", m) for i, m in enumerate(models)]
    avg = average_checkpoints(paths)
    for k, p in models[0].parameters().items():
        want = (
            np.asarray(p, np.float64)
            + models[1].state_dict()[k].astype(np.float64)
            + models[2].state_dict()[k].astype(np.float64)
        ) / 3
        np.testing.assert_allclose(avg[k], want, rtol=1e-6, atol=1e-7)
        assert avg[k].dtype == p.dtype


def test_last_n_in_numeric_step_order(tmp_path):
    _synthetic(tmp_path, [1, 2, 9, 10, 11])
    (tmp_path / "averaged.npz").write_bytes(b"")  # other files are ignored
    names = [p.name for p in last_checkpoints(tmp_path, 3)]
    assert names == ["checkpoint_9.npz", "checkpoint_10.npz", "checkpoint_11.npz"]
    avg = average_checkpoints(last_checkpoints(tmp_path, 3))
    assert all(np.allclose(v, 10.0) for v in avg.values())  # (9 + 10 + 11) / 3
    with pytest.raises(CheckpointError, match="holds 5"):
        last_checkpoints(tmp_path, 6)


def test_tied_tensor_averaged_once(tmp_path):
    paths = _synthetic(tmp_path, [2, 4])
    avg = average_checkpoints(paths)
    assert [k for k in avg if k.endswith(".E")] == ["embed.E"]  # shared by src/tgt/output
    model = tiny_model()
    model.load_state_dict(avg)
    np.testing.assert_allclose(model.embed.params["E"], 3.0)
    assert model.src_embed is model.embed  # still one matrix after loading


def test_every_model_class_round_trips_and_is_named_where_it_does_not_fit(tmp_path):
    """A checkpoint records its model's class: a language model or a classifier loads as
    itself, and the text tools that need an encoder-decoder (translate, evaluate, plot)
    name the class and the command that uses it instead of failing inside."""
    tok = CharTokenizer.fit(["abcdefgh"])  # 12 ids
    config = TransformerConfig.preset("tiny", vocab_size=12)
    for model in (LanguageModel(config), EncoderClassifier(config, 3), Transformer(config)):
        path = tmp_path / f"{type(model).__name__}.npz"
        save_checkpoint(path, model, step=1, meta={"tokenizer": tok.to_dict()})
        ck = load_checkpoint(path)
        assert type(ck.model) is type(model)
        for k, v in model.state_dict().items():
            np.testing.assert_array_equal(ck.model.state_dict()[k], v)
    assert load_checkpoint(tmp_path / "EncoderClassifier.npz").model.num_classes == 3
    with pytest.raises(CheckpointError, match="holds a LanguageModel.*scratchformer generate"):
        load_with_tokenizer(tmp_path / "LanguageModel.npz", expect=Transformer)
    with pytest.raises(CheckpointError, match="holds a Transformer.*translate or evaluate"):
        load_with_tokenizer(tmp_path / "Transformer.npz", expect=LanguageModel)


def test_text_tools_need_a_matching_tokenizer(tmp_path):
    """translate, evaluate and plot load through load_with_tokenizer: a checkpoint with
    no tokenizer, or one of another vocabulary size, is refused with the reason."""
    from scratchformer.app.checkpoint import load_with_tokenizer  # noqa: PLC0415
    from scratchformer.app.data import CharTokenizer  # noqa: PLC0415

    tok = CharTokenizer.fit(["abcdefghi"])  # 9 symbols + 4 specials = 13 ids
    assert len(tok.vocab) == 13
    good = save_checkpoint(tmp_path / "good.npz", tiny_model(), meta={"tokenizer": tok.to_dict()})
    ck, loaded = load_with_tokenizer(good)
    assert loaded.encode("cab") == tok.encode("cab") and ck.config.vocab_size == 13
    bare = save_checkpoint(tmp_path / "bare.npz", tiny_model())
    with pytest.raises(CheckpointError, match="holds no tokenizer"):
        load_with_tokenizer(bare)
    other = CharTokenizer.fit(["abcdefghijk"]).to_dict()
    bad = save_checkpoint(tmp_path / "bad.npz", tiny_model(), meta={"tokenizer": other})
    with pytest.raises(CheckpointError, match="vocabulary/checkpoint mismatch.*15 ids.*13"):
        load_with_tokenizer(bad)


def test_checkpoints_get_the_usual_file_permissions(tmp_path):
    """The temporary file (mkstemp: 0600) is opened up to 0666 minus the umask, like any
    file the user writes, so a shared run directory stays readable."""
    import os  # noqa: PLC0415
    import stat  # noqa: PLC0415

    old = os.umask(0o027)
    try:
        path = save_checkpoint(tmp_path / "c.npz", tiny_model())
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["c.npz"]  # no temporary file left
