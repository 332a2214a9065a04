"""Checkpoints: one ``.npz`` file per checkpoint, written atomically, read without pickle.

Layout of ``checkpoint_<step>.npz`` (``numpy.load(path, allow_pickle=False)`` reads it):

    model/<name>      every parameter of ``model.parameters()`` (a tied matrix once)
    optim/m/<name>    Adam's first moment per parameter      (when an optimizer is saved)
    optim/v/<name>    Adam's second moment per parameter
    __meta__          uint8: UTF-8 JSON with the format version, the model's class and
                      config, the step, free metadata (``meta["tokenizer"]``,
                      ``meta["task"]``), the optimizer's scalars, the training state, and
                      the name/shape/dtype of every array above

The model is an encoder-decoder ``Transformer``, a ``LanguageModel`` or an
``EncoderClassifier`` (``"model": {"class": ..., "num_classes": ...}`` in the header;
checkpoints written before that field are told apart by ``meta["task"]``).

Arrays are host NumPy copies, so a checkpoint written on a GPU loads on a CPU.

Writing is atomic: the file is written to a temporary name in the same directory,
flushed and fsync'ed, then ``os.replace``d onto its name. A crash at any point leaves
either the old file or the new one, never a half-written file under the real name.

Reading checks everything it can and raises ``CheckpointError`` with the file's name:
a truncated or corrupted zip (each member carries a CRC-32), a missing or unreadable
header, arrays that disagree with the header, a config or state dict that does not fit.

``average_checkpoints(paths)`` is the paper's checkpoint averaging: the element-wise
mean of the parameters of several checkpoints of one model.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from scratchformer import backend
from scratchformer.data import tokenizer_from_dict
from scratchformer.errors import ScratchformerError, StateDictError
from scratchformer.models import EncoderClassifier, LanguageModel, Transformer, TransformerConfig

FORMAT = "scratchformer.checkpoint"
VERSION = 1
META_KEY = "__meta__"
MODEL_PREFIX = "model/"
OPTIM_PREFIXES = {"m": "optim/m/", "v": "optim/v/"}

#: ``checkpoint_<step>.npz``: the step is read as a number (``checkpoint_10`` after ``_9``).
CHECKPOINT_RE = re.compile(r"^checkpoint_(\d+)\.npz$")


class CheckpointError(ScratchformerError):
    """A checkpoint is missing, truncated, corrupted or does not match what loads it."""


#: the model classes a checkpoint can hold, by name
MODEL_CLASSES = {cls.__name__: cls for cls in (Transformer, LanguageModel, EncoderClassifier)}


@dataclass
class Checkpoint:
    model: object  # Transformer, LanguageModel or EncoderClassifier, parameters loaded
    config: TransformerConfig
    step: int  # optimizer steps taken when it was written
    meta: dict = field(default_factory=dict)  # free metadata; meta["tokenizer"]
    optimizer_state: dict | None = None  # Adam.state_dict() layout, or None
    train_state: dict | None = None  # the training loop's resume state, or None
    path: Path | None = None


def checkpoint_name(step: int) -> str:
    return f"checkpoint_{int(step)}.npz"


# -- writing -------------------------------------------------------------------------------
def _optimizer_state(optimizer) -> dict | None:
    if optimizer is None:
        return None
    return optimizer.state_dict() if hasattr(optimizer, "state_dict") else dict(optimizer)


def _fsync_dir(directory: Path) -> None:
    """Make the rename durable (POSIX); a no-op where directories cannot be opened."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def save_checkpoint(path, model, *, step=0, optimizer=None, meta=None, train_state=None) -> Path:
    """Write ``model`` (and optionally an optimizer's state) to ``path`` atomically.

    ``optimizer``: an ``Adam`` (or its ``state_dict()``); ``meta`` and ``train_state``:
    JSON-serialisable dicts. Returns the path written.

    Testing hook: with the environment variable ``SCRATCHFORMER_FAULT_SAVE`` set to a
    point of the write (``before-write``: the temporary file created, empty;
    ``after-write``: it is written and fsync'ed, not yet renamed; ``after-replace``: the
    file is in place), optionally ``:<file name>`` (``after-write:averaged.npz``), the
    save stops there: it prints ``fault point <point>: <path>`` on stderr and sleeps, so
    that a test can kill the process at exactly that point (tests/faults/test_faults.py).
    Unset, it costs one environment lookup per point.
    """
    np = backend.np
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {MODEL_PREFIX + k: v for k, v in model.state_dict().items()}
    opt = _optimizer_state(optimizer)
    opt_scalars = None
    if opt is not None:
        for moment, prefix in OPTIM_PREFIXES.items():
            for k, v in opt[moment].items():
                arrays[prefix + k] = backend.asnumpy(v)
        opt_scalars = {k: v for k, v in opt.items() if k not in OPTIM_PREFIXES}
    header = {
        "format": FORMAT,
        "version": VERSION,
        "model": _model_spec(model),
        "config": model.config.to_dict(),
        "step": int(step),
        "meta": meta or {},
        "optimizer": opt_scalars,
        "train_state": train_state,
        "arrays": {k: [list(v.shape), str(v.dtype)] for k, v in arrays.items()},
    }
    try:
        blob = json.dumps(header).encode("utf-8")
    except TypeError as e:
        raise CheckpointError(f"checkpoint metadata must be JSON-serialisable: {e}") from None
    arrays[META_KEY] = np.frombuffer(blob, dtype=np.uint8)

    fd, tmp = _create_temporary(path)
    try:
        _fault_point("before-write", path)
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        _fault_point("after-write", path)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)
    _fault_point("after-replace", path)
    return path


def _fault_point(point: str, path: Path) -> None:
    """The testing hook of ``save_checkpoint`` (see there): announce ``point`` on stderr
    and sleep when ``SCRATCHFORMER_FAULT_SAVE`` names it (and ``path``'s name, if given),
    so that a fault test can kill the save exactly there; nothing otherwise."""
    wanted = os.environ.get("SCRATCHFORMER_FAULT_SAVE")
    if not wanted:
        return
    where, _, name = wanted.partition(":")
    if where == point and name in ("", path.name):
        import time  # the testing hook alone sleeps

        os.write(2, f"fault point {point}: {path}\n".encode())
        time.sleep(3600)


def _model_spec(model) -> dict:
    """What, besides its config, rebuilds ``model``: its class (and a classifier's classes)."""
    name = type(model).__name__
    if name not in MODEL_CLASSES:
        raise CheckpointError(f"cannot save a {name}: expected one of {sorted(MODEL_CLASSES)}")
    spec = {"class": name}
    if isinstance(model, EncoderClassifier):
        spec["num_classes"] = model.num_classes
    return spec


def _build_model(header: dict, config: TransformerConfig, path):
    """The empty model a checkpoint's parameters load into."""
    meta = header.get("meta") or {}
    spec = header.get("model")
    if spec is None:  # written before the class was recorded: the task tells
        task = meta.get("task")
        spec = {"class": "Transformer"}
        if task == "lm":
            spec = {"class": "LanguageModel"}
        elif task == "classify":
            spec = {"class": "EncoderClassifier", "num_classes": len(meta.get("labels") or [])}
    if not isinstance(spec, dict) or spec.get("class") not in MODEL_CLASSES:
        raise CheckpointError(f"checkpoint {path} names an unknown model class: {spec!r}")
    try:
        if spec["class"] == "EncoderClassifier":
            return EncoderClassifier(config, int(spec.get("num_classes", 0)))
        return MODEL_CLASSES[spec["class"]](config)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"checkpoint {path}: cannot build its model: {e}") from None


def _create_temporary(path: Path) -> tuple[int, str]:
    """A new file beside ``path`` for the atomic write: ``(fd, name)``. Created with mode
    0666 so the kernel applies the umask, as for any file the user writes (mkstemp would
    give 0600); O_EXCL with a random name makes it ours alone."""
    for _ in range(100):
        tmp = str(path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise CheckpointError(f"cannot create a temporary file beside {path}")


# -- reading -------------------------------------------------------------------------------
def _read(path) -> tuple[dict, dict]:
    """``(header, arrays)`` of a checkpoint file, fully read and checked."""
    np = backend.np
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint file at {path}")
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}  # reading each member checks its CRC-32
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError) as e:
        raise CheckpointError(
            f"cannot read checkpoint {path}: the file is truncated or corrupted "
            f"({type(e).__name__}: {e})"
        ) from None
    if META_KEY not in arrays:
        raise CheckpointError(f"{path} is not a scratchformer checkpoint (no {META_KEY} entry)")
    try:
        header = json.loads(arrays.pop(META_KEY).tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"checkpoint {path} has a corrupted header: {e}") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a scratchformer checkpoint (format mismatch)")
    if header.get("version") != VERSION:
        raise CheckpointError(
            f"checkpoint {path} has format version {header.get('version')}, this scratchformer "
            f"reads version {VERSION}"
        )
    listed = header.get("arrays", {})
    if set(listed) != set(arrays):
        missing = sorted(set(listed) - set(arrays))
        extra = sorted(set(arrays) - set(listed))
        raise CheckpointError(
            f"checkpoint {path} is inconsistent: arrays missing {missing[:5]}, unlisted {extra[:5]}"
        )
    for k, (shape, dtype) in listed.items():
        if list(arrays[k].shape) != shape or str(arrays[k].dtype) != dtype:
            raise CheckpointError(
                f"checkpoint {path}: array {k!r} is {arrays[k].dtype}{list(arrays[k].shape)}, "
                f"the header says {dtype}{shape}"
            )
    return header, arrays


def _split(arrays: dict) -> tuple[dict, dict]:
    """Model parameters, and optimizer moments ``{"m": {...}, "v": {...}}``."""
    params = {k[len(MODEL_PREFIX) :]: v for k, v in arrays.items() if k.startswith(MODEL_PREFIX)}
    moments = {
        m: {k[len(p) :]: v for k, v in arrays.items() if k.startswith(p)}
        for m, p in OPTIM_PREFIXES.items()
    }
    return params, moments


def read_params(path) -> tuple[dict, dict]:
    """``(params, header)``: a checkpoint's parameters as NumPy arrays, without a model."""
    header, arrays = _read(path)
    return _split(arrays)[0], header


def load_checkpoint(path) -> Checkpoint:
    """Read a checkpoint and rebuild its model (of whichever class) on the active backend.

    Raises CheckpointError for a missing, truncated, corrupted or inconsistent file.
    """
    path = Path(path)
    header, arrays = _read(path)
    params, moments = _split(arrays)
    try:
        config = TransformerConfig.from_dict(header["config"])
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"checkpoint {path} holds an invalid model config: {e}") from None
    model = _build_model(header, config, path)
    try:
        model.load_state_dict(params)
    except StateDictError as e:
        raise CheckpointError(f"checkpoint {path}: {e}") from None
    optimizer_state = None
    if header.get("optimizer") is not None:
        optimizer_state = {**header["optimizer"], **moments}
    return Checkpoint(
        model=model,
        config=config,
        step=int(header.get("step", 0)),
        meta=header.get("meta") or {},
        optimizer_state=optimizer_state,
        train_state=header.get("train_state"),
        path=path,
    )


# -- finding and averaging -----------------------------------------------------------------
def list_checkpoints(directory) -> list[tuple[int, Path]]:
    """``[(step, path)]`` of the ``checkpoint_<step>.npz`` files in ``directory``, by step
    as a number (so step 10 comes after step 9)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise CheckpointError(f"no checkpoint directory at {directory}")
    found = []
    for p in directory.iterdir():
        m = CHECKPOINT_RE.match(p.name)
        if m and p.is_file():
            found.append((int(m.group(1)), p))
    return sorted(found)


def last_checkpoints(directory, n: int) -> list[Path]:
    """The ``n`` checkpoints with the highest steps in ``directory``, oldest first."""
    if n < 1:
        raise CheckpointError(f"need at least one checkpoint to average, got n={n}")
    found = list_checkpoints(directory)
    if len(found) < n:
        raise CheckpointError(
            f"asked for the last {n} checkpoints but {directory} holds {len(found)}"
        )
    return [p for _, p in found[-n:]]


def latest_checkpoint(directory) -> Path | None:
    """The checkpoint with the highest step in ``directory`` (None when there is none)."""
    try:
        return last_checkpoints(directory, 1)[0]
    except CheckpointError:  # no such directory, or no checkpoint in it
        return None


#: where each kind of model is used from the command line
_USED_BY = {
    "Transformer": "scratchformer translate or evaluate",
    "LanguageModel": "scratchformer generate",
    "EncoderClassifier": "the Python API (scratchformer.checkpoint.load_with_tokenizer)",
}


def load_with_tokenizer(path, expect: type | None = None) -> tuple[Checkpoint, object]:
    """``(checkpoint, tokenizer)`` for the tools that read and write text (translate,
    evaluate, generate, plot): the checkpoint's model and the tokenizer saved with it.

    Raises CheckpointError when the checkpoint holds no tokenizer, or one whose
    vocabulary size differs from the model's (a vocabulary/checkpoint mismatch would
    otherwise surface as an index error deep inside the embedding), or, with
    ``expect`` (a model class), a model of another class.
    """
    ckpt = load_checkpoint(path)
    if expect is not None and not isinstance(ckpt.model, expect):
        kind = type(ckpt.model).__name__
        task = ckpt.meta.get("task")
        raise CheckpointError(
            f"{path} holds a {kind}{f' (task {task})' if task else ''}, not a "
            f"{expect.__name__}: use it with {_USED_BY[kind]}"
        )
    if "tokenizer" not in ckpt.meta:
        raise CheckpointError(
            f"checkpoint {path} holds no tokenizer (meta['tokenizer']): it cannot turn text "
            "into ids; save checkpoints with meta={'tokenizer': tokenizer.to_dict()}"
        )
    tok = tokenizer_from_dict(ckpt.meta["tokenizer"])
    if len(tok.vocab) != ckpt.config.vocab_size:
        raise CheckpointError(
            f"vocabulary/checkpoint mismatch in {path}: the tokenizer has {len(tok.vocab)} ids, "
            f"the model's vocab_size is {ckpt.config.vocab_size}"
        )
    return ckpt, tok


# What must agree for a mean of parameters to mean anything: the same architecture
# (every config field but the training-only ones), the same task and the same tokenizer.
_TRAINING_ONLY = ("seed", "P_drop", "P_drop_attn", "P_drop_ffn", "eps_ls", "extra")
_WHAT = ("model configurations", "tasks", "tokenizers")


def _what_it_models(header: dict) -> tuple:
    config = header.get("config") or {}
    try:  # resolved, so that a default written out (N_dec = N) equals one left implicit
        config = TransformerConfig.from_dict(config).to_dict()
    except (TypeError, ValueError):
        pass  # compared as stored; reading the model reports what is wrong with it
    config = {k: v for k, v in config.items() if k not in _TRAINING_ONLY}
    meta = header.get("meta") or {}
    task = meta.get("task")
    if task is None:  # written before meta["task"]: the stored training config says
        stored = meta.get("train_config")
        task = stored.get("task") if isinstance(stored, dict) else None
        task = task.get("name") if isinstance(task, dict) else task
    return config, task, meta.get("tokenizer")


def _difference(what: str, a, b) -> str:
    """``a`` against ``b`` in a few words: the differing keys of two model configs, the
    tasks, or just that the tokenizers differ (a BPE model is hundreds of KB)."""
    if what == "tokenizers":
        return "another vocabulary or tokenizer model"
    if what == "model configurations":
        keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
        return ", ".join(f"{k}: {a.get(k)!r} against {b.get(k)!r}" for k in keys[:4])
    return f"{a!r} against {b!r}"


def average_checkpoints(paths) -> dict:
    """Element-wise mean of the parameters of ``paths``: ``{name: ndarray}``.

    Every checkpoint must hold the same parameter names and shapes, the same model
    configuration (training-only settings such as dropout aside), task and tokenizer
    (else CheckpointError naming the difference). A tied matrix is stored once per
    checkpoint, so it is averaged once. The sum runs in float64; the result has the stored dtype.
    """
    np = backend.np
    paths = [Path(p) for p in paths]
    if not paths:
        raise CheckpointError("no checkpoints given to average")
    total, first, dtypes, model_of = None, None, {}, None
    for p in paths:
        params, header = read_params(p)
        if total is None:
            first, model_of = p, _what_it_models(header)
            total = {k: v.astype(np.float64) for k, v in params.items()}
            dtypes = {k: v.dtype for k, v in params.items()}
            continue
        for what, a, b in zip(_WHAT, model_of, _what_it_models(header)):
            if a != b:
                raise CheckpointError(
                    f"cannot average {p} with {first}: their {what} differ "
                    f"({_difference(what, b, a)}); average checkpoints of one run"
                )
        missing = sorted(set(total) - set(params))
        extra = sorted(set(params) - set(total))
        if missing or extra:
            raise CheckpointError(
                f"cannot average {p} with {first}: parameter names differ "
                f"(missing {missing[:5]}, unexpected {extra[:5]})"
            )
        for k, v in params.items():
            if v.shape != total[k].shape:
                raise CheckpointError(
                    f"cannot average {p} with {first}: {k!r} has shape {v.shape}, "
                    f"expected {total[k].shape}"
                )
            total[k] += v
    return {k: (v / len(paths)).astype(dtypes[k]) for k, v in total.items()}


__all__ = [
    "CHECKPOINT_RE",
    "MODEL_CLASSES",
    "Checkpoint",
    "CheckpointError",
    "average_checkpoints",
    "checkpoint_name",
    "last_checkpoints",
    "latest_checkpoint",
    "list_checkpoints",
    "load_checkpoint",
    "load_with_tokenizer",
    "read_params",
    "save_checkpoint",
]
