"""Reading checkpoints: every field checked before it is used, memory bounded by the header.

A checkpoint is read in this order, so that a file that lies about its contents is
refused before its arrays are inflated (a 2 MB zip can inflate to gigabytes):

1. the zip directory: every member an ``.npy`` array, none twice, ``__meta__`` present
   and of a sensible size (at most ``MAX_HEADER_BYTES``);
2. ``__meta__``: the JSON header, each of its fields checked (``checkpoint_fields``);
3. every member's own ``.npy`` header (the first bytes of the member only): listed in the
   JSON header with the same shape and dtype, no Python objects, and a size in the zip
   directory equal to that of the array it declares;
4. the total of the declared arrays against the memory available;
5. the model the config describes, before it is built: its number of parameter arrays
   (read from the modules' own declarations, ``scratchformer.engine.models.sizes``, in a time
   that does not grow with its layers) against the arrays listed, its size against the
   memory available, then every listed name, shape and dtype against its parameters;
6. only then the arrays, each member's CRC-32 checked as it is read; every array must be
   finite (a checkpoint with NaN or infinite parameters or moments is refused, never
   loaded for translation or for resuming), Adam's second moments non-negative.

Every failure is a one-line ``CheckpointError`` naming the file and the field.
"""

from __future__ import annotations

import json
import math
import struct
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from scratchformer.app import compat
from scratchformer.app.checkpoint_fields import (
    FORMAT,
    META_KEY,
    MODEL_PREFIX,
    OPTIM_PREFIXES,
    CheckpointError,
    check_header,
    checked_tokenizer,
    show_size,
)
from scratchformer.app.compat import model_spec_of
from scratchformer.engine import backend, memory
from scratchformer.engine.errors import ConfigError, StateDictError
from scratchformer.engine.models import TransformerConfig
from scratchformer.engine.models.sizes import (
    MODEL_CLASSES,
    build_model,
    describe,
    model_bytes,
    model_class,
    parameter_shapes,
    parameter_totals,
)

#: the largest ``__meta__`` member read (a BPE tokenizer model inside it is a few MB)
MAX_HEADER_BYTES = 64 * 2**20

#: the largest ``.npy`` header read (NumPy's own limit): the dict of shape and dtype
NPY_HEADER_MAX = 10_000

#: what a damaged zip raises while it is read (each maps to "truncated or corrupted")
_DAMAGED = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    OSError,
    EOFError,
    ValueError,
    zlib.error,
    struct.error,
    RuntimeError,
    NotImplementedError,
)


@dataclass
class Checkpoint:
    model: object  # Transformer, LanguageModel or EncoderClassifier, parameters loaded
    config: TransformerConfig
    step: int  # optimizer steps taken when it was written
    meta: dict = field(default_factory=dict)  # free metadata; meta["tokenizer"]
    optimizer_state: dict | None = None  # Adam.state_dict() layout, or None
    train_state: dict | None = None  # the training loop's resume state, or None
    path: Path | None = None


def _check_memory(path, needed: int, what: str) -> None:
    """Refuse ``needed`` bytes when more than the host memory available (arrays are read
    to the host whatever the backend)."""
    free = memory.available_memory()
    if free is not None and needed > free:
        raise CheckpointError(
            f"checkpoint {path}: {what} {show_size(needed)}, more than the "
            f"{show_size(free)} of memory available"
        )


# -- the zip and its members --------------------------------------------------------------
def _damaged(path, e: BaseException) -> CheckpointError:
    """The error for a file that cannot be read as a zip: one that is not a zip at all
    (another kind of file: named as such), or a damaged one."""
    try:
        with open(path, "rb") as f:
            start = f.read(4)
    except OSError:
        start = b"PK"
    if not start:
        return CheckpointError(f"{path} is empty (0 bytes): it is not a checkpoint")
    if not start.startswith(b"PK"):  # every zip, an .npz too, starts so
        return CheckpointError(
            f"{path} is not a checkpoint: a checkpoint is an .npz (zip) archive, and this "
            f"file starts with {start!r}"
        )
    return CheckpointError(
        f"cannot read checkpoint {path}: the file is truncated or corrupted "
        f"({type(e).__name__}: {e})"
    )


class _Reader:
    """An open checkpoint whose header and member headers are checked; arrays on demand."""

    def __init__(self, path):
        self.path = path = Path(path)
        if path.is_dir():
            raise CheckpointError(f"{path} is a directory, not a checkpoint file")
        if not path.is_file():
            raise CheckpointError(f"no checkpoint file at {path}")
        try:
            self.zf = zipfile.ZipFile(path)
        except _DAMAGED as e:
            raise _damaged(path, e) from None
        try:
            self.members = self._members()
            self.header = self._header()
            self.specs = {k: self._member_spec(k) for k in self.members}
        except CheckpointError:
            self.zf.close()
            raise
        except _DAMAGED as e:
            self.zf.close()
            raise _damaged(path, e) from None
        except BaseException:
            self.zf.close()
            raise
        declared = sum(size for _, _, size in self.specs.values())
        _check_memory(path, declared, f"its arrays ({len(self.specs)} of them) need")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.zf.close()

    def _members(self) -> dict:
        """``{array name: ZipInfo}`` (names without ``.npy``), the header's member apart."""
        members = {}
        for info in self.zf.infolist():
            name = info.filename
            if not name.endswith(".npy"):
                raise CheckpointError(f"checkpoint {self.path}: member {name!r} is not an array")
            name = name[: -len(".npy")]
            if name in members:
                raise CheckpointError(f"checkpoint {self.path}: member {name!r} appears twice")
            members[name] = info
        if META_KEY not in members:
            raise CheckpointError(
                f"{self.path} is not a scratchformer checkpoint (no {META_KEY} entry)"
            )
        return members

    def _npy_header(self, name: str) -> tuple:
        """``(shape, dtype)`` from the first bytes of member ``name`` (its ``.npy``
        header), checked against its size in the zip directory; no data is read."""
        fmt = backend.np.lib.format
        info = self.members[name]
        with self.zf.open(info) as f:
            first = f.read(12)  # magic, version, header length: sized before it is read
            version = tuple(first[6:8])
            if first[:6] != b"\x93NUMPY" or version not in ((1, 0), (2, 0)):
                raise CheckpointError(
                    f"checkpoint {self.path}: member {name!r} is not a .npy array of format "
                    "version 1.0 or 2.0"
                )
            width = 2 if version == (1, 0) else 4  # bytes of the header length
            (length,) = struct.unpack("<H" if width == 2 else "<I", first[8 : 8 + width])
            if length > NPY_HEADER_MAX:
                raise CheckpointError(
                    f"checkpoint {self.path}: array {name!r} has a .npy header of "
                    f"{show_size(length)}, more than the {show_size(NPY_HEADER_MAX)} one may be"
                )
            f.seek(0)
            fmt.read_magic(f)
            read_header = (
                fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
            )
            shape, _, dtype = read_header(f)
            start = f.tell()
        if dtype.hasobject:
            raise CheckpointError(
                f"checkpoint {self.path}: array {name!r} holds Python objects (pickled data), "
                "which a checkpoint never does: refused unread"
            )
        size = math.prod(shape) * dtype.itemsize
        if info.file_size != start + size:
            raise CheckpointError(
                f"checkpoint {self.path}: array {name!r} declares {dtype}{list(shape)} "
                f"({show_size(size)}) but its zip entry inflates to {show_size(info.file_size)}"
            )
        return list(shape), dtype

    def _header(self) -> dict:
        """The JSON header, its size checked before it is read, its fields checked after."""
        info = self.members[META_KEY]
        if info.file_size > MAX_HEADER_BYTES:
            raise CheckpointError(
                f"checkpoint {self.path}: its {META_KEY} header is {show_size(info.file_size)}, "
                f"more than the {show_size(MAX_HEADER_BYTES)} a header may be"
            )
        shape, dtype = self._npy_header(META_KEY)
        if dtype != backend.np.uint8 or len(shape) != 1:
            raise CheckpointError(
                f"checkpoint {self.path}: its {META_KEY} header is {dtype}{shape}, "
                "expected uint8 bytes"
            )
        with self.zf.open(self.members.pop(META_KEY)) as f:
            blob = backend.np.lib.format.read_array(f, allow_pickle=False)
            f.read(1)  # at the end of the member: its CRC-32 is checked
        try:
            header = json.loads(blob.tobytes().decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
            raise CheckpointError(f"checkpoint {self.path} has a corrupted header: {e}") from None
        check_header(header, self.path)
        listed = header["arrays"]
        if set(listed) != set(self.members):
            missing = sorted(set(listed) - set(self.members))
            extra = sorted(set(self.members) - set(listed))
            parts = [f"arrays missing {missing[:5]}"] if missing else []
            parts += [f"unlisted {extra[:5]}"] if extra else []
            raise CheckpointError(f"checkpoint {self.path} is inconsistent: {', '.join(parts)}")
        return header

    def _member_spec(self, name: str) -> tuple:
        """``(shape, dtype, bytes)`` of a listed member, its ``.npy`` header agreeing with
        the JSON header's entry."""
        shape, dtype = self._npy_header(name)
        want_shape, want_dtype = self.header["arrays"][name]
        if shape != want_shape or str(dtype) != want_dtype:
            raise CheckpointError(
                f"checkpoint {self.path}: array {name!r} is {dtype}{shape}, "
                f"the header says {want_dtype}{want_shape}"
            )
        return shape, str(dtype), math.prod(shape) * dtype.itemsize

    def arrays(self) -> dict:
        """Every array, read (CRC-32 checked) and its values checked."""
        arrays = {}
        try:
            for name, info in self.members.items():
                with self.zf.open(info) as f:
                    arrays[name] = backend.np.lib.format.read_array(f, allow_pickle=False)
                    if f.read(1):
                        raise ValueError(f"array {name!r} is followed by extra data")
        except _DAMAGED as e:
            raise _damaged(self.path, e) from None
        for name, a in arrays.items():
            _check_values(self.path, name, a)
        return arrays


def _check_values(path, name: str, a) -> None:
    """Refuse non-finite values anywhere and a negative Adam second moment."""
    np = backend.np
    finite = np.isfinite(a)
    if not finite.all():
        bad = int(a.size - np.count_nonzero(finite))
        raise CheckpointError(
            f"checkpoint {path}: array {name!r} holds {bad} non-finite value(s) (NaN or "
            "infinite): a diverged state is never loaded"
        )
    if name.startswith(OPTIM_PREFIXES["v"]) and a.size and float(a.min()) < 0:
        raise CheckpointError(
            f"checkpoint {path}: array {name!r} holds negative values: Adam's second moment "
            "is a mean of squares, never negative"
        )


def _split(arrays: dict) -> tuple[dict, dict]:
    """Model parameters, and optimizer moments ``{"m": {...}, "v": {...}}``."""
    params = {k[len(MODEL_PREFIX) :]: v for k, v in arrays.items() if k.startswith(MODEL_PREFIX)}
    moments = {
        m: {k[len(p) :]: v for k, v in arrays.items() if k.startswith(p)}
        for m, p in OPTIM_PREFIXES.items()
    }
    return params, moments


# -- the model it holds -------------------------------------------------------------------
def _check_model(header: dict, config: TransformerConfig, path) -> dict:
    """The model a checkpoint's parameters load into, checked before it is built: its
    class, then its number of parameter arrays against the arrays listed (so that a small
    file declaring a huge model is refused at once, and the names read below are as many
    as the file lists), its size (parameters and gradients, with the arrays read) against
    the memory available, then every listed name, shape and dtype against its
    parameters. Returns its spec."""
    spec = model_spec_of(header)
    try:
        model_class(spec)
        tensors, _ = parameter_totals(spec, config)
    except (ConfigError, TypeError, ValueError) as e:
        raise CheckpointError(f"checkpoint {path}: cannot describe its model: {e}") from None
    arrays = header["arrays"]
    listed = [k for k in arrays if k.startswith(MODEL_PREFIX)]
    if len(listed) != tensors:  # the names and shapes are read once the counts agree
        raise CheckpointError(
            f"checkpoint {path}: its parameters do not match the model its config describes: "
            f"it lists {len(listed)} parameter arrays, {describe(spec, config)} has {tensors}"
        )
    declared = sum(math.prod(shape) * backend.np.dtype(d).itemsize for shape, d in arrays.values())
    _check_memory(
        path,
        declared + model_bytes(spec, config),
        f"the model its config describes ({describe(spec, config)}) and its arrays need",
    )
    _check_shapes(header, parameter_shapes(spec, config), path)
    return spec


def _check_shapes(header: dict, shapes: dict, path) -> None:
    """Before any array is read: the listed parameters and moments are the model's, of
    its shapes and its dtype (never cast)."""
    listed = header["arrays"]
    names = {k[len(MODEL_PREFIX) :] for k in listed if k.startswith(MODEL_PREFIX)}
    missing, extra = sorted(set(shapes) - names), sorted(names - set(shapes))
    if missing or extra:
        raise CheckpointError(
            f"checkpoint {path}: its parameters do not match the model its config describes: "
            f"missing {missing[:3]}, unexpected {extra[:3]}"
        )
    prefixes = [MODEL_PREFIX] + ([*OPTIM_PREFIXES.values()] if header["optimizer"] else [])
    want_dtype = str(backend.np.dtype(backend.get_dtype()))
    for prefix in prefixes:
        for k, shape in shapes.items():
            name = prefix + k
            if name not in listed:
                raise CheckpointError(
                    f"checkpoint {path}: it has optimizer state but no array {name!r}"
                )
            stored, dtype = listed[name]
            if tuple(stored) != tuple(shape):
                raise CheckpointError(
                    f"checkpoint {path}: state dict shapes do not match the model: {name!r} "
                    f"is {stored}, the model's {k} is {list(shape)}"
                )
            if dtype != want_dtype:
                raise CheckpointError(
                    f"checkpoint {path}: array {name!r} is {dtype}, the model is built in "
                    f"{want_dtype} (load a float64 checkpoint inside "
                    "scratchformer.engine.backend.precision('float64'))"
                )


def _read_checked(path) -> tuple:
    """``(header, config, model, arrays)``: a checkpoint read as ``load_checkpoint`` and
    ``read_params`` read it, its arrays checked against the model its config describes
    (built empty) before they are read."""
    with _Reader(path) as reader:
        header = reader.header
        try:
            config = TransformerConfig.from_dict(compat.model_config(header["config"]))
        except (TypeError, ValueError) as e:
            raise CheckpointError(f"checkpoint {path} holds an invalid model config: {e}") from None
        spec = _check_model(header, config, path)
        try:
            model = build_model(spec, config)
        except (ConfigError, TypeError, ValueError) as e:
            raise CheckpointError(f"checkpoint {path}: cannot build its model: {e}") from None
        return header, config, model, reader.arrays()


def read_header(path) -> dict:
    """A checkpoint's header, every field checked (steps 1-3 above); no array is read."""
    with _Reader(Path(path)) as reader:
        return reader.header


def read_params(path) -> tuple[dict, dict]:
    """``(params, header)``: a checkpoint's parameters as NumPy arrays, checked as
    ``load_checkpoint`` checks them (the model they are checked against is dropped)."""
    header, _, _, arrays = _read_checked(Path(path))
    return _split(arrays)[0], header


def load_checkpoint(path) -> Checkpoint:
    """Read a checkpoint and rebuild its model (of whichever class) on the active backend.

    Raises CheckpointError for a missing, truncated, corrupted, inconsistent or
    invalid file, before reading its arrays wherever the header tells.
    """
    path = Path(path)
    header, config, model, arrays = _read_checked(path)
    params, moments = _split(arrays)
    try:
        model.load_state_dict(params)
    except StateDictError as e:
        raise CheckpointError(f"checkpoint {path}: {e}") from None
    optimizer_state = None
    if header["optimizer"] is not None:
        optimizer_state = {**header["optimizer"], **moments}
    return Checkpoint(
        model=model,
        config=config,
        step=header["step"],
        meta=header.get("meta") or {},
        optimizer_state=optimizer_state,
        train_state=header.get("train_state"),
        path=path,
    )


#: where each kind of model is used from the command line
_USED_BY = {
    "Transformer": "scratchformer translate or evaluate",
    "LanguageModel": "scratchformer generate",
    "EncoderClassifier": "the Python API (scratchformer.app.checkpoint.load_with_tokenizer)",
}


def load_with_tokenizer(path, expect: type | None = None) -> tuple[Checkpoint, object]:
    """``(checkpoint, tokenizer)`` for the tools that read and write text (translate,
    evaluate, generate, plot): the checkpoint's model and the tokenizer saved with it.

    Raises CheckpointError when the checkpoint holds no tokenizer, a tokenizer entry that
    does not rebuild, or one whose vocabulary size differs from the model's (a
    vocabulary/checkpoint mismatch would otherwise surface as an index error deep inside
    the embedding), or, with ``expect`` (a model class), a model of another class.
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
    tok = checked_tokenizer(ckpt.meta["tokenizer"], path)
    if len(tok.vocab) != ckpt.config.vocab_size:
        raise CheckpointError(
            f"vocabulary/checkpoint mismatch in {path}: the tokenizer has {len(tok.vocab)} ids, "
            f"the model's vocab_size is {ckpt.config.vocab_size}"
        )
    return ckpt, tok


__all__ = [
    "FORMAT",
    "MAX_HEADER_BYTES",
    "MODEL_CLASSES",
    "Checkpoint",
    "CheckpointError",
    "load_checkpoint",
    "load_with_tokenizer",
    "read_header",
    "read_params",
]
