"""Text files as the program reads them, and the monolingual corpora.

    for lineno, line in iter_text_lines("src.txt"): ...      # (1, "first line"), ...
    iter_text_lines(sys.stdin.buffer, "stdin")                # an open binary stream
    load_lines("data/web-text")   {split: [verse]}           from {train,dev,test}.txt
    load_labelled("data/genre")   {split: [(label, verse)]}  from {train,dev,test}.tsv

Every text the program reads from a user goes through ``iter_text_lines``, so that all
of them follow one rule:

- UTF-8, decoded line by line: a byte sequence that is not UTF-8 is an error naming the
  file, the line and the column (``src.txt: line 3 is not UTF-8 (byte 0xff at column
  7)``), not a traceback and not a guess at another encoding;
- a NUL byte is an error too: valid UTF-8, but no text of ours holds one, and it is what
  a UTF-16 file or a binary file looks like when read as UTF-8;
- lines end at ``\n`` only. A ``\r\n`` ending loses its ``\r`` (a file written on
  Windows reads like one written anywhere else); a ``\r`` elsewhere stays part of the
  line, so that the lines read are the lines a line-counting tool sees (a line that
  Python's universal newlines would split in two stays one);
- a UTF-8 byte order mark at the start of the file is dropped (some editors write one;
  it is not part of the first line's text; a file holding nothing else is empty); the
  last line needs no ``\n``;
- a line is bounded (``LineLimit``): 64 bytes for each position of the model that reads
  it (``64 * max_len``: 64 KiB for ``max_len = 1024``), or 1 MiB where no model is at
  hand yet (the ``data`` commands, a metrics log, a training run whose model is chosen
  from its data). A longer line is an error naming its line number, found after reading
  at most one byte more than the limit: a file with no line breaks (``/dev/zero``, a
  binary file, a 100 MB line) costs no more memory than one allowed line.

``scratchformer data web-text`` and ``scratchformer data genre`` write the corpora, one
folder each holding its splits, as every data set does (``data/<name>/<split>.<ext>``);
the former layout (``data/web.train.txt``, ``data/genre.train.tsv``) is still read. A
missing corpus is an error naming the command that makes it. ``words`` is the
classifier's pre-tokenisation.
"""

from __future__ import annotations

import io
import os
import re
import shlex
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from scratchformer.app import writer
from scratchformer.app.compat import split_file
from scratchformer.engine.errors import ScratchformerError

SPLITS = ("train", "dev", "test")


class CorpusError(ScratchformerError):
    """A corpus file is missing or holds nothing usable."""


class TextEncodingError(CorpusError):
    """A text file holds bytes that are not UTF-8 text (or a NUL byte)."""


class LineTooLongError(CorpusError):
    """A line of text is longer than the program reads (``LineLimit``)."""


BOM = "\ufeff"

#: bytes a line may hold for each position of the model that reads it: far more than
#: text needs (a subword averages under 8 bytes, a UTF-8 character takes at most 4)
BYTES_PER_POSITION = 64

#: the longest line read where no model is at hand (1 MiB)
MAX_LINE_BYTES = 1 << 20


@dataclass(frozen=True)
class LineLimit:
    """The longest line a reader accepts: ``BYTES_PER_POSITION * max_len`` bytes for a
    model of ``max_len`` positions, ``MAX_LINE_BYTES`` without one (``max_len=None``).
    A text stream already decoded (a ``StringIO``) counts characters instead of bytes."""

    max_len: int | None = None

    @property
    def bytes(self) -> int:
        return MAX_LINE_BYTES if self.max_len is None else BYTES_PER_POSITION * self.max_len

    def error(self, name: str, lineno: int) -> LineTooLongError:
        why = (
            "the most read where no model is at hand"
            if self.max_len is None
            else f"{BYTES_PER_POSITION} bytes for each of the model's {self.max_len} positions"
        )
        return LineTooLongError(
            f"{name}: line {lineno} is longer than {self.bytes:,} bytes ({why}): a line is "
            "one sentence; split it (or is this not a text file?)"
        )


#: the limit of a reader with no model at hand
NO_MODEL = LineLimit()


def iter_text_lines(
    source, name: str | None = None, limit: LineLimit = NO_MODEL
) -> Iterator[tuple[int, str]]:
    """``(line number from 1, line)`` for each line of ``source``, read as the module
    doc says. ``source`` is a path or an open stream: a binary one (``sys.stdin.buffer``)
    is decoded here; a text one (a ``StringIO``) is taken as already decoded. ``name``
    is what error messages call the file (default: the path itself); a line longer than
    ``limit`` is an error.

    Lines are read one at a time, at most ``limit.bytes + 1`` bytes a read, so memory
    stays that of one allowed line, and a stream such as a pipe gives each line as soon
    as it arrives."""
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as f:
            yield from iter_text_lines(f, str(source) if name is None else name, limit)
        return
    name = name or str(getattr(source, "name", "input"))
    most = limit.bytes
    end = b"\n" if _is_binary(source) else "\n"
    lines = iter(lambda: source.readline(most + 1), end[:0])
    for lineno, raw in enumerate(lines, start=1):
        if len(raw) > most and not raw.endswith(end):
            raise limit.error(name, lineno)
        text = raw if isinstance(raw, str) else _decode(raw, lineno, name)
        if text.endswith("\n"):
            text = text[:-2] if text.endswith("\r\n") else text[:-1]
        if lineno == 1 and text.startswith(BOM):
            text = text[1:]
            if text == "" and not raw.endswith(b"\n" if isinstance(raw, bytes) else "\n"):
                return  # a byte order mark alone: an empty file, not one empty line
        if "\0" in text:
            raise TextEncodingError(
                f"{name}: line {lineno} holds a NUL byte at column {text.index(chr(0)) + 1} "
                "(a binary or UTF-16 file? text must be UTF-8)"
            )
        yield lineno, text


def _is_binary(stream) -> bool:
    """Whether ``stream`` gives bytes (a binary file or buffer) rather than str."""
    return not isinstance(stream, io.TextIOBase)


def _decode(raw: bytes, lineno: int, name: str) -> str:
    """One line's bytes as text; an error naming the line and column of a bad byte."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        column = len(raw[: e.start].decode("utf-8")) + 1  # characters, counted from 1
        if lineno == 1 and raw.startswith(BOM.encode("utf-8")):
            column -= 1  # the byte order mark is not part of the line
        raise TextEncodingError(
            f"{name}: line {lineno} is not UTF-8 (byte 0x{raw[e.start]:02x} at column {column})"
        ) from None


def not_a_file(path) -> str:
    """Why ``path`` cannot be read as a data file, in words ("is a directory, not a
    file"), or '' when it is a regular file (through links). A missing file is "not
    found": the caller says what makes it; a named pipe or a device is not a data set,
    which the program reads more than once."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return "not found"
    except PermissionError:
        return "cannot be read (permission denied)"
    except OSError as e:
        return f"cannot be read ({(e.strerror or str(e)).lower()})"
    if stat.S_ISREG(st.st_mode):
        return ""
    if stat.S_ISDIR(st.st_mode):
        return "is a directory, not a file"
    kind = "a named pipe (FIFO)" if stat.S_ISFIFO(st.st_mode) else "a device or a socket"
    return f"is {kind}, not a file (a data set is read more than once)"


def split_of_data_set(path) -> str:
    """What ``path`` is to a data set ("the train split of the data set in data/bible"):
    a ``{train,dev,test}.{tsv,txt}`` beside another split of the same kind; '' otherwise
    (so that an output over it is named for what it is)."""
    path = Path(path)
    split, _, ext = path.name.partition(".")
    if split not in SPLITS or ext not in ("tsv", "txt"):
        return ""
    others = [s for s in SPLITS if s != split and (path.parent / f"{s}.{ext}").is_file()]
    return f"the {split} split of the data set in {path.parent}" if others else ""


#: the commands that rebuild each kind of data set, named where a set is not whole and
#: its manifest names none
REBUILD = {
    "pairs": "scratchformer data pairs FILE --out {d} --overwrite` (your pairs) or "
    "`scratchformer data bible --out {d} --overwrite",
    "web-text": "scratchformer data web-text --out {d} --overwrite",
    "genre": "scratchformer data genre --out {d} --overwrite",
}


def check_data_set(folder, names, kind: str) -> None:
    """Refuse, in one line naming the command that rebuilds it, a data set whose files
    ``names`` in ``folder`` are not one whole set by its manifest (``writer.check_manifest``:
    written last by the ``data`` commands; a folder without one, made by hand or by a
    version before manifests, is read as it is unless an interrupted write's temporary
    files lie beside its splits). ``kind``: the data set's kind ("pairs", "web-text",
    "genre"), for the command when the manifest names none."""
    got = writer.check_manifest(folder, names)
    if not got.problem:
        return
    command = got.command or REBUILD[kind].format(d=shlex.quote(str(folder)))
    edited = " (edited, or" in got.problem
    also = (
        f", or delete {Path(folder) / writer.MANIFEST_NAME} to read the files as they are"
        if edited
        else ""
    )
    raise CorpusError(
        f"{folder} is not a whole data set: {got.problem}; rebuild it with `{command}`{also}"
    )


def _need_file(path: Path, command: str) -> Path:
    why = not_a_file(path)
    if why == "not found":
        raise CorpusError(f"{path} not found: prepare it first with `scratchformer {command}`")
    if why:
        raise CorpusError(
            f"{path} {why}: a split must be a file, as `scratchformer {command}` writes"
        )
    return path


def _split_file(d: Path, split: str, ext: str, former: str, command: str) -> Path:
    """``d/<split>.<ext>`` (or the former layout's file, ``compat.split_file``); missing:
    an error naming the command that writes it."""
    path = split_file(d, split, ext, former)
    return path if path.is_file() else _need_file(d / f"{split}.{ext}", command)


def load_lines(data_dir, limit: LineLimit = NO_MODEL) -> dict:
    """``{split: [line]}`` from ``{train,dev,test}.txt`` (blank lines skipped)."""
    d = Path(data_dir)
    paths = {s: _split_file(d, s, "txt", "web", "data web-text") for s in SPLITS}
    check_data_set(d, [p.name for p in paths.values()], "web-text")
    out = {}
    for s, p in paths.items():
        out[s] = [line for _, line in iter_text_lines(p, limit=limit) if line.strip()]
        if not out[s]:
            raise CorpusError(f"{p} holds no lines")
    return out


def load_labelled(data_dir, limit: LineLimit = NO_MODEL) -> dict:
    """``{split: [(label, text)]}`` from ``{train,dev,test}.tsv``
    (``label<TAB>text[<TAB>ref]``; lines without a text are skipped)."""
    d = Path(data_dir)
    paths = {s: _split_file(d, s, "tsv", "genre", "data genre") for s in SPLITS}
    check_data_set(d, [p.name for p in paths.values()], "genre")
    out = {}
    for s, p in paths.items():
        rows = []
        for _, line in iter_text_lines(p, limit=limit):
            parts = line.split("\t")
            if len(parts) >= 2 and parts[1]:
                rows.append((parts[0], parts[1]))
        if not rows:
            raise CorpusError(f"{p} holds no label<TAB>text lines")
        out[s] = rows
    return out


def words(text: str) -> str:
    """The classifier's pre-tokenisation: lower case, words and punctuation apart."""
    return " ".join(re.findall(r"\w+|[^\w\s]", text.lower()))


__all__ = [
    "BYTES_PER_POSITION",
    "MAX_LINE_BYTES",
    "NO_MODEL",
    "CorpusError",
    "LineLimit",
    "LineTooLongError",
    "TextEncodingError",
    "check_data_set",
    "iter_text_lines",
    "load_labelled",
    "load_lines",
    "not_a_file",
    "split_of_data_set",
    "words",
]
