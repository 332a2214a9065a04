"""A Hugging Face model folder as the importer reads it: ``config.json``, the weights
(``model.safetensors``, or its shards and index) and the tokenizer's files, each checked
where it is read and refused in one line naming the file and the problem.

The weights are read through safetensors' NumPy API, never through a pickle: a folder
that holds only ``pytorch_model.bin`` (a pickle, which can run code when loaded) is
refused with the command that converts it. Nothing is downloaded: the folder is one on
this machine.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from scratchformer.engine import backend, memory
from scratchformer.engine.errors import ScratchformerError

CONFIG = "config.json"
SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
#: the weights as other frameworks save them, refused: pickles (torch), TF, Flax
OTHER_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json", "tf_model.h5",
                 "flax_model.msgpack")
#: safetensors' dtype names -> NumPy's; bfloat16 has none
DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16"}
#: the largest safetensors header read (its JSON: names, dtypes, shapes, offsets)
MAX_HEADER = 100 * 2**20


class HFImportError(ScratchformerError):
    """A folder cannot be imported: a file is missing, unreadable or not what it must be,
    or the model is one scratchformer has no counterpart for."""


def convert_command(folder, architecture: str | None = None) -> str:
    """The one line that turns a folder's ``pytorch_model.bin`` into ``model.safetensors``
    with the model's own class (``architecture``: config.json's, e.g. GPT2LMHeadModel),
    run where torch and transformers are installed: it loads the pickle there."""
    f, cls = str(folder), architecture or "AutoModel"
    return (
        f'python -c "from transformers import {cls} as M; '
        f"M.from_pretrained({f!r}).save_pretrained({f!r}, safe_serialization=True)\""
    )


class HFFolder:
    """``HFFolder(path)``: the folder checked to exist; ``config`` (config.json's dict),
    ``tensors()`` and ``text(name)`` read what the model's importer asks for."""

    def __init__(self, path):
        self.path = Path(path)
        if not self.path.exists():
            raise HFImportError(f"no folder at {self.path}")
        if not self.path.is_dir():
            raise HFImportError(
                f"{self.path} is a file: give the model's folder (config.json, "
                "model.safetensors and the tokenizer's files)"
            )
        self.config = self._config()
        self.read: list[Path] = [self.path / CONFIG]  # every file read, for the output's check

    def _config(self) -> dict:
        path = self.path / CONFIG
        if not path.is_file():
            raise HFImportError(
                f"{self.path} holds no {CONFIG}: is it a Hugging Face model folder?"
            )
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise HFImportError(f"{path} is not readable JSON: {e}") from None
        if not isinstance(config, dict):
            raise HFImportError(f"{path} must hold a JSON object of settings")
        return config

    @property
    def architecture(self) -> str | None:
        """config.json's model class (``architectures[0]``), when it names one."""
        arch = self.config.get("architectures")
        ok = isinstance(arch, list) and arch and isinstance(arch[0], str) and arch[0].isidentifier()
        return arch[0] if ok else None

    def has(self, name: str) -> bool:
        return (self.path / name).is_file()

    def text(self, name: str) -> str:
        """The UTF-8 text of the file ``name`` of the folder."""
        path = self.path / name
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise HFImportError(f"cannot read {path}: {e}") from None
        self.read.append(path)
        return text

    def data(self, name: str) -> bytes:
        """The bytes of the file ``name`` of the folder (a SentencePiece model)."""
        path = self.path / name
        try:
            data = path.read_bytes()
        except OSError as e:
            raise HFImportError(f"cannot read {path}: {e}") from None
        self.read.append(path)
        return data

    # -- the weights ------------------------------------------------------------------------
    def weight_files(self) -> list[Path]:
        """``model.safetensors``, or the shards its index names; a folder with only a
        pickle (or another framework's file) is refused with the conversion command."""
        if self.has(SAFETENSORS):
            return [self.path / SAFETENSORS]
        if self.has(SAFETENSORS_INDEX):
            try:
                index = json.loads(self.text(SAFETENSORS_INDEX))
                shards = sorted(set(index["weight_map"].values()))
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                raise HFImportError(
                    f"{self.path / SAFETENSORS_INDEX} has no weight_map: {e}"
                ) from None
            files = [self.path / s for s in shards]
            missing = [f.name for f in files if not f.is_file()]
            if missing:
                raise HFImportError(f"{self.path} lacks the shard {missing[0]} its index names")
            return files
        other = [n for n in OTHER_WEIGHTS if self.has(n)]
        if other:
            raise HFImportError(
                f"{self.path} holds {other[0]}, not {SAFETENSORS}: scratchformer never loads "
                f"a pickle (it can run code); convert it where torch is installed: "
                f"{convert_command(self.path, self.architecture)}"
            )
        raise HFImportError(f"{self.path} holds no weights ({SAFETENSORS})")

    def tensors(self) -> dict:
        """Every tensor of the weights, ``{name: NumPy array}`` in float32 (a float16
        file is widened); the headers checked first (dtypes, memory)."""
        files = self.weight_files()
        headers = [read_header(f) for f in files]
        total = 0
        for f, header in zip(files, headers):
            for name, entry in header.items():
                if name == "__metadata__":
                    continue
                dtype = entry.get("dtype") if isinstance(entry, dict) else None
                if dtype not in DTYPES:
                    raise HFImportError(
                        f"{f}: tensor {name!r} is stored as {dtype}, which NumPy cannot read "
                        "(save the model in float32: model.float().save_pretrained(...))"
                    )
                n = 1
                for k in entry.get("shape", []):
                    n *= int(k)
                total += 4 * n
        memory.need_memory(
            3 * total, f"importing the {total / 4:,.0f} weights of {self.path}",
            "import on a machine with more memory",
        )
        out = {}
        np = backend.np
        for f in files:
            out.update({k: np.asarray(v, dtype=np.float32) for k, v in load_file(f).items()})
            self.read.append(f)
        return out


def read_header(path: Path) -> dict:
    """The JSON header of a safetensors file: ``{name: {"dtype", "shape", ...}}``."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise HFImportError(f"{path} is too short to be a safetensors file")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER:
                raise HFImportError(f"{path} is not a safetensors file (a header of {n:,} bytes)")
            header = json.loads(f.read(n).decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise HFImportError(f"{path} is not a readable safetensors file: {e}") from None
    if not isinstance(header, dict):
        raise HFImportError(f"{path} is not a safetensors file (its header is not a table)")
    return header


def load_file(path: Path) -> dict:
    """The tensors of a safetensors file through its NumPy API (no torch, no pickle)."""
    try:
        from safetensors.numpy import load_file as load  # noqa: PLC0415  (the gpt2 extra)
    except ImportError:
        raise HFImportError(
            "reading model.safetensors needs the safetensors library: pip install -e "
            "'.[gpt2]' (or pip install 'safetensors>=0.4')"
        ) from None
    try:
        return load(str(path))
    except Exception as e:  # safetensors raises its own SafetensorError on a damaged file
        raise HFImportError(f"{path} is not a readable safetensors file: {e}") from None


__all__ = ["HFFolder", "HFImportError", "convert_command", "load_file", "read_header"]
