"""Text input is read one way everywhere (``scratchformer.app.data.text.iter_text_lines``).

Every text file a command reads from a user (``translate``'s input file or stdin,
``evaluate``'s split, the train/dev/test TSV of the translation task, which is also the
text its BPE is trained on, ``web.*.txt`` of the language model, ``genre.*.tsv`` of the
classifier, the ``metrics.jsonl`` that ``plot curves`` reads) is UTF-8: a bad byte or a
NUL is a one-line error naming the file, the line and the column (exit code 2, no
traceback). Lines end at ``\\n`` only: a CRLF file reads like an LF file, a bare ``\\r``
stays inside its line (as many outputs as input lines), a leading byte order mark is
dropped, the last line needs no ``\\n``. Tokens unknown to the model are warned about
once per run.
"""

import io
import json
import sys
from pathlib import Path

import pytest
from task_data import corpus, write_monolingual, write_translation

from scratchformer.app.cli import main
from scratchformer.app.data.bible_pairs import ParallelDataError, read_pairs
from scratchformer.app.data.text import (
    BYTES_PER_POSITION,
    CorpusError,
    LineLimit,
    LineTooLongError,
    iter_text_lines,
    load_labelled,
    load_lines,
)
from scratchformer.app.translate import translate
from scratchformer.app.viz import PlotError, read_metrics

BOM = b"\xef\xbb\xbf"
NUL_HINT = "(a binary or UTF-16 file? text must be UTF-8)"


class Case:
    """One test's directory, model and captured output, for the readers below."""

    def __init__(self, tmp_path, reverse_model, capsys, monkeypatch):
        self.tmp, self.capsys, self.monkeypatch = tmp_path, capsys, monkeypatch
        self.ckpt, self.model, self.tok = reverse_model

    def cli(self, argv, stdin: bytes | None = None):
        """``(exit code, stdout, stderr)`` of ``scratchformer <argv>``."""
        if stdin is not None:
            self.monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
        self.capsys.readouterr()
        code = main([str(a) for a in argv])
        out, err = self.capsys.readouterr()
        return code, out, err

    def greedy(self, sentences) -> str:
        """What ``translate --greedy`` prints for these sentences (the Python API)."""
        hyps = translate(self.model, self.tok, sentences, search="greedy")
        return "".join(h + "\n" for h in hyps)


@pytest.fixture
def case(tmp_path, reverse_model, capsys, monkeypatch):
    return Case(tmp_path, reverse_model, capsys, monkeypatch)


# -- the kinds of input file, as the commands read them --------------------------------------
# Each kind: (command, file under the case directory or None for stdin, a good line around
# a text, the command line).
def _translate_file(c, path):
    return ["translate", "--checkpoint", c.ckpt, "--greedy", "--input", path]


def _train(task):
    def argv(c, path):
        flags = ["--steps", "1", "--set", "model.preset=tiny", "--no-progress"]
        return [
            "train",
            "--task",
            task,
            "--data-dir",
            path.parent,
            "--run-dir",
            c.tmp / "run",
            *flags,
        ]

    return argv


def _evaluate(c, path):
    return ["evaluate", "--checkpoint", c.ckpt, "--data-dir", path.parent, "--greedy"] + [
        "--output", c.tmp / "hyp.txt"
    ]


def _json_line(text):
    return '{"kind": "train", "step": 1, "loss": 2.5, "note": "' + text + '"}'


def _plot(c, path):
    return ["plot", "curves", path, "-o", c.tmp / "c.png"]


def _tsv(t):
    return f"{t}\tx {t}"


def _labelled(t):
    return f"law\t{t}"


SPLITS = ("train", "dev", "test")
KINDS = {
    "translate-file": ("translate", "src.txt", str, _translate_file),
    "translate-stdin": ("translate", None, str, lambda c, p: _translate_file(c, "-")),
    "evaluate-test.tsv": ("evaluate", "data/test.tsv", lambda t: f"{t}\t{t[::-1]}", _evaluate),
    # train.tsv is also the text the translation task's BPE is trained on
    **{f"translate-{s}.tsv": ("train", f"data/{s}.tsv", _tsv, _train("translate")) for s in SPLITS},
    **{f"lm-{s}.txt": ("train", f"data/web-text/{s}.txt", str, _train("lm")) for s in SPLITS},
    **{
        f"classify-{s}.tsv": ("train", f"data/genre/{s}.tsv", _labelled, _train("classify"))
        for s in SPLITS
    },
    "plot-metrics.jsonl": ("plot", "run/metrics.jsonl", _json_line, _plot),
}
GOOD = ["abc", "bcad", "cab", "dab"]


def _text(fmt, texts, eol="\n") -> bytes:
    return "".join(fmt(t) + eol for t in texts).encode("utf-8")


def _bad_byte(seq):
    """Line 3 holds ``seq`` after a few characters (one of them not ASCII)."""

    def make(fmt):
        line = fmt("añb\x01cd")  # \x01 marks where the bad bytes go
        raw = line.encode("utf-8").replace(b"\x01", seq)
        data = _text(fmt, GOOD[:2]) + raw + b"\n" + _text(fmt, GOOD[2:])
        return data, f"line 3 is not UTF-8 (byte 0x{seq[0]:02x} at column {line.index(chr(1)) + 1})"

    return make


def _nul(fmt):
    line = fmt("ab\x00c")
    data = _text(fmt, GOOD[:2]) + line.encode("utf-8") + b"\n"
    return data, f"line 3 holds a NUL byte at column {line.index(chr(0)) + 1} {NUL_HINT}"


def _utf16(fmt):
    return _text(fmt, GOOD).decode("utf-8").encode("utf-16"), (
        "line 1 is not UTF-8 (byte 0xff at column 1)"  # its byte order mark, FF FE
    )


def _bom_then_bad(fmt):
    line = fmt("ab\x01")
    data = BOM + line.encode("utf-8").replace(b"\x01", b"\xe9") + b"\n" + _text(fmt, GOOD)
    return data, f"line 1 is not UTF-8 (byte 0xe9 at column {line.index(chr(1)) + 1})"


def _crlf_then_bad(fmt):
    data, msg = _bad_byte(b"\xff")(fmt)
    return data.replace(b"\n", b"\r\n"), msg


def _bare_cr_then_bad(fmt):
    """A bare \\r on line 1 does not start a line: the bad byte stays on line 2."""
    first = fmt(GOOD[0])
    line = fmt("ab\x01")
    data = (first[0] + "\r" + first[1:] + "\n").encode() + line.encode().replace(b"\x01", b"\xff")
    return data + b"\n", f"line 2 is not UTF-8 (byte 0xff at column {line.index(chr(1)) + 1})"


FAULTS = {
    "latin-1": _bad_byte(b"\xf1"),  # ñ written as Latin-1
    "byte-ff": _bad_byte(b"\xff"),
    "truncated-sequence": _bad_byte(b"\xc3"),  # the first byte of a two-byte character
    "lone-continuation": _bad_byte(b"\x80"),
    "overlong": _bad_byte(b"\xc0\xaf"),  # '/' in two bytes
    "surrogate": _bad_byte(b"\xed\xa0\x80"),  # UTF-16 surrogates are not characters
    "nul": _nul,
    "utf-16-file": _utf16,
    "bom-then-bad": _bom_then_bad,
    "crlf-then-bad": _crlf_then_bad,
    "bare-cr-then-bad": _bare_cr_then_bad,
}


def _prepare(c, kind):
    """The data of ``kind`` in the case directory (all files good); the faulty file's path."""
    _, file, _, _ = KINDS[kind]
    if kind.startswith(("translate-train", "translate-dev", "translate-test")):
        write_translation(c.tmp / "data")
    elif kind.startswith(("lm-", "classify-")):
        write_monolingual(c.tmp / "data")
    return None if file is None else c.tmp / file


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("kind", KINDS)
def test_text_that_is_not_utf8_is_a_one_line_error_naming_file_and_line(case, kind, fault):
    command, _, fmt, argv = KINDS[kind]
    path = _prepare(case, kind)
    data, detail = FAULTS[fault](fmt)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    code, _, err = case.cli(argv(case, path or "-"), stdin=data if path is None else None)
    name = "stdin" if path is None else str(path)
    assert (code, err) == (2, f"scratchformer {command}: error: {name}: {detail}\n")


# -- what each reader makes of good text ---------------------------------------------------
def _read_translate(c, data, *extra):
    path = c.tmp / "src.txt"
    path.write_bytes(data)
    code, out, err = c.cli(_translate_file(c, path) + list(extra))
    assert code == 0, err
    return out


def _read_stdin(c, data):
    code, out, err = c.cli(_translate_file(c, "-"), stdin=data)
    assert code == 0, err
    return out


def _read_evaluate(c, data):
    path = c.tmp / "data" / "test.tsv"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
    code, _, err = c.cli(_evaluate(c, path))
    assert code == 0, err
    return (c.tmp / "hyp.txt").read_text(encoding="utf-8")


def _read_bpe(c, data):
    from scratchformer.app.data.pairs import translation_pairs  # noqa: PLC0415  (needs the bpe extra)

    d = write_translation(c.tmp / "bpe")
    (d / "train.tsv").write_bytes(data)
    task = translation_pairs(d, vocab_size=350, max_len=30)
    return task.tokenizer.to_dict(), len(task.train) + task.dropped


def _expect_bpe(c, lines):
    from scratchformer.app.data.bpe import BPETokenizer  # noqa: PLC0415

    pairs = [line.split("\t") for line in lines]
    texts = [p[0].strip() for p in pairs] + [p[1].strip() for p in pairs]
    return BPETokenizer.train(texts, 350).to_dict(), len(lines)


def _at(name):
    def read(c, data):
        path = c.tmp / "mono" / name
        write_monolingual(path.parent, former=True)  # one folder for both corpora
        path.write_bytes(data)
        return path

    return read


def _sources(c, lines):
    return c.greedy([line.split("\t")[0] for line in lines])


def _labels(c, lines):
    return [(p[0], p[1]) for p in (line.split("\t") for line in lines) if len(p) > 1 and p[1]]


REVERSE = ["abc", "bcad", "jihgfedcba", "cab"]
READERS = {  # name: (good lines, read(case, bytes), the exact expected result of the lines)
    "translate-file": (REVERSE, _read_translate, lambda c, lines: c.greedy(lines)),
    "translate-stdin": (REVERSE, _read_stdin, lambda c, lines: c.greedy(lines)),
    "evaluate": (["abc\tcba", "bcad\tdacb", "ij\tji"], _read_evaluate, _sources),
    "tsv": (
        ["Él ve á su hijo.\tHe sees his son.\tGen 1:1", "la casa\tthe house"],
        lambda c, data: read_pairs(Path(_at("dev.tsv")(c, data))),
        lambda c, lines: [tuple(p.strip() for p in line.split("\t")[:2]) for line in lines],
    ),
    "bpe": ([f"{s}\t{t}" for s, t in corpus()], _read_bpe, _expect_bpe),
    "web": (
        ["in the beginning", "«let there be light»"],
        lambda c, data: load_lines(_at("web.train.txt")(c, data).parent)["train"],
        lambda c, lines: [line for line in lines if line.strip()],
    ),
    "genre": (
        ["law\tMoses spoke.\tLev 1:1", "gospels\t“Follow me.”"],
        lambda c, data: load_labelled(_at("genre.train.tsv")(c, data).parent)["train"],
        _labels,
    ),
    "metrics": (
        [_json_line("a"), '{"kind": "valid", "step": 2, "loss": 1.5}'],
        lambda c, data: read_metrics(_at("metrics.jsonl")(c, data)),
        lambda c, lines: [json.loads(line) for line in lines if line.strip()],
    ),
}


def _encode(lines, variant) -> bytes:
    text = "\n".join(lines) + "\n"
    if variant in ("crlf", "bom-crlf", "crlf-no-final-newline"):
        text = text.replace("\n", "\r\n")
    if variant.endswith("no-final-newline"):
        text = text.removesuffix("\r\n").removesuffix("\n")
    raw = text.encode("utf-8")
    return BOM + raw if variant.startswith("bom") else raw


@pytest.mark.parametrize(
    "variant", ["lf", "crlf", "no-final-newline", "crlf-no-final-newline", "bom", "bom-crlf"]
)
@pytest.mark.parametrize("reader", READERS)
def test_crlf_bom_and_a_missing_final_newline_read_like_plain_lf(case, reader, variant):
    if reader in ("bpe", "evaluate"):
        pytest.importorskip("sentencepiece" if reader == "bpe" else "sacrebleu")
    lines, read, expect = READERS[reader]
    assert read(case, _encode(lines, variant)) == expect(case, lines)


@pytest.mark.parametrize("reader", READERS)
def test_a_bare_cr_stays_inside_its_line(case, reader):
    """``a\\rbc`` is one line (one output line for ``translate``), with its ``\\r``."""
    if reader in ("bpe", "evaluate"):
        pytest.importorskip("sentencepiece" if reader == "bpe" else "sacrebleu")
    lines, read, expect = READERS[reader]
    with_cr = [line[0] + "\r" + line[1:] for line in lines]  # JSON: \r is whitespace there
    got = read(case, _encode(with_cr, "lf"))
    assert got == expect(case, with_cr)
    if reader.startswith("translate") or reader == "evaluate":
        assert got.count("\n") == len(lines)


@pytest.mark.parametrize("reader", ["tsv", "web", "genre", "metrics"])
def test_a_long_line_within_the_limit_is_read_whole(case, reader):
    """100,000 characters (200 kB) on one line, under the 1 MiB a reader with no model
    allows: the readers of data keep it whole."""
    lines, read, expect = READERS[reader]
    long = [lines[0], LONG[reader]]
    assert read(case, _encode(long, "lf")) == expect(case, long)


def _too_long(name, lineno, limit):
    return f"{name}: line {lineno} is longer than {limit:,} bytes ("


@pytest.mark.parametrize("where", ["file", "stdin"])
def test_translate_refuses_a_line_longer_than_its_model_reads(case, where):
    """The model has ``max_len`` positions: a line of more than 64 bytes a position is
    refused naming its number, before anything is decoded or written."""
    limit = BYTES_PER_POSITION * case.model.config.max_len
    data = b"abc\ncab\n" + b"a" * (limit + 1) + b"\nabc\n"
    if where == "file":
        (case.tmp / "src.txt").write_bytes(data)
        code, out, err = case.cli(_translate_file(case, case.tmp / "src.txt"))
        name = str(case.tmp / "src.txt")
    else:
        code, out, err = case.cli(_translate_file(case, "-"), stdin=data)
        name = "stdin"
    assert (code, out) == (2, "")
    assert err.startswith("scratchformer translate: error: " + _too_long(name, 3, limit))
    assert f"for each of the model's {case.model.config.max_len} positions" in err
    assert err.count("\n") == 1


def test_a_line_of_exactly_the_limit_is_read(case):
    """The limit is inclusive: a line of ``64 * max_len`` bytes (plus its CRLF or LF
    ending) passes the reader, and is refused by the tokens it makes, as any line longer
    than the model is."""
    limit = BYTES_PER_POSITION * case.model.config.max_len
    code, out, err = case.cli(_translate_file(case, "-"), stdin=b"a" * limit + b"\n")
    assert (code, out) == (2, "")
    assert "stdin: line 1 has" in err and "positions this model supports" in err


def test_dev_zero_and_a_file_without_line_breaks_are_refused_after_one_line(case):
    """/dev/zero never ends a line: read at most one line's limit, then refused."""
    argv = _translate_file(case, "/dev/zero")
    code, out, err = case.cli(argv)
    assert (code, out) == (2, "")
    assert "/dev/zero: line 1 is longer than" in err and "not a text file?" in err


class _Counting(io.RawIOBase):
    """An endless line (``x`` forever) that counts the bytes it gives."""

    def __init__(self):
        self.given = 0

    def readable(self):
        return True

    def readinto(self, b):
        b[:] = b"x" * len(b)
        self.given += len(b)
        return len(b)


@pytest.mark.parametrize("max_len", [None, 1, 256])
def test_reading_an_endless_line_reads_no_more_than_the_limit(max_len):
    """Memory stays that of one allowed line: the reader asks the stream for at most the
    limit and one byte (plus one buffer of the stream's own) before refusing."""
    raw = _Counting()
    stream = io.BufferedReader(raw, buffer_size=8192)
    limit = LineLimit(max_len)
    with pytest.raises(LineTooLongError, match="line 1 is longer than"):
        list(iter_text_lines(stream, "endless", limit))
    assert raw.given <= limit.bytes + 1 + 8192


@pytest.mark.parametrize(
    "kind",
    ["translate-train.tsv", "lm-dev.txt", "classify-test.tsv", "evaluate-test.tsv"],
)
def test_data_with_a_line_longer_than_the_model_reads_is_refused(case, kind):
    """Training data and evaluate's split are bounded by the model's ``max_len`` (the
    configured one: the tiny preset's 64 positions, 4 KiB; the checkpoint's)."""
    command, _, fmt, argv = KINDS[kind]
    path = _prepare(case, kind)
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "evaluate-test.tsv":
        for split in SPLITS:
            (path.parent / f"{split}.tsv").write_bytes(_text(fmt, GOOD))
    limit = BYTES_PER_POSITION * 64
    path.write_bytes(_text(fmt, GOOD[:2]) + _text(fmt, ["b" * (limit + 1)]))
    code, out, err = case.cli(argv(case, path))
    assert code == 2, err
    assert _too_long(str(path), 3, limit) in err and err.count("\n") == 1
    assert "for each of the model's 64 positions" in err


LONG = {
    "tsv": "la " + "é" * 100_000 + "\tthe house",
    "web": "é" * 100_000,
    "genre": "law\t" + "é" * 100_000,
    "metrics": _json_line("é" * 100_000),
}


EMPTY = {  # reader: the error for an empty file (None: no error, no output)
    "translate-file": None,
    "translate-stdin": None,
    "tsv": "{path} holds no sentence pairs (empty split)",
    "web": "{path} holds no lines",
    "genre": "{path} holds no label<TAB>text lines",
    "metrics": "the metrics log {path} is empty: nothing to plot",
}


@pytest.mark.parametrize("bom", [False, True], ids=["empty", "only-a-bom"])
@pytest.mark.parametrize("reader", EMPTY)
def test_an_empty_file(case, reader, bom):
    _, read, _ = READERS[reader]
    data = BOM if bom else b""
    if EMPTY[reader] is None:  # translate: nothing to do, said so
        path = case.tmp / "src.txt"
        path.write_bytes(data)
        where = path if reader == "translate-file" else "-"
        code, out, err = case.cli(_translate_file(case, where), stdin=data)
        assert (code, out) == (0, "")
        assert err.startswith("translated 0 sentences in ") and err.count("\n") == 1
        return
    errors = (ParallelDataError, CorpusError, PlotError)
    with pytest.raises(errors) as e:
        read(case, data)
    files = {"tsv": "dev.tsv", "web": "web.train.txt", "genre": "genre.train.tsv"}
    path = case.tmp / "mono" / files.get(reader, "metrics.jsonl")
    assert str(e.value) == EMPTY[reader].format(path=path)


@pytest.mark.parametrize("reader", ["translate-file", "translate-stdin", "web", "genre", "metrics"])
def test_blank_lines(case, reader):
    """A blank line translates to an empty line; the monolingual corpora and the
    metrics log skip it."""
    lines, read, expect = READERS[reader]
    blank = [lines[0], "", "  ", lines[1]]
    got = read(case, _encode(blank, "lf"))
    assert got == expect(case, blank)
    if reader.startswith("translate"):
        assert got.split("\n")[1] == ""


@pytest.mark.parametrize("reader", ["tsv", "evaluate"])
def test_a_blank_line_in_a_tsv_is_an_error_naming_it(case, reader):
    data = b"abc\tcba\n\nbca\tacb\n"
    if reader == "tsv":
        with pytest.raises(ParallelDataError) as e:
            READERS["tsv"][1](case, data)
        path = case.tmp / "mono" / "dev.tsv"
        assert str(e.value) == f"{path}:2: empty line (expected source<TAB>target)"
        return
    path = case.tmp / "data" / "test.tsv"
    path.parent.mkdir()
    path.write_bytes(data)
    code, _, err = case.cli(_evaluate(case, path))
    assert (code, err) == (
        2,
        f"scratchformer evaluate: error: {path}:2: empty line (expected source<TAB>target)\n",
    )


@pytest.mark.parametrize("chunk", [None, "1"])
@pytest.mark.parametrize("where", ["file", "stdin"])
def test_unknown_characters_are_warned_about_once(case, where, chunk):
    sentences = ["abc", "aøb", "", "ø x ø", "cab"]
    data = "\n".join(sentences).encode() + b"\n"
    extra = [] if chunk is None else ["--chunk-size", chunk]
    path = case.tmp / "src.txt"
    path.write_bytes(data)
    argv = _translate_file(case, path if where == "file" else "-") + extra
    code, out, err = case.cli(argv, stdin=data if where == "stdin" else None)
    assert (code, out) == (0, case.greedy(sentences))
    name = path if where == "file" else "stdin"
    warning, done = err.splitlines()
    assert warning == (
        "warning: 6 characters on 2 lines are unknown to the model's vocabulary and read as "
        f"<unk> (first: 'ø' on line 2 of {name})"
    )
    assert done.startswith("translated 5 sentences in ")


def test_no_warning_when_every_character_is_known(case):
    code, out, err = case.cli(_translate_file(case, "-"), stdin=b"abc\ncab\n")
    assert (code, out) == (0, case.greedy(["abc", "cab"]))
    assert len(err.splitlines()) == 1 and err.startswith("translated 2 sentences in ")


def test_evaluate_warns_once_naming_the_split(case):
    pytest.importorskip("sacrebleu")
    path = case.tmp / "data" / "test.tsv"
    path.parent.mkdir()
    path.write_text("abc\tcba\nañb\tbña\nñ\tñ\n", encoding="utf-8")
    code, _, err = case.cli(_evaluate(case, path))
    assert code == 0
    assert err.splitlines() == [
        "warning: 2 characters on 2 lines are unknown to the model's vocabulary and read as "
        f"<unk> (first: 'ñ' on line 2 of {path})",
        err.splitlines()[1],
    ]
    assert err.splitlines()[1].startswith("evaluated in ")
