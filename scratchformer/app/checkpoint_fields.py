"""The fields of a checkpoint's JSON header, and the checks each must pass to be used.

The header (the ``__meta__`` member, see ``scratchformer.app.checkpoint``) is data from a
file: a hand-edited, truncated or foreign file can hold anything JSON can. Each field is
checked for its type and range before anything reads it, and a failure names the file
and the field in one line (``CheckpointError``), never a KeyError or TypeError from deep
inside, and never a value silently cast or fixed:

    format, version        "scratchformer.checkpoint", 1
    step                   an integer >= 0
    config                 a dict (``TransformerConfig.from_dict`` checks its fields)
    model                  absent, or {"class": name, "num_classes": int}
    meta                   absent, null or a dict; meta.tokenizer a dict, meta.task a
                           string, meta.labels a list of strings, meta.train_config a dict
    optimizer              null or a dict: t an integer >= 0, beta1/beta2 in [0, 1),
                           eps > 0, weight_decay >= 0 (numbers, finite)
    train_state            null or a dict: step, epoch, batch_index, tokens_seen, tokens,
                           seed integers >= 0, seconds a finite number >= 0; its step, when
                           present, the header's step
    arrays                 {name: [[non-negative ints], dtype]} for names model/<p>,
                           optim/m/<p>, optim/v/<p>; dtype float32 or float64, one for all
"""

from __future__ import annotations

import math

from scratchformer.app.compat import TRAIN_STATE_RENAMED
from scratchformer.app.data import tokenizer_from_dict
from scratchformer.engine.errors import ScratchformerError

FORMAT = "scratchformer.checkpoint"
VERSION = 1
META_KEY = "__meta__"
MODEL_PREFIX = "model/"
OPTIM_PREFIXES = {"m": "optim/m/", "v": "optim/v/"}

#: the dtypes parameters and moments are stored in
FLOAT_DTYPES = ("float32", "float64")
#: train_state's counters (and their names in earlier versions, ``compat``)
TRAIN_STATE_COUNTS = ("step", "epoch", "batch_index", "tokens_seen", "seed", *TRAIN_STATE_RENAMED)


class CheckpointError(ScratchformerError):
    """A checkpoint is missing, truncated, corrupted or does not match what loads it."""


def show(value, limit: int = 60) -> str:
    """``repr(value)``, shortened: a field's value in a one-line message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def show_size(n: int) -> str:
    """Bytes in the largest unit that keeps a number >= 1: ``2.1 GB``."""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _fail(path, field: str, must: str, value) -> CheckpointError:
    return CheckpointError(f"checkpoint {path}: {field} must be {must}, got {show(value)}")


def _count(header: dict, key: str, path, field: str) -> None:
    if key in header and not (_is_int(header[key]) and header[key] >= 0):
        raise _fail(path, field, "an integer >= 0", header[key])


def check_header(header, path) -> None:
    """Check every field of a parsed header (see the module's table); raise
    CheckpointError naming the first that fails."""
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a scratchformer checkpoint (format mismatch)")
    if header.get("version") != VERSION:
        raise CheckpointError(
            f"checkpoint {path} has format version {show(header.get('version'))}, this "
            f"scratchformer reads version {VERSION}"
        )
    if "step" not in header:
        raise CheckpointError(f"checkpoint {path}: the header has no step")
    _count(header, "step", path, "step")
    if "config" not in header:
        raise CheckpointError(f"checkpoint {path}: the header has no model config")
    if not isinstance(header["config"], dict):
        raise _fail(path, "config", "a dict of model settings", header["config"])
    model = header.get("model")
    if model is not None and not isinstance(model, dict):
        raise _fail(path, "model", "a dict naming the model class", model)
    _check_meta(header, path)
    _check_optimizer(header, path)
    _check_train_state(header, path)
    _check_arrays(header, path)


def _check_meta(header: dict, path) -> None:
    meta = header.get("meta")
    if meta is None:
        return
    if not isinstance(meta, dict):
        raise _fail(path, "meta", "a dict", meta)
    for key, kind, must in (
        ("tokenizer", dict, "a dict (a tokenizer's to_dict())"),
        ("train_config", dict, "a dict (a training configuration)"),
        ("task", str, "a task name"),
        ("labels", list, "a list of class labels"),
        ("data", str, "a training data fingerprint"),
    ):
        if key in meta and not isinstance(meta[key], kind):
            raise _fail(path, f"meta.{key}", must, meta[key])
    labels = meta.get("labels") or []
    if not all(isinstance(label, str) for label in labels):
        raise _fail(path, "meta.labels", "a list of strings", labels)


def _check_optimizer(header: dict, path) -> None:
    opt = header.setdefault("optimizer", None)
    if opt is None:
        return
    if not isinstance(opt, dict):
        raise _fail(path, "optimizer", "a dict of the optimizer's scalars or null", opt)
    if "t" not in opt:
        raise CheckpointError(f"checkpoint {path}: optimizer has no step count t")
    _count(opt, "t", path, "optimizer.t")
    for key, ok, must in (
        ("beta1", lambda b: 0 <= b < 1, "a number in [0, 1)"),
        ("beta2", lambda b: 0 <= b < 1, "a number in [0, 1)"),
        ("eps", lambda e: e > 0, "a number > 0"),
        ("weight_decay", lambda w: w >= 0, "a number >= 0"),
    ):
        if key in opt and not (_is_number(opt[key]) and ok(opt[key])):
            raise _fail(path, f"optimizer.{key}", must, opt[key])
    for key in OPTIM_PREFIXES:
        if key in opt:
            raise CheckpointError(
                f"checkpoint {path}: optimizer.{key} belongs in the arrays, not the header"
            )


def _check_train_state(header: dict, path) -> None:
    ts = header.get("train_state")
    if ts is None:
        return
    if not isinstance(ts, dict):
        raise _fail(path, "train_state", "a dict or null", ts)
    for key in TRAIN_STATE_COUNTS:
        _count(ts, key, path, f"train_state.{key}")
    if "seconds" in ts and not (_is_number(ts["seconds"]) and ts["seconds"] >= 0):
        raise _fail(path, "train_state.seconds", "a finite number >= 0", ts["seconds"])
    if "step" in ts and ts["step"] != header["step"]:
        raise CheckpointError(
            f"checkpoint {path}: train_state.step is {ts['step']}, the header's step is "
            f"{header['step']}"
        )


def _check_arrays(header: dict, path) -> None:
    """``arrays``: well-formed entries, known names, float dtypes, one dtype for all,
    and moments exactly when there is an optimizer entry."""
    arrays = header.get("arrays")
    if not isinstance(arrays, dict):
        raise _fail(path, "arrays", "a dict of {name: [shape, dtype]}", arrays)
    prefixes = (MODEL_PREFIX, *OPTIM_PREFIXES.values())
    for name, entry in arrays.items():
        where = f"arrays[{name!r}]"
        if not name.startswith(prefixes) or name in prefixes:
            raise CheckpointError(
                f"checkpoint {path}: {where} is not a parameter (model/<name>) or an "
                "optimizer moment (optim/m/<name>, optim/v/<name>)"
            )
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], list)):
            raise _fail(path, where, "[shape, dtype]", entry)
        shape, dtype = entry
        if not all(_is_int(n) and n >= 0 for n in shape):
            raise _fail(path, f"{where} shape", "a list of integers >= 0", shape)
        if dtype not in FLOAT_DTYPES:
            raise CheckpointError(
                f"checkpoint {path}: array {name!r} is {show(dtype)}: parameters and moments "
                f"must be one of {', '.join(FLOAT_DTYPES)}"
            )
    dtypes = sorted({entry[1] for entry in arrays.values()})
    if len(dtypes) > 1:
        first = {d: next(k for k, e in arrays.items() if e[1] == d) for d in dtypes}
        raise CheckpointError(
            f"checkpoint {path}: its arrays mix dtypes ("
            + ", ".join(f"{first[d]!r} is {d}" for d in dtypes)
            + "): one dtype for all"
        )
    moments = [k for k in arrays if not k.startswith(MODEL_PREFIX)]
    if moments and header["optimizer"] is None:
        raise CheckpointError(
            f"checkpoint {path}: it holds optimizer moments ({moments[0]!r}, ...) but no "
            "optimizer entry"
        )


def checked_tokenizer(d, path):
    """The tokenizer a checkpoint's ``meta.tokenizer`` rebuilds; CheckpointError naming
    the file and what is wrong when it does not."""
    if not isinstance(d, dict):
        raise _fail(path, "meta.tokenizer", "a dict (a tokenizer's to_dict())", d)
    if not isinstance(d.get("type"), str):
        raise _fail(path, "meta.tokenizer.type", "a tokenizer type name", d.get("type"))
    vocab = d.get("vocab")
    if "vocab" in d or "model" not in d:
        if not isinstance(vocab, dict) or not isinstance(vocab.get("tokens"), list):
            raise _fail(path, "meta.tokenizer.vocab", "a dict {'tokens': [...]}", vocab)
        bad = [t for t in vocab["tokens"] if not isinstance(t, str) or not t]
        if bad:
            raise _fail(path, "meta.tokenizer.vocab.tokens", "a list of non-empty strings", bad[0])
    try:
        return tokenizer_from_dict(d)
    except (ScratchformerError, KeyError, TypeError, ValueError, AttributeError) as e:
        message = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise CheckpointError(
            f"checkpoint {path}: meta.tokenizer does not rebuild a tokenizer: {message}"
        ) from None


__all__ = [
    "FLOAT_DTYPES",
    "FORMAT",
    "META_KEY",
    "MODEL_PREFIX",
    "OPTIM_PREFIXES",
    "VERSION",
    "CheckpointError",
    "check_header",
    "checked_tokenizer",
    "show",
    "show_size",
]
