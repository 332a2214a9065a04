"""Checkpoint faults: every way a checkpoint file can be wrong is refused in one line.

Each case starts from a real checkpoint of a tiny reverse run, tampers with one thing (a
dtype, a value, a header field, the zip itself) and runs a command on it: ``translate``
and ``average`` for every case, ``train --resume`` where the field is the trainer's.
The command must return 2 and print exactly one line on stderr naming the file and what
is wrong, no traceback. The untampered checkpoint, and the harmless variations, load.

A save that fails or is cut short (a crash between the write and the rename, a full
disk) leaves the old checkpoint; checkpoints of different models, tasks or tokenizers
are not averaged. The zip bombs (small files whose arrays inflate to gigabytes):
test_checkpoint_bombs.py. What works: tests/test_checkpoint.py.
"""

import io
import json
import shutil
import struct
import subprocess
import sys
import textwrap
import zipfile

import numpy as np
import pytest

from scratchformer.app.checkpoint import (
    CheckpointError,
    average_checkpoints,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
)
from scratchformer.app.cli import main as cli_main
from scratchformer.engine import backend as B
from scratchformer.engine import memory
from scratchformer.engine.models import Transformer, TransformerConfig

P, M, V = "model/embed.E", "optim/m/embed.E", "optim/v/embed.E"  # arrays every run has
_DROP = object()


@pytest.fixture
def good(tiny_checkpoint):
    """The checkpoint every case starts from (tests/faults/conftest.py)."""
    return tiny_checkpoint


def parts(path):
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    return json.loads(arrays.pop("__meta__").tobytes()), arrays


def write(path, header, arrays, blob=None):
    """A checkpoint as ``np.savez`` writes one, with a hand-made ``__meta__``."""
    blob = json.dumps(header).encode() if blob is None else blob
    np.savez(path, **arrays, __meta__=np.frombuffer(blob, dtype=np.uint8))
    return path


# -- tampering with the header and the arrays -------------------------------------------
def put(*keys, value=_DROP):
    """Set (or, without a value, drop) the header field at ``keys``."""

    def tamper(h, a):
        d = h
        for k in keys[:-1]:
            d = d[k]
        if value is _DROP:
            del d[keys[-1]]
        else:
            d[keys[-1]] = value

    return tamper


def retype(prefix, dtype, header=True):
    """Store the arrays whose names start with ``prefix`` as ``dtype`` (and say so in the
    header, unless ``header`` is False)."""

    def tamper(h, a):
        for n in [n for n in a if n.startswith(prefix)]:
            a[n] = a[n].astype(dtype)
            if header:
                h["arrays"][n][1] = np.dtype(dtype).name

    return tamper


def fill(name, value, index=0):
    def tamper(h, a):
        a[name].flat[index] = value

    return tamper


def drop_array(name, header=False):
    def tamper(h, a):
        del a[name]
        if header:
            del h["arrays"][name]

    return tamper


def also(*tampers):
    def tamper(h, a):
        for t in tampers:
            t(h, a)

    return tamper


def extra_array(h, a):
    a["model/extra"] = np.zeros(3, np.float32)


def relist(name, entry):
    return put("arrays", name, value=entry)


def no_optimizer(h, a):
    h["optimizer"] = h["train_state"] = None
    for n in [n for n in a if n.startswith("optim/")]:
        del a[n], h["arrays"][n]


T = ("meta", "tokenizer")
LETTERS = list("abcdefghij")
# (id, tamper, what the one line says, commands: t(ranslate) a(verage) r(esume))
CASES = [
    ("param-int32", retype(P, np.int32), "'model/embed.E' is 'int32'", "ta"),
    ("param-int64", retype(P, np.int64), "'model/embed.E' is 'int64'", "ta"),
    ("param-uint8", retype(P, np.uint8), "'model/embed.E' is 'uint8'", "ta"),
    ("param-bool", retype(P, np.bool_), "'model/embed.E' is 'bool'", "ta"),
    ("param-complex", retype(P, np.complex64), "'model/embed.E' is 'complex64'", "ta"),
    ("param-float16", retype(P, np.float16), "'model/embed.E' is 'float16'", "ta"),
    ("param-object", retype(P, object), "'model/embed.E' is 'object'", "ta"),
    ("param-pickled", retype(P, object, header=False), "Python objects (pickled", "ta"),
    ("param-float64-one", retype(P, np.float64), "mix dtypes", "ta"),
    ("all-float64", retype("", np.float64), "the model is built in float32", "ta"),
    ("moment-int32", retype(M, np.int32), "'optim/m/embed.E' is 'int32'", "tar"),
    ("moment-float64", retype(V, np.float64), "mix dtypes", "tar"),
    ("moment-float16", retype(V, np.float16), "'optim/v/embed.E' is 'float16'", "tar"),
    ("header-dtype-lies", put("arrays", P, 1, value="float64"), "mix dtypes", "ta"),
    ("param-nan", fill(P, np.nan), "'model/embed.E' holds 1 non-finite", "tar"),
    ("param-inf", fill(P, np.inf, -1), "'model/embed.E' holds 1 non-finite", "tar"),
    ("param-neg-inf", fill(P, -np.inf, 5), "'model/embed.E' holds 1 non-finite", "ta"),
    ("moment-nan", fill(M, np.nan), "'optim/m/embed.E' holds 1 non-finite", "tar"),
    ("moment-inf", fill(V, np.inf), "'optim/v/embed.E' holds 1 non-finite", "ta"),
    ("moment-negative", fill(V, -1.0), "'optim/v/embed.E' holds negative", "tar"),
    ("step-string", put("step", value="2"), "step must be an integer >= 0, got '2'", "tar"),
    ("step-negative", put("step", value=-1), "step must be an integer >= 0, got -1", "ta"),
    ("step-bool", put("step", value=True), "step must be an integer >= 0, got True", "ta"),
    ("step-float", put("step", value=2.0), "step must be an integer >= 0, got 2.0", "ta"),
    ("step-null", put("step", value=None), "step must be an integer >= 0, got None", "ta"),
    ("step-missing", put("step"), "the header has no step", "ta"),
    ("step-disagrees", put("train_state", "step", value=3), "train_state.step is 3", "tar"),
    ("meta-list", put("meta", value=[]), "meta must be a dict, got []", "ta"),
    ("meta-string", put("meta", value="x"), "meta must be a dict, got 'x'", "ta"),
    ("meta-task-int", put("meta", "task", value=3), "meta.task must be a task name", "ta"),
    ("meta-labels", put("meta", "labels", value="ab"), "meta.labels must be a list", "ta"),
    ("meta-label-int", put("meta", "labels", value=[1]), "meta.labels must be a list of", "ta"),
    ("train-config", put("meta", "train_config", value=[1]), "meta.train_config must", "tar"),
    ("tok-string", put(*T, value="char"), "meta.tokenizer must be a dict", "ta"),
    ("tok-list", put(*T, value=LETTERS), "meta.tokenizer must be a dict", "ta"),
    ("tok-no-type", put(*T, "type"), "meta.tokenizer.type must be", "t"),
    ("tok-type-int", put(*T, "type", value=5), "meta.tokenizer.type must be", "t"),
    ("tok-type-unknown", put(*T, "type", value="nope"), "unknown tokenizer type 'nope'", "t"),
    ("tok-no-vocab", put(*T, "vocab"), "meta.tokenizer.vocab must be", "t"),
    ("tok-vocab-list", put(*T, "vocab", value=LETTERS), "meta.tokenizer.vocab must be", "t"),
    ("tok-no-tokens", put(*T, "vocab", "tokens"), "meta.tokenizer.vocab must be", "t"),
    ("tok-token-int", put(*T, "vocab", "tokens", value=[*"abc", 4]), "got 4", "t"),
    ("tok-token-empty", put(*T, "vocab", "tokens", value=["a", ""]), "got ''", "t"),
    ("tok-token-twice", put(*T, "vocab", "tokens", value=[*"abcdefghia"]), "appears twice", "t"),
    ("tok-special", put(*T, "vocab", "tokens", value=[*"abcdefghi", "<pad>"]), "twice", "t"),
    ("tok-too-few", put(*T, "vocab", "tokens", value=[*"abc"]), "has 7 ids", "t"),
    ("tok-too-many", put(*T, "vocab", "tokens", value=[*"abcdefghijkl"]), "has 16 ids", "t"),
    ("tok-bpe-garbage", put(*T, value={"type": "spm-bpe", "model": "!!"}), "meta.tokenizer", "t"),
    ("tok-missing", put(*T), "holds no tokenizer", "t"),
    ("ts-list", put("train_state", value=[2]), "train_state must be a dict or null", "tar"),
    ("ts-string", put("train_state", value="2"), "train_state must be a dict or null", "ta"),
    ("ts-epoch-str", put("train_state", "epoch", value="0"), "train_state.epoch must", "tar"),
    ("ts-epoch-neg", put("train_state", "epoch", value=-1), "train_state.epoch must", "tar"),
    ("ts-batch-float", put("train_state", "batch_index", value=1.5), ".batch_index must", "tar"),
    ("ts-tokens-bool", put("train_state", "tokens_seen", value=True), ".tokens_seen must", "tar"),
    ("ts-legacy-tokens", put("train_state", "tokens", value=-5), "train_state.tokens must", "ta"),
    ("ts-seed-neg", put("train_state", "seed", value=-3), "train_state.seed must", "tar"),
    ("ts-seconds-nan", put("train_state", "seconds", value=float("nan")), ".seconds must", "tar"),
    ("ts-seconds-neg", put("train_state", "seconds", value=-1.0), ".seconds must", "ta"),
    ("ts-seconds-str", put("train_state", "seconds", value="1s"), ".seconds must", "ta"),
    ("opt-list", put("optimizer", value=[1]), "optimizer must be a dict", "tar"),
    ("opt-no-t", put("optimizer", "t"), "optimizer has no step count t", "tar"),
    ("opt-t-string", put("optimizer", "t", value="2"), "optimizer.t must be an integer", "tar"),
    ("opt-t-negative", put("optimizer", "t", value=-1), "optimizer.t must be an integer", "ta"),
    ("opt-beta1", put("optimizer", "beta1", value=1.5), "optimizer.beta1 must be", "tar"),
    ("opt-beta2-str", put("optimizer", "beta2", value="0.98"), "optimizer.beta2 must be", "ta"),
    ("opt-eps-zero", put("optimizer", "eps", value=0), "optimizer.eps must be a number > 0", "ta"),
    ("opt-wd-neg", put("optimizer", "weight_decay", value=-0.1), ".weight_decay must", "ta"),
    ("opt-null-moments", put("optimizer", value=None), "moments ('optim/m/", "ta"),
    ("opt-no-moments", drop_array(M, header=True), "no array 'optim/m/embed.E'", "tar"),
    ("arrays-string", relist(P, "float32"), "arrays['model/embed.E'] must be [shape", "ta"),
    ("arrays-three", relist(P, [[14, 16], "float32", 0]), "must be [shape, dtype]", "ta"),
    ("arrays-shape-neg", relist(P, [[-14, 16], "float32"]), "shape must be a list of", "ta"),
    ("arrays-shape-str", relist(P, [["14", 16], "float32"]), "shape must be a list of", "ta"),
    ("arrays-shape-bool", relist(P, [[True, 16], "float32"]), "shape must be a list of", "ta"),
    ("arrays-dtype-int", relist(P, [[14, 16], 4]), "'model/embed.E' is 4", "ta"),
    ("arrays-list", put("arrays", value=[]), "arrays must be a dict", "ta"),
    ("arrays-missing", put("arrays"), "arrays must be a dict", "ta"),
    ("arrays-unknown", put("arrays", "junk", value=[[3], "float32"]), "arrays['junk']", "ta"),
    ("shape-disagrees", relist(P, [[16, 14], "float32"]), "the header says float32[16, 14]", "ta"),
    ("member-unlisted", extra_array, "unlisted ['model/extra']", "ta"),
    ("member-missing", drop_array(P), "arrays missing ['model/embed.E']", "ta"),
    ("config-missing", put("config"), "the header has no model config", "ta"),
    ("config-list", put("config", value=[]), "config must be a dict", "ta"),
    ("config-unknown", put("config", "width", value=3), "unknown config keys ['width']", "ta"),
    ("config-vocab-str", put("config", "vocab_size", value="14"), "vocab_size", "ta"),
    ("config-d-model", put("config", "d_model", value=15), "not divisible by h=2", "ta"),
    ("config-vocab-13", put("config", "vocab_size", value=13), "shapes do not match", "ta"),
    ("config-depth", put("config", "N", value=1), "parameters do not match the model", "ta"),
    ("config-dropout", put("config", "P_drop", value=1.5), "P_drop must be in [0, 1)", "ta"),
    ("config-pad-id", put("config", "pad_id", value=99), "pad_id=99 is outside", "ta"),
    ("config-vocab-bomb", put("config", "vocab_size", value=10**11), "the model its config", "ta"),
    ("config-len-bomb", put("config", "max_len", value=10**12), "the model its config", "ta"),
    ("model-class", put("model", "class", value="GPT"), "unknown model class", "ta"),
    ("model-string", put("model", value="Transformer"), "model must be a dict", "ta"),
    ("format", put("format", value="other"), "not a scratchformer checkpoint", "ta"),
    ("version", put("version", value=2), "has format version 2", "ta"),
]


def _expand(cases, commands="tar"):
    names = {"t": "translate", "a": "average", "r": "resume"}
    return [
        pytest.param(tamper, says, names[c], id=f"{names[c]}-{case}")
        for case, tamper, says, which in cases
        for c in which
        if c in commands
    ]


def tampered(good, tmp_path, tamper):
    header, arrays = parts(good)
    tamper(header, arrays)
    return write(tmp_path / "checkpoint_2.npz", header, arrays)


def run(command, path, tmp_path, good):
    """The command on ``path`` (a resumed run: from ``path`` in its own run directory)."""
    if command == "translate":
        src = tmp_path / "src.txt"
        src.write_text("abc\nbca\n", encoding="utf-8")
        return cli_main(["translate", "--checkpoint", str(path), "--input", str(src)])
    if command == "average":
        return cli_main(["average", str(good), str(path), "-o", str(tmp_path / "avg.npz")])
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
    argv = ["--run-dir", str(run_dir), "--steps", "3", "--no-progress"]
    return cli_main(["train", "--resume", str(path), *argv])


def refused(capsys, rc, path, says):
    """Exit code 2 and one line on stderr naming ``path`` and saying ``says``."""
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert rc == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    if path is not None:
        assert str(path) in lines[0], lines[0]
    assert says in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("tamper, says, command", _expand(CASES))
def test_a_tampered_checkpoint_is_refused_in_one_line(
    good, tmp_path, capsys, tamper, says, command
):
    path = tampered(good, tmp_path, tamper)
    refused(capsys, run(command, path, tmp_path, good), path, says)


# -- the file itself ------------------------------------------------------------------------
def _truncated(good, path):
    path.write_bytes(good.read_bytes()[: good.stat().st_size // 2])


def _crc(good, path):
    raw = bytearray(good.read_bytes())
    with zipfile.ZipFile(good) as zf:
        info = zf.getinfo(P + ".npy")
    start = info.header_offset + 30 + len(info.filename) + 200
    raw[start : start + 8] = bytes(b ^ 0xFF for b in raw[start : start + 8])
    path.write_bytes(bytes(raw))


def _zip_with(good, path, name, data):
    """``good``'s members, and one more member ``name`` holding ``data``."""
    shutil.copy(good, path)
    with zipfile.ZipFile(path, "a") as zf:
        zf.writestr(name, data)


def _npy(array, version=(1, 0)):
    buf = io.BytesIO()
    np.lib.format.write_array(buf, array, version=version, allow_pickle=False)
    return buf.getvalue()


def _meta_write(blob=None, array=None):
    def build(good, path):
        header, arrays = parts(good)
        if array is None:
            return write(path, header, arrays, blob)
        np.savez(path, **arrays, __meta__=array)

    return build


def _version_3(good, path):
    header, arrays = parts(good)
    write(path, header, {k: v for k, v in arrays.items() if k != P})
    with zipfile.ZipFile(path, "a") as zf:
        zf.writestr(P + ".npy", _npy(arrays[P], version=(3, 0)))


def _huge_npy_header(good, path):
    """A version 2.0 .npy member whose header says it is 4 GB long."""
    header, arrays = parts(good)
    write(path, header, {k: v for k, v in arrays.items() if k != P})
    with zipfile.ZipFile(path, "a") as zf:
        zf.writestr(P + ".npy", b"\x93NUMPY\x02\x00" + struct.pack("<I", 2**32 - 1) + b"{")


def _twice(good, path):
    with pytest.warns(UserWarning, match="Duplicate name"):
        _zip_with(good, path, P + ".npy", _npy(parts(good)[1][P]))


FILES = [
    ("truncated", _truncated, "truncated or corrupted"),
    ("empty", lambda good, path: path.write_bytes(b""), "is empty (0 bytes): it is not a"),
    ("text", lambda good, path: path.write_text("not a zip"), "not a checkpoint: a checkpoint"),
    ("crc", _crc, "truncated or corrupted"),
    ("directory", lambda good, path: path.mkdir(), "checkpoint_2.npz is a directory"),
    ("no-meta", lambda good, path: np.savez(path, x=np.zeros(2)), "no __meta__ entry"),
    ("not-an-array", lambda good, path: _zip_with(good, path, "README", "hi"), "'README'"),
    ("npy-version-3", _version_3, "'model/embed.E' is not a .npy array of format version 1.0"),
    ("npy-huge-header", _huge_npy_header, "has a .npy header of 4.3 GB"),
    ("member-twice", _twice, "'model/embed.E' appears twice"),
    ("meta-not-json", _meta_write(b"{not json"), "has a corrupted header"),
    ("meta-not-utf8", _meta_write(b"\xff\xfe{}"), "has a corrupted header"),
    ("meta-a-list", _meta_write(b"[1, 2]"), "not a scratchformer checkpoint"),
    ("meta-nested", _meta_write(b"[" * 100_000 + b"]" * 100_000), "has a corrupted header"),
    ("meta-float64", _meta_write(array=np.zeros(4)), "header is float64[4], expected uint8"),
    ("meta-pickled", _meta_write(array=np.array([{}], dtype=object)), "Python objects"),
]


@pytest.mark.parametrize("command", ["translate", "average"])
@pytest.mark.parametrize("build, says", [pytest.param(b, s, id=i) for i, b, s in FILES])
def test_a_damaged_or_foreign_file_is_refused_in_one_line(
    good, tmp_path, capsys, build, says, command
):
    path = tmp_path / "checkpoint_2.npz"
    build(good, path)
    refused(capsys, run(command, path, tmp_path, good), path, says)


def test_a_missing_file_is_named(good, tmp_path, capsys):
    path = tmp_path / "checkpoint_9.npz"
    refused(capsys, run("translate", path, tmp_path, good), path, "no checkpoint file at")


# -- what loads -----------------------------------------------------------------------------
def _translations(capsys, path, tmp_path, good):
    assert run("translate", path, tmp_path, good) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def test_the_untampered_checkpoint_translates_averages_and_resumes(good, tmp_path, capsys):
    assert len(_translations(capsys, good, tmp_path, good).splitlines()) == 2
    path = shutil.copy(good, tmp_path / "checkpoint_2.npz")
    assert run("average", path, tmp_path, good) == 0, capsys.readouterr().err
    want = load_checkpoint(good).model.state_dict()
    got = load_checkpoint(tmp_path / "avg.npz").model.state_dict()
    assert all(np.array_equal(got[k], v) for k, v in want.items())
    assert run("resume", path, tmp_path, good) == 0, capsys.readouterr().err
    assert "done: step 3" in capsys.readouterr().out


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(
            lambda h, a: a.update({k: np.asfortranarray(v) for k, v in a.items()}), id="F"
        ),
        pytest.param(put("train_state", "window"), id="train-state-without-window"),
        pytest.param(put("meta", "task"), id="meta-without-task"),
        pytest.param(put("model"), id="header-without-model-class"),
    ],
)
def test_harmless_variations_load_and_give_the_same_output(good, tmp_path, capsys, tamper):
    want = _translations(capsys, good, tmp_path, good)
    assert _translations(capsys, tampered(good, tmp_path, tamper), tmp_path, good) == want


def test_a_checkpoint_without_training_state_translates_but_does_not_resume(good, tmp_path, capsys):
    path = tampered(good, tmp_path, no_optimizer)
    assert len(_translations(capsys, path, tmp_path, good).splitlines()) == 2
    refused(capsys, run("resume", path, tmp_path, good), path, "no optimizer or training state")


def test_a_float64_checkpoint_loads_in_float64_only(good, tmp_path):
    path = tampered(good, tmp_path, retype("", np.float64))
    with B.precision("float64"):
        ck = load_checkpoint(path)
    want = load_checkpoint(good).model.state_dict()
    for k, v in ck.model.state_dict().items():
        assert v.dtype == np.float64 and np.array_equal(v, want[k].astype(np.float64))
    assert ck.optimizer_state["m"]["embed.E"].dtype == np.float64


def test_more_than_the_memory_available_is_refused_unread(good, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(memory, "available_memory", lambda: 10_000)
    line = refused(capsys, run("translate", good, tmp_path, good), good, "arrays (")
    assert "more than the 10.0 KB of memory available" in line


# -- scratchformer average -----------------------------------------------------------------
def _average_dir(good, tmp_path):
    d = tmp_path / "ckpts"
    d.mkdir()
    shutil.copy(good, d / "checkpoint_2.npz")
    return d


def _corrupt(tmp_path):
    p = tmp_path / "corrupt.npz"
    p.write_text("corrupt")
    return str(p)


AVERAGE = [  # (id, argv after "average" from (good, tmp, dir), what the one line says)
    ("o-is-input", lambda g, t, d: [g, _corrupt(t), "-o", g], "is the input checkpoint file"),
    ("o-trainer-name", lambda g, t, d: [g, "-o", f"{t}/checkpoint_9.npz"], "belong to the trainer"),
    ("o-directory", lambda g, t, d: [g, "-o", str(d)], "is a directory: name the file"),
    ("o-under-a-file", lambda g, t, d: [g, "-o", f"{g}/avg.npz"], "is not a directory"),
    ("last-0", lambda g, t, d: [str(d), "--last", "0"], "--last must be a whole number >= 1"),
    ("last-negative", lambda g, t, d: [str(d), "--last", "-3"], "got -3"),
    ("last-too-many", lambda g, t, d: [str(d), "--last", "9"], "the last 9 checkpoints but"),
    ("last-default-5", lambda g, t, d: [str(d)], "the last 5 checkpoints but"),
    ("empty-directory", lambda g, t, d: [str(t / "none")], "holds 0 checkpoint_<step>.npz"),
    ("not-a-checkpoint", lambda g, t, d: [g, _corrupt(t)], "starts with b'corr'"),
    ("missing-input", lambda g, t, d: [g, f"{t}/nope.npz"], "no checkpoint file at"),
    ("input-twice", lambda g, t, d: [g, g], "is given twice"),
    ("dir-and-file", lambda g, t, d: [str(d), g], "either one directory or checkpoint files"),
    ("last-with-files", lambda g, t, d: [g, "--last", "1"], "--last needs a directory"),
]


@pytest.mark.parametrize("argv, says", [pytest.param(a, s, id=i) for i, a, s in AVERAGE])
def test_average_refuses_in_one_line_before_any_work(good, tmp_path, capsys, argv, says):
    d = _average_dir(good, tmp_path)
    (tmp_path / "none").mkdir()
    argv = argv(str(good), tmp_path, d)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    refused(capsys, cli_main(["average", *argv]), None, says)
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing written


def test_average_creates_the_output_directory(good, tmp_path, capsys):
    out = tmp_path / "new" / "deeper" / "avg.npz"
    assert (
        cli_main(["average", str(_average_dir(good, tmp_path)), "--last", "1", "-o", str(out)]) == 0
    )
    want = load_checkpoint(good).model.state_dict()
    got = load_checkpoint(out).model.state_dict()
    assert all(np.array_equal(got[k], v) for k, v in want.items())


# -- writing, and averaging through the API -------------------------------------------------
def tiny_model(seed=0, **kw):
    return Transformer(TransformerConfig.preset("tiny", vocab_size=13, seed=seed, **kw))


def _params_equal(a, b):
    pa, pb = a.state_dict(), b.state_dict()
    return set(pa) == set(pb) and all(np.array_equal(pa[k], pb[k]) for k in pa)


def test_crash_between_temp_write_and_rename_keeps_the_old_checkpoint(tmp_path):
    """A real crash (os._exit, no clean-up) after the temporary file is written and
    before the rename: the old checkpoint under the real name is untouched."""
    path = tmp_path / "checkpoint_1.npz"
    old = tiny_model(seed=0)
    save_checkpoint(path, old, step=1)
    script = textwrap.dedent(
        f"""
        import os
        from scratchformer.app import checkpoint
        from scratchformer.engine.models import Transformer, TransformerConfig
        def crash(src, dst):
            assert os.path.getsize(src) > 0   # the new checkpoint is fully written ...
            os._exit(17)                      # ... and the process dies before the rename
        from scratchformer.app import writer
        writer.os.replace = crash
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

    monkeypatch.setattr("scratchformer.app.writer.os.replace", fail)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(path, tiny_model(seed=1), step=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint_1.npz"]
    assert load_checkpoint(path).step == 1


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
    """Equal shapes are not enough: a pre-LN model, another task, another tokenizer,
    another seed or other training data make the mean meaningless, and the error says
    which. Dropout may differ."""
    a = save_checkpoint(tmp_path / "a.npz", tiny_model(), meta={"task": "reverse"})
    ok = save_checkpoint(tmp_path / "ok.npz", tiny_model(P_drop=0.3), meta={"task": "reverse"})
    average_checkpoints([a, ok])
    seed = save_checkpoint(tmp_path / "s.npz", tiny_model(seed=5), meta={"task": "reverse"})
    with pytest.raises(CheckpointError, match=r"seeds differ \(model: 5 against 0\)"):
        average_checkpoints([a, seed])
    runs = [{"task": "reverse", "train_config": {"seed": s}} for s in (3, 4)]
    one, other = (
        save_checkpoint(tmp_path / f"r{i}.npz", tiny_model(), meta=m) for i, m in enumerate(runs)
    )
    average_checkpoints([a, other])  # a seed that a is not known to have: not compared
    with pytest.raises(CheckpointError, match=r"seeds differ \(run: 4 against 3\)"):
        average_checkpoints([one, other])
    data = [{"task": "reverse", "data": d} for d in ("ab12", "cd34")]
    x, y = (
        save_checkpoint(tmp_path / f"d{i}.npz", tiny_model(), meta=m) for i, m in enumerate(data)
    )
    with pytest.raises(CheckpointError, match="training data differ \\('cd34' against 'ab12'\\)"):
        average_checkpoints([x, y])
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
