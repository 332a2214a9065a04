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

Reading (``scratchformer.app.checkpoint_read``; the header's fields and their checks:
``scratchformer.app.checkpoint_fields``) checks everything it can before it inflates an
array and raises a one-line ``CheckpointError`` naming the file and the field: a
truncated or corrupted zip (each member carries a CRC-32), a missing or unreadable
header, arrays that disagree with the header or inflate to more than they declare, more
data than the memory available, a field of the wrong type or range, a config or state
that does not fit, a dtype other than the model's, a non-finite parameter or moment.

``average_checkpoints(paths)`` is the paper's checkpoint averaging: the element-wise
mean of the parameters of several checkpoints of one model.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from scratchformer.app import compat, writer
from scratchformer.app.checkpoint_fields import (
    FORMAT,
    META_KEY,
    MODEL_PREFIX,
    OPTIM_PREFIXES,
    VERSION,
    CheckpointError,
)
from scratchformer.app.checkpoint_read import (
    Checkpoint,
    load_checkpoint,
    load_with_tokenizer,
    read_header,
    read_params,
)
from scratchformer.app.compat import task_of
from scratchformer.engine import backend
from scratchformer.engine.errors import ConfigError
from scratchformer.engine.models import TransformerConfig
from scratchformer.engine.models.sizes import MODEL_CLASSES, model_spec

#: ``checkpoint_<step>.npz``: the step is read as a number (``checkpoint_10`` after ``_9``).
CHECKPOINT_RE = re.compile(r"^checkpoint_(\d+)\.npz$")


def checkpoint_name(step: int) -> str:
    return f"checkpoint_{int(step)}.npz"


# -- writing -------------------------------------------------------------------------------
def _optimizer_state(optimizer) -> dict | None:
    if optimizer is None:
        return None
    return optimizer.state_dict() if hasattr(optimizer, "state_dict") else dict(optimizer)


def _create_temporary(path: Path):
    """Step 1 of a save: ``(fd, name)`` of an empty temporary file beside ``path``."""
    return writer.create_temporary(path)


def save_checkpoint(
    path, model, *, step=0, optimizer=None, meta=None, train_state=None, role=None
) -> Path:
    """Write ``model`` (and optionally an optimizer's state) to ``path`` atomically.

    ``optimizer``: an ``Adam`` (or its ``state_dict()``); ``meta`` and ``train_state``:
    JSON-serialisable dicts. Returns the path written. A parameter or moment that is not
    finite is refused (CheckpointError naming it), as the reader would refuse it: a
    diverged state is never written.

    The write goes in three steps, each its own function: ``_create_temporary`` (an empty
    file beside ``path``), ``_write_arrays`` (written and fsync'ed), ``_install`` (renamed
    onto ``path``, the directory fsync'ed); a kill between two leaves the old file or the
    new one under ``path`` (tests/faults/test_faults.py kills a save after each step).
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
    for name, a in arrays.items():
        a = np.asarray(a)
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            raise CheckpointError(
                f"cannot save {path}: {name!r} holds non-finite values (NaN or infinite), "
                "which no checkpoint is read with: a diverged model is not saved"
            )
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
        _write_arrays(fd, arrays)
        _install(tmp, path)
    except BaseException:
        writer.discard(tmp)
        raise
    if role is not None:  # an output of a command's (average -o): it may replace it later
        writer.remember(path, role)
    return path


def _write_arrays(fd: int, arrays: dict) -> None:
    """Step 2: ``arrays`` as an ``.npz`` into the open file ``fd``, flushed and fsync'ed;
    closes ``fd``."""
    writer.fill(fd, lambda f: writer.savez(f, arrays, backend.np))


def _install(tmp, path: Path) -> None:
    """Step 3: rename the written temporary file onto ``path``, durably."""
    writer.install(tmp, path)


def _model_spec(model) -> dict:
    """What, besides its config, rebuilds ``model``: its class (and a classifier's classes)."""
    try:
        return model_spec(model)
    except ConfigError as e:
        raise CheckpointError(f"cannot save it: {e}") from None


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
    if not found:
        raise CheckpointError(f"no checkpoints: {directory} holds 0 checkpoint_<step>.npz files")
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


# What must agree for a mean of parameters to mean anything: the same architecture
# (every config field but the training-only ones), the same task and the same tokenizer.
_TRAINING_ONLY = ("seed", "P_drop", "P_drop_attn", "P_drop_ffn", "eps_ls", "extra")
_WHAT = ("model configurations", "tasks", "tokenizers", "seeds", "training data")


def _what_it_models(header: dict) -> tuple:
    """What must agree for a mean of parameters to mean anything: one run's checkpoints
    share the architecture, the task, the tokenizer, the seeds (the run's, and the
    model's initialisation) and the training data (its fingerprint), where recorded
    (``_agree``)."""
    config = header.get("config") or {}
    try:  # resolved, so that a default written out (N_dec = N) equals one left implicit
        config = TransformerConfig.from_dict(compat.model_config(config)).to_dict()
    except (TypeError, ValueError):
        pass  # compared as stored; reading the model reports what is wrong with it
    meta = header.get("meta") or {}
    stored = meta.get("train_config") if isinstance(meta.get("train_config"), dict) else {}
    seeds = {"run": stored.get("seed"), "model": config.get("seed")}
    data = meta.get("data") or (header.get("train_state") or {}).get("data")
    config = {k: v for k, v in config.items() if k not in _TRAINING_ONLY}
    return config, task_of(meta), meta.get("tokenizer"), seeds, data


def _agree(a, b) -> bool:
    """Equal, where both are recorded: a seed or a data fingerprint that a checkpoint
    does not hold (None; written by the API or an earlier version) is not compared."""
    if a is None or b is None:
        return True
    if isinstance(a, dict) and isinstance(b, dict) and set(a) == set(b) and "run" in a:
        return all(_agree(a[k], b[k]) for k in a)
    return a == b


def _difference(what: str, a, b) -> str:
    """``a`` against ``b`` in a few words: the differing keys of two model configs, the
    tasks, or just that the tokenizers differ (a BPE model is hundreds of KB)."""
    if what == "tokenizers":
        return "another vocabulary or tokenizer model"
    if what in ("model configurations", "seeds"):
        keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
        return ", ".join(f"{k}: {a.get(k)!r} against {b.get(k)!r}" for k in keys[:4])
    return f"{a!r} against {b!r}"


def average_checkpoints(paths) -> dict:
    """Element-wise mean of the parameters of ``paths``: ``{name: ndarray}``.

    Every checkpoint must come from one run: the same parameter names and shapes, model
    configuration (training-only settings such as dropout aside), task, tokenizer,
    seeds and training data (else CheckpointError naming the difference). A tied matrix
    is stored once per checkpoint, so it is averaged once. The sum runs in float64; the
    result has the stored dtype.
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
            if not _agree(a, b):
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
    "read_header",
    "read_params",
    "save_checkpoint",
]
