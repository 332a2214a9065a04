"""Checkpoints: round trip, atomic writes, clear errors, averaging."""

import json
import os
import subprocess
import sys
import textwrap
import zipfile

import numpy as np
import pytest

from scratchformer import backend as B
from scratchformer.checkpoint import (
    CheckpointError,
    average_checkpoints,
    checkpoint_name,
    last_checkpoints,
    list_checkpoints,
    load_checkpoint,
    load_with_tokenizer,
    save_checkpoint,
)
from scratchformer.data import CharTokenizer
from scratchformer.models import EncoderClassifier, LanguageModel, Transformer, TransformerConfig
from scratchformer.optim import Adam


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


def test_missing_truncated_corrupted_and_foreign_files(tmp_path):
    path = save_checkpoint(tmp_path / "checkpoint_1.npz", tiny_model())
    data = path.read_bytes()
    with pytest.raises(CheckpointError, match="no checkpoint file"):
        load_checkpoint(tmp_path / "nope.npz")

    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated or corrupted"):
        load_checkpoint(truncated)

    corrupted = tmp_path / "corrupted.npz"
    raw = bytearray(data)
    # flip bytes inside the first parameter's data: the zip member's CRC-32 catches it
    with zipfile.ZipFile(path) as zf:
        info = zf.infolist()[0]
    start = info.header_offset + 30 + len(info.filename) + 200
    for i in range(start, start + 16):
        raw[i] ^= 0xFF
    corrupted.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="truncated or corrupted"):
        load_checkpoint(corrupted)

    foreign = tmp_path / "foreign.npz"
    np.savez(foreign, x=np.zeros(3))
    with pytest.raises(CheckpointError, match="not a scratchformer checkpoint"):
        load_checkpoint(foreign)

    text = tmp_path / "text.npz"
    text.write_text("hello")
    with pytest.raises(CheckpointError, match="truncated or corrupted"):
        load_checkpoint(text)


def test_mismatched_checkpoint_is_a_clear_error(tmp_path):
    """A header whose config does not fit the stored arrays."""
    model = tiny_model()
    arrays = {"model/" + k: v for k, v in model.state_dict().items()}
    cfg = model.config.to_dict()
    cfg["d_model"] = 32
    header = {
        "format": "scratchformer.checkpoint",
        "version": 1,
        "config": cfg,
        "step": 0,
        "arrays": {k: [list(v.shape), str(v.dtype)] for k, v in arrays.items()},
    }
    arrays["__meta__"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    bad = tmp_path / "bad.npz"
    np.savez(bad, **arrays)
    with pytest.raises(CheckpointError, match="bad.npz.*shapes do not match"):
        load_checkpoint(bad)


def test_crash_between_temp_write_and_rename_keeps_the_old_checkpoint(tmp_path):
    """A real crash (os._exit, no clean-up) after the temporary file is written and
    before the rename: the old checkpoint under the real name is untouched."""
    path = tmp_path / "checkpoint_1.npz"
    old = tiny_model(seed=0)
    save_checkpoint(path, old, step=1)
    script = textwrap.dedent(
        f"""
        import os
        from scratchformer import checkpoint
        from scratchformer.models import Transformer, TransformerConfig
        def crash(src, dst):
            assert os.path.getsize(src) > 0   # the new checkpoint is fully written ...
            os._exit(17)                      # ... and the process dies before the rename
        checkpoint.os.replace = crash
        new = Transformer(TransformerConfig.preset("tiny", vocab_size=13, seed=1))
        checkpoint.save_checkpoint({str(path)!r}, new, step=2)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 17, proc.stderr
    leftovers = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert leftovers  # the half-done write is only under a temporary name
    ck = load_checkpoint(path)
    assert ck.step == 1 and _params_equal(ck.model, old)
    assert [p for _, p in list_checkpoints(tmp_path)] == [path]  # temp file never listed


def test_failed_write_cleans_up_and_keeps_the_old_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint_1.npz"
    old = tiny_model(seed=0)
    save_checkpoint(path, old, step=1)

    def fail(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr("scratchformer.checkpoint.os.replace", fail)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(path, tiny_model(seed=1), step=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint_1.npz"]
    assert load_checkpoint(path).step == 1


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
    models = [tiny_model(seed=s) for s in range(3)]
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


def test_mismatched_keys_or_shapes_are_errors(tmp_path):
    a = save_checkpoint(tmp_path / "a.npz", tiny_model())
    b = save_checkpoint(tmp_path / "b.npz", tiny_model(share_embeddings="none"))
    with pytest.raises(CheckpointError, match="model configurations differ.*share_embeddings"):
        average_checkpoints([a, b])
    c = save_checkpoint(
        tmp_path / "c.npz", Transformer(TransformerConfig.preset("tiny", vocab_size=14))
    )
    with pytest.raises(CheckpointError, match="model configurations differ"):
        average_checkpoints([a, c])
    with pytest.raises(CheckpointError, match="no checkpoints"):
        average_checkpoints([])


def test_mixed_runs_are_refused(tmp_path):
    """Equal shapes are not enough: a pre-LN model, another task or another tokenizer
    makes the mean meaningless, and the error says which. Dropout and seed may differ."""
    a = save_checkpoint(tmp_path / "a.npz", tiny_model(), meta={"task": "reverse"})
    ok = save_checkpoint(
        tmp_path / "ok.npz", tiny_model(seed=5, P_drop=0.3), meta={"task": "reverse"}
    )
    average_checkpoints([a, ok])
    pre = save_checkpoint(tmp_path / "pre.npz", tiny_model(norm="pre"), meta={"task": "reverse"})
    with pytest.raises(CheckpointError, match="norm: 'pre' against 'post'"):
        average_checkpoints([a, pre])
    sort = save_checkpoint(tmp_path / "sort.npz", tiny_model(), meta={"task": "sort"})
    with pytest.raises(CheckpointError, match="tasks differ \\('sort' against 'reverse'\\)"):
        average_checkpoints([a, sort])
    tok_a, tok_b = ({"kind": "char", "vocab": list(v)} for v in ("abc", "abd"))
    x = save_checkpoint(tmp_path / "x.npz", tiny_model(), meta={"task": "t", "tokenizer": tok_a})
    y = save_checkpoint(tmp_path / "y.npz", tiny_model(), meta={"task": "t", "tokenizer": tok_b})
    with pytest.raises(CheckpointError, match="tokenizers differ"):
        average_checkpoints([x, y])
    bpe_a, bpe_b = ({"type": "spm-bpe", "vocab_size": 13, "model": m * 50_000} for m in "ab")
    x = save_checkpoint(tmp_path / "x.npz", tiny_model(), meta={"task": "t", "tokenizer": bpe_a})
    y = save_checkpoint(tmp_path / "y.npz", tiny_model(), meta={"task": "t", "tokenizer": bpe_b})
    with pytest.raises(CheckpointError, match="tokenizers differ") as e:
        average_checkpoints([x, y])
    assert len(str(e.value)) < 400  # says so; never prints the two models


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
    from scratchformer.checkpoint import load_with_tokenizer  # noqa: PLC0415
    from scratchformer.data import CharTokenizer  # noqa: PLC0415

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
