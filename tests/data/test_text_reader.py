"""The reader of every user text (``iter_text_lines``): lines end at ``\\n`` only (not
at a bare ``\\r``, U+2028 or the other characters ``str.splitlines`` splits at), a CRLF
ending loses its ``\\r``, a leading byte order mark goes, a stream is read a line at a
time; and the one warning about tokens unknown to the vocabulary (``UnknownTokens``).
The commands' handling of bad text is in tests/faults/test_text_input.py."""

import io

import pytest

from scratchformer.app.data.text import CorpusError, iter_text_lines
from scratchformer.app.data.tokenizers import CharTokenizer, UnknownTokens, WhitespaceTokenizer
from scratchformer.app.data.vocab import Vocab

BOM = b"\xef\xbb\xbf"


@pytest.mark.parametrize(
    "raw, lines",
    [
        (b"", []),
        (b"\n", [""]),
        (b"a\nb", ["a", "b"]),
        (b"a\r\nb\r\n", ["a", "b"]),
        (b"a\rb\n", ["a\rb"]),
        (b"a\r\r\n", ["a\r"]),  # only the \r of the line ending goes
        (b"a\r", ["a\r"]),
        (b"\n\n\n", ["", "", ""]),
        (BOM + b"a\n" + BOM + b"b\n", ["a", "\ufeffb"]),  # only at the start of the file
        (BOM, []),  # a byte order mark alone: an empty file
        (BOM + b"\n", [""]),
        (BOM + b"\xef\xbb\xbf\n", ["\ufeff"]),  # one is dropped, not all
        (b"\xc3\xa9t\xc3\xa9\n\xe2\x80\xa8\n", ["été", "\u2028"]),  # no split at U+2028
        (b"a\x0bb\x0cc\x1cd\xc2\x85\n", ["a\x0bb\x0cc\x1cd\x85"]),  # nor at these
    ],
)
def test_iter_text_lines(tmp_path, raw, lines):
    path = tmp_path / "t.txt"
    path.write_bytes(raw)
    expected = list(enumerate(lines, start=1))
    assert list(iter_text_lines(path)) == expected
    assert list(iter_text_lines(io.BytesIO(raw), "t")) == expected
    text = raw.decode("utf-8")  # an already decoded stream splits the same way
    assert list(iter_text_lines(io.StringIO(text, newline="\n"), "t")) == expected


def test_a_stream_is_read_a_line_at_a_time():
    """Lines come as they are read: nothing past the line asked for is needed."""

    class Source(io.RawIOBase):
        def __init__(self):
            self.parts = [b"a\n", b"b\n", b"\xff\n"]

        def readable(self):
            return True

        def readinto(self, b):
            part = self.parts.pop(0) if self.parts else b""
            b[: len(part)] = part
            return len(part)

    source = Source()
    lines = iter_text_lines(io.BufferedReader(source), "pipe")
    assert next(lines) == (1, "a") and source.parts == [b"b\n", b"\xff\n"]
    assert next(lines) == (2, "b") and source.parts == [b"\xff\n"]
    with pytest.raises(CorpusError, match=r"^pipe: line 3 is not UTF-8 \(byte 0xff at column 1\)$"):
        next(lines)


@pytest.mark.parametrize(
    "tokenizer, texts, warning",
    [
        (CharTokenizer(Vocab("ab")), ["ab", "ac"], "1 character on 1 line is unknown"),
        (CharTokenizer(Vocab("ab")), ["xx", "ay"], "3 characters on 2 lines are unknown"),
        (WhitespaceTokenizer(Vocab(["a"])), ["a zz", "a"], "1 word on 1 line is unknown"),
    ],
)
def test_unknown_tokens_message(tokenizer, texts, warning):
    unknown = UnknownTokens(tokenizer, "f.txt")
    for i, t in enumerate(texts, start=1):
        unknown.note(t, i)
    first = next(t for text in texts for t in tokenizer.unknown(text))
    line = next(i for i, text in enumerate(texts, 1) if tokenizer.unknown(text))
    assert unknown.warning() == (
        f"warning: {warning} to the model's vocabulary and read as <unk> "
        f"(first: {first!r} on line {line} of f.txt)"
    )
    assert UnknownTokens(tokenizer).warning() is None
