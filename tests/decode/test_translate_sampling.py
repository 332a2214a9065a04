"""``scratchformer translate --sample`` and ``--interactive``: samples seeded by the line's
position, the flags that cannot go together, and a session driven through a pipe."""

import os
import select
import signal
import subprocess
import sys
import time

import pytest
from decode_helpers import lively_model

from scratchformer.app.checkpoint import save_checkpoint
from scratchformer.app.cli import main
from scratchformer.app.data import Vocab, WhitespaceTokenizer
from scratchformer.app.translate import translate, translate_nbest
from scratchformer.engine.decode import DecodeOptions

WORDS = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran"]
SENTENCES = ["the cat sat", "", "a dog ran on the mat", "the zebra sat", "cat"]


@pytest.fixture
def model_and_tokenizer():
    tok = WhitespaceTokenizer(Vocab(WORDS))
    return lively_model(V=len(tok), seed=3, max_len=24), tok


@pytest.fixture
def checkpoint(model_and_tokenizer, tmp_path):
    m, tok = model_and_tokenizer
    return save_checkpoint(tmp_path / "checkpoint_7.npz", m, step=7,
                           meta={"tokenizer": tok.to_dict()})


def _out(capsys, argv) -> list[str]:
    assert main(argv) == 0
    return capsys.readouterr().out.split("\n")[:-1]


def test_translate_samples_by_position_whatever_the_batches(model_and_tokenizer):
    m, tok = model_and_tokenizer
    options = DecodeOptions(search="sample", samples=3, seed=4, max_len_b=6, min_len=1)
    found = translate_nbest(m, tok, SENTENCES, options, batch_size=2)
    assert found[1] == [] and all(len(nb) == 3 for i, nb in enumerate(found) if i != 1)
    assert all(t.text == tok.decode(t.hypothesis.tokens) for nb in found for t in nb)
    texts = [[t.text for t in nb] for nb in found]
    again = translate_nbest(m, tok, SENTENCES, options, batch_size=1)
    assert [[t.text for t in nb] for nb in again] == texts
    # the last sentence alone, at its position, draws the same samples
    alone = translate_nbest(m, tok, SENTENCES[4:], options, positions=[4])
    assert [t.text for t in alone[0]] == texts[4]
    # translate() gives each sentence's first sample
    assert translate(m, tok, SENTENCES, options) == [t[0] if t else "" for t in texts]


def test_cli_sample_lines_are_the_api_s_and_fixed_by_the_line_number(
    model_and_tokenizer, checkpoint, tmp_path, capsys
):
    m, tok = model_and_tokenizer
    src = tmp_path / "src.txt"
    src.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    argv = ["translate", "--checkpoint", str(checkpoint), "--input", str(src), "--sample",
            "--top-p", "0.9", "--seed", "4", "--max-len-b", "6"]
    one = _out(capsys, argv)
    options = DecodeOptions(search="sample", top_p=0.9, seed=4, max_len_b=6, min_len=1)
    assert one == translate(m, tok, SENTENCES, options)
    assert _out(capsys, [*argv, "--chunk-size", "2", "--batch-size", "1"]) == one

    lines = _out(capsys, [*argv, "--samples", "3"])
    assert len(lines) == 4 * 3 + 1 and lines[3] == ""  # the empty line: one empty line
    first = lines[:3]
    assert [ln.split("\t")[:2] for ln in first] == [["1", "1"], ["1", "2"], ["1", "3"]]
    assert first[0].split("\t")[4] == one[0]  # sample 1 of 3 is the single sample
    assert all(float(ln.split("\t")[3]) < 0 for ln in first)  # its log-probability

    # line 5 keeps its samples when the lines before it change
    other = tmp_path / "other.txt"
    other.write_text("dog\ncat cat\n\nthe mat\ncat\n", encoding="utf-8")
    assert _out(capsys, [*argv[:4], str(other), *argv[5:]])[4] == one[4]
    assert _out(capsys, [*argv, "--seed", "5"]) != one


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--top-p", "0.9"], "--top-p is a sampling flag: add --sample, or drop it"),
        (["--seed", "1", "--samples", "2"], "--seed, --samples are sampling flags: add "
                                            "--sample, or drop them"),
        (["--sample", "--greedy"], "--sample and --greedy are two ways to decode"),
        (["--sample", "--nbest", "2"], "--nbest ranks the hypotheses of a beam search"),
        (["--sample", "--no-repeat-ngram", "2"], "--no-repeat-ngram applies to beam search"),
        (["--interactive", "--input", "x.txt"], "--interactive reads standard input"),
    ],
)
def test_flags_that_do_not_go_together_are_refused_in_one_line(flags, message, capsys):
    argv = ["translate", "--checkpoint", "/nonexistent/checkpoint.npz", *flags]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def _program(checkpoint, *flags):
    return subprocess.Popen(
        [sys.executable, "-m", "scratchformer", "translate", "--checkpoint", str(checkpoint),
         "--interactive", "--max-len-b", "5", *flags],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        bufsize=1,
    )


def _read_line(p, timeout=120.0) -> str:
    """The next output line of ``p``, waiting for it (the session answers before the end
    of its input, or this fails after ``timeout`` s)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        ready, _, _ = select.select([p.stdout], [], [], 1.0)
        if ready:
            return p.stdout.readline().rstrip("\n")
        assert p.poll() is None, f"ended early: {p.stderr.read()}"
    raise AssertionError("no output line came")


def test_interactive_answers_each_line_as_it_comes_through_a_pipe(model_and_tokenizer,
                                                                   checkpoint):
    """Each line's translation comes before the next line is written (the model stays
    loaded); a line too long for the model is an error and the session goes on; the end
    of the input ends it with 0."""
    m, tok = model_and_tokenizer
    want = translate(m, tok, ["the cat sat", "a dog ran"], max_len_b=5)
    p = _program(checkpoint)
    try:
        p.stdin.write("the cat sat\n")
        p.stdin.flush()
        assert _read_line(p) == want[0]
        p.stdin.write(" ".join(["cat"] * 30) + "\n")  # 30 tokens: the model has 24 positions
        p.stdin.write("\n")  # an empty line: an empty output line
        p.stdin.write("a dog ran\n")
        p.stdin.flush()
        assert _read_line(p) == ""
        assert _read_line(p) == want[1]
        p.stdin.close()
        rest, err = p.stdout.read(), p.stderr.read()
        assert p.wait(timeout=60) == 0, err
    finally:
        if p.poll() is None:
            p.kill()
    assert rest == "" and "Traceback" not in err
    assert "stdin: line 2 has 30 tokens" in err and "translated 3 sentences" in err


def test_interactive_gives_samples_with_scores_on_request(model_and_tokenizer, checkpoint):
    m, tok = model_and_tokenizer
    options = DecodeOptions(search="sample", samples=2, seed=9, max_len_b=5, min_len=1)
    want = translate_nbest(m, tok, ["dog", "the mat"], options)
    p = _program(checkpoint, "--sample", "--samples", "2", "--seed", "9")
    out, err = p.communicate("dog\nthe mat\n", timeout=120)
    assert p.returncode == 0, err
    rows = [ln.split("\t") for ln in out.splitlines()]
    assert [r[:2] for r in rows] == [["1", "1"], ["1", "2"], ["2", "1"], ["2", "2"]]
    assert [r[4] for r in rows] == [t.text for nb in want for t in nb]


def test_ctrl_c_ends_an_interactive_session_cleanly(model_and_tokenizer, checkpoint):
    """SIGINT while it waits for the next line: exit 0, what was translated written, the
    closing line on standard error, no traceback."""
    m, tok = model_and_tokenizer
    p = _program(checkpoint, "--greedy")
    try:
        p.stdin.write("the cat sat\n")
        p.stdin.flush()
        assert _read_line(p) == translate(m, tok, ["the cat sat"], search="greedy",
                                          max_len_b=5)[0]
        os.kill(p.pid, signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    assert out == "" and "Traceback" not in err and "translated 1 sentence in" in err


def test_an_output_s_line_breaks_and_tabs_are_written_as_spaces(checkpoint, tmp_path, capsys,
                                                               monkeypatch):
    """A sample may draw the byte pieces that spell a line break or a tab (a BPE
    vocabulary's): each input still gives its one line, or its n lines of five fields."""
    from scratchformer.app import translate as text_api  # noqa: PLC0415
    from scratchformer.app.commands import translate as command  # noqa: PLC0415
    from scratchformer.engine.decode import Hypothesis  # noqa: PLC0415

    assert text_api.one_line("a\nb\r\nc\td\u2028e") == "a b  c d e"
    broken = text_api.Translation("two\nlines\tand a tab", Hypothesis([4], -1.0, -2.0))
    monkeypatch.setattr(command, "translate", lambda *a, **k: [broken.text])
    monkeypatch.setattr(command, "translate_nbest", lambda *a, **k: [[broken, broken]])
    src = tmp_path / "one.txt"
    src.write_text("the cat\n", encoding="utf-8")
    argv = ["translate", "--checkpoint", str(checkpoint), "--input", str(src), "--sample"]
    assert _out(capsys, argv) == ["two lines and a tab"]
    lines = _out(capsys, [*argv, "--samples", "2"])
    assert [len(ln.split("\t")) for ln in lines] == [5, 5]
