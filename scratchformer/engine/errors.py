"""Errors and input checks that name the problem.

Bad input should fail at the boundary with a sentence a user can act on ("token id 812
out of range for vocabulary of 800 in src"), never with a NumPy broadcasting traceback
from deep inside a backward pass.
"""

from __future__ import annotations

import dataclasses
import numbers

from scratchformer.engine import backend


class ScratchformerError(ValueError):
    """Base class for every input error raised by scratchformer."""


class ShapeError(ScratchformerError):
    """An array has the wrong rank or shape."""


class TokenError(ScratchformerError):
    """A token id is out of range, negative, or of a non-integer dtype."""


class SequenceTooLongError(ScratchformerError):
    """A sequence is longer than the positions the model supports."""


class StateDictError(ScratchformerError):
    """A state dict has missing, unexpected or mis-shaped entries."""


def check_rank(x, ndim: int, name: str, dims: str) -> None:
    """Raise ShapeError unless ``x`` has ``ndim`` axes; ``dims`` names them, e.g. "(B, T)"."""
    if not hasattr(x, "ndim") or x.ndim != ndim:
        got = getattr(x, "shape", type(x).__name__)
        raise ShapeError(f"{name} must have shape {dims} (rank {ndim}), got {got}")


def check_token_ids(ids, vocab_size: int, name: str):
    """Token ids must be integers in [0, vocab_size): returns them as an array of the
    active backend. Ids on the host are checked there, before they move (nothing is read
    back from a device; and a GPU's gather would wrap an id out of range instead of
    failing); ids already on a device are checked there, reading one flag back."""
    if not hasattr(ids, "dtype") or ids.dtype.kind not in "iu":
        got = getattr(ids, "dtype", type(ids).__name__)
        raise TokenError(f"{name} must hold integer token ids, got dtype {got}")
    if backend.on_host(ids):
        host = ids
        bad = ids.size > 0 and (ids.min() < 0 or ids.max() >= vocab_size)
        ids = backend.asarray(ids)
    else:  # already on a device
        bad = ids.size > 0 and bool(((ids < 0) | (ids >= vocab_size)).any())
        host = backend.asnumpy(ids) if bad else None
    if bad:
        lo, hi = int(host.min()), int(host.max())
        if lo < 0:
            raise TokenError(f"{name} holds a negative token id ({lo})")
        raise TokenError(
            f"{name} holds token id {hi}, out of range for a vocabulary of {vocab_size}"
        )
    return ids


def check_length(length: int, max_len: int, name: str) -> None:
    """A sequence of ``length`` positions must fit the model's ``max_len``."""
    if length > max_len:
        raise SequenceTooLongError(
            f"{name} has length {length}, longer than the {max_len} positions this model "
            "supports (config.max_len)"
        )


def check_ids(ids, vocab_size: int, max_len: int, name: str, dims: str = "(B, L)"):
    """Token ids where they enter a model: a (B, L) integer array with 1 <= L <= ``max_len``
    and every id in [0, ``vocab_size``). Returns them on the active backend (host ids are
    checked before they move)."""
    check_rank(ids, 2, name, dims)
    check_length(ids.shape[1], max_len, name)
    if ids.shape[1] == 0:
        raise ShapeError(f"{name} is empty (length 0)")
    return check_token_ids(ids, vocab_size, name)


def check_same_batch(a, b, name_a: str, name_b: str) -> None:
    """Two (B, ...) arrays must agree on the batch size."""
    if a.shape[0] != b.shape[0]:
        raise ShapeError(
            f"{name_a} and {name_b} disagree on batch size: {a.shape[0]} vs {b.shape[0]}"
        )


class ConfigError(ScratchformerError):
    """A training configuration is invalid: an unknown key, a bad value, a key that does
    not apply to the task, or settings a resumed run may not change."""


def need(cond, message: str, error: type[Exception] = ConfigError) -> None:
    """Raise ``error(message)`` unless ``cond``: the one check every validation is written
    with (``need(d_model > 0, "d_model must be positive")``)."""
    if not cond:
        raise error(message)


# -- the type checker of every config (model, training, tasks) -----------------------------
#: the type names an annotation may use, and the Python types they stand for
_TYPES = {"int": int, "float": float, "str": str, "bool": bool, "dict": dict, "None": type(None)}

#: a type annotation's name in a user's words
_WORDS = {
    "int": "a whole number",
    "float": "a number",
    "str": "text",
    "bool": "true or false",
    "dict": "a table",
    "None": "left out",
}


def _has_type(value, name: str) -> bool:
    if name in ("int", "float") and isinstance(value, bool):
        return False  # True is an int to Python, not to a config
    if name == "int":
        return isinstance(value, numbers.Integral)  # NumPy integers too
    if name == "float":
        return isinstance(value, numbers.Real)
    return isinstance(value, _TYPES[name])


def wrong_field_types(cls, values: dict) -> list[str]:
    """``["d_model must be a whole number, got 'abc'", ...]`` for the entries of
    ``values`` that are not of the annotated type of dataclass ``cls``'s field of that
    name (``int | None`` etc.; an int may stand for a float, a bool for neither): a
    config value of the wrong type is then a sentence, not a TypeError from a comparison
    deep inside. Every config class (model, training, tasks) is checked by this one
    function; each message starts with the field's name."""
    wrong = []
    for f in dataclasses.fields(cls):
        names = [t.strip() for t in str(f.type).split("|")]
        if f.name not in values or not all(t in _TYPES for t in names):
            continue  # absent, or an annotation this check does not know: not checked
        value = values[f.name]
        if not any(_has_type(value, t) for t in names):
            expected = " or ".join(_WORDS[t] for t in names)
            wrong.append(f"{f.name} must be {expected}, got {value!r}")
    return wrong


class ResourceError(ScratchformerError):
    """A request needs more memory than the machine has (estimated before any work)."""


def gigabytes(nbytes: float) -> str:
    """``"3.1 GB"``: a size for a message (two significant figures below 10 GB)."""
    gb = nbytes / 1e9
    return f"{gb:.2g} GB" if gb < 10 else f"{gb:.0f} GB"


