"""Text in, text out: the ``translate`` Python API and ``scratchformer translate``."""

import io
import sys

import numpy as np
import pytest
from decode_helpers import lively_model

from scratchformer.app.checkpoint import save_checkpoint
from scratchformer.app.cli import main
from scratchformer.app.data import Vocab, WhitespaceTokenizer
from scratchformer.app.distributed import World
from scratchformer.app.translate import loop_hint, loops, translate, translate_nbest
from scratchformer.engine.decode import DecodeError, beam_search

WORDS = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran"]
SENTENCES = ["the cat sat", "", "a dog ran on the mat", "the zebra sat", "cat"]


@pytest.fixture
def model_and_tokenizer():
    tok = WhitespaceTokenizer(Vocab(WORDS))  # 4 specials + 8 words
    return lively_model(V=len(tok), seed=3, max_len=24), tok


def test_translate_matches_beam_search_and_keeps_input_order(model_and_tokenizer):
    m, tok = model_and_tokenizer
    out = translate(m, tok, SENTENCES, beam_size=3, max_len_b=5, batch_size=2)
    assert len(out) == len(SENTENCES)
    assert out[1] == ""  # an empty line stays empty, without running the model
    for s, text in zip(SENTENCES, out):
        if s:
            src = np.array([tok.encode(s)])
            (hyps,) = beam_search(m, src, beam_size=3, max_len_b=5, min_len=1)
            assert text == tok.decode(hyps[0].tokens)
    # batching (and the length sort inside) changes nothing
    assert translate(m, tok, SENTENCES, beam_size=3, max_len_b=5, batch_size=1) == out
    greedy = translate(m, tok, SENTENCES, search="greedy", max_len_b=5)
    assert greedy[1] == "" and len(greedy) == len(SENTENCES)


def test_a_sentence_never_translates_to_nothing(model_and_tokenizer):
    """A weak model can give <eos> enough mass at step one that search returns the
    empty output (its score log p / lp(1) beats every sentence divided by its length
    penalty). translate keeps <eos> out of the first step (min_len=1, as fairseq)."""
    m, tok = model_and_tokenizer
    P = m.parameters()  # pre-LN: the decoder's last LayerNorm makes every output state
    P["decoder.norm.gamma"][...] = 0.0  # h = beta (gamma = 0), and the logits are h @ W
    P["decoder.norm.beta"][...] = 0.0
    P["decoder.norm.beta"][0] = 1.0
    W = P["out_proj.W"]  # (D, V)
    W[0] = 0.0
    W[0, m.config.eos_id], W[0, 5] = 6.0, 5.0  # logits: <eos> first, then id 5, then the rest
    src = np.array([tok.encode("the cat sat")])
    (free,) = beam_search(m, src, beam_size=3, max_len_b=5, min_len=0)
    assert free[0].tokens == []  # what plain search gives
    assert translate(m, tok, ["the cat sat"], beam_size=3, max_len_b=5) == [tok.decode([5])]
    assert translate(m, tok, ["the cat sat"], search="greedy", max_len_b=5) == [tok.decode([5])]
    # the trainer's test decoding of a translation task passes min_len=1 the same way
    from scratchformer.app.train import decode_outputs  # noqa: PLC0415
    from scratchformer.engine.decode import DecodeOptions  # noqa: PLC0415

    sources = [tok.encode("the cat sat")]
    for method in ("beam", "greedy"):
        options = DecodeOptions(search=method, beam_size=3)
        assert decode_outputs(m, sources, options.replace(min_len=1)) == [[5]]
        assert decode_outputs(m, sources, options) == [[]]  # plain search


def test_text_commands_default_to_a_non_empty_output():
    """``scratchformer translate`` and ``evaluate`` default to --min-len 1."""
    import argparse  # noqa: PLC0415

    from scratchformer.app.commands import evaluate as ev  # noqa: PLC0415
    from scratchformer.app.commands import translate as tr  # noqa: PLC0415

    for mod, name in ((tr, "translate"), (ev, "evaluate")):
        argv = [name, "--checkpoint", "c"]
        parser = argparse.ArgumentParser()
        mod.add_parser(parser.add_subparsers())
        assert parser.parse_args(argv).min_len == 1


def test_unknown_words_become_unk_and_long_input_is_refused(model_and_tokenizer):
    m, tok = model_and_tokenizer
    assert tok.encode("the zebra")[1] == tok.vocab.unk_id  # decoded like any other token
    translate(m, tok, ["zebra giraffe okapi"], max_len_b=3)
    with pytest.raises(DecodeError, match="sentence 1 has 30 tokens.*24 positions"):
        translate(m, tok, ["the cat", " ".join(["cat"] * 30)])
    with pytest.raises(DecodeError, match="list of sentences"):
        translate(m, tok, "the cat sat")


def test_translate_nbest(model_and_tokenizer):
    m, tok = model_and_tokenizer
    res = translate_nbest(m, tok, SENTENCES, beam_size=4, nbest=3, max_len_b=5)
    assert res[1] == []
    for nb in res[:1] + res[2:]:
        assert len(nb) == 3
        scores = [t.hypothesis.score for t in nb]
        assert scores == sorted(scores, reverse=True)
        assert all(t.text == tok.decode(t.hypothesis.tokens) for t in nb)


def test_cli_translate_file_and_stdin(model_and_tokenizer, tmp_path, capsys, monkeypatch):
    m, tok = model_and_tokenizer
    ckpt = save_checkpoint(
        tmp_path / "checkpoint_7.npz", m, step=7, meta={"tokenizer": tok.to_dict()}
    )
    src = tmp_path / "src.txt"
    src.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    expected = translate(m, tok, SENTENCES, beam_size=2, max_len_b=5)

    code = main(["translate", "--checkpoint", str(ckpt), "--input", str(src), "--beam", "2",
                 "--max-len-b", "5"])
    assert code == 0
    assert capsys.readouterr().out.split("\n")[:-1] == expected

    monkeypatch.setattr(sys, "stdin", io.StringIO("the cat sat\n\ncat\n"))
    out_file = tmp_path / "out.tsv"
    code = main(["translate", "--checkpoint", str(ckpt), "--beam", "3", "--nbest", "2",
                 "--max-len-b", "5", "--output", str(out_file)])
    assert code == 0
    lines = out_file.read_text(encoding="utf-8").split("\n")[:-1]
    assert len(lines) == 2 + 1 + 2  # two n-best lines, an empty line, two n-best lines
    assert lines[2] == ""
    line, rank, score, logprob, _text = lines[0].split("\t")
    assert (line, rank) == ("1", "1") and float(score) >= float(lines[1].split("\t")[2])
    assert float(logprob) < 0

    monkeypatch.setattr(sys, "stdin", io.StringIO("the cat\n"))
    capsys.readouterr()
    assert main(["translate", "--checkpoint", str(ckpt), "--greedy", "--max-len-b", "4"]) == 0
    assert "translated 1 sentence in " in capsys.readouterr().err


def test_an_output_named_as_the_standard_output_is_the_standard_output(
    model_and_tokenizer, tmp_path
):
    """``--output /dev/stdout > f`` (and ``--output f > f``, ``/dev/fd/1``): the file the
    shell redirected standard output to is written as standard output, never refused as
    a file of the user's, never replaced; ``-`` likewise."""
    import subprocess  # noqa: PLC0415

    m, tok = model_and_tokenizer
    ckpt = save_checkpoint(
        tmp_path / "checkpoint_7.npz", m, step=7, meta={"tokenizer": tok.to_dict()}
    )
    src = tmp_path / "src.txt"
    src.write_text("the cat\n", encoding="utf-8")
    expected = translate(m, tok, ["the cat"], search="greedy", max_len_b=4)
    f = tmp_path / "f.txt"
    for output in ("/dev/stdout", "/dev/fd/1", str(f), "-"):
        with open(f, "w") as out:
            r = subprocess.run(
                [sys.executable, "-m", "scratchformer", "translate", "--checkpoint", str(ckpt),
                 "--input", str(src), "--greedy", "--max-len-b", "4", "--output", output],
                stdout=out, stderr=subprocess.PIPE, text=True, timeout=300,
            )
        assert r.returncode == 0, (output, r.stderr)
        assert f.read_text(encoding="utf-8").splitlines() == expected, output


def test_cli_translate_errors_are_reported_not_raised(model_and_tokenizer, tmp_path, capsys):
    m, tok = model_and_tokenizer
    bare = save_checkpoint(tmp_path / "checkpoint_1.npz", m, step=1)
    src = tmp_path / "src.txt"
    src.write_text("the cat\n", encoding="utf-8")
    assert main(["translate", "--checkpoint", str(bare), "--input", str(src)]) == 2
    assert "no tokenizer" in capsys.readouterr().err
    good = save_checkpoint(tmp_path / "checkpoint_2.npz", m, meta={"tokenizer": tok.to_dict()})
    args = ["translate", "--checkpoint", str(good), "--input", str(src)]
    assert main(args + ["--beam", "2", "--nbest", "3"]) == 2
    assert "nbest" in capsys.readouterr().err
    assert main(["translate", "--checkpoint", str(tmp_path / "missing.npz")]) == 2


class _Rank(World):
    """Rank ``rank`` of ``size`` played in one process, one rank after the other: a first
    pass records what each rank gives ``allgather`` (``given``); a second hands every
    rank all of them, in rank order, as MPI would."""

    def __init__(self, rank: int, size: int, given: dict):
        self.rank, self.size, self.given = rank, size, given

    def allgather(self, obj) -> list:
        self.given.setdefault(self.rank, obj)
        return [self.given.get(r, {}) for r in range(self.size)]


@pytest.mark.parametrize("method", ["beam", "greedy"])
@pytest.mark.parametrize("size", [2, 3])
def test_ranks_share_the_decoding_and_each_returns_every_output(model_and_tokenizer, method, size):
    """Each rank decodes every size-th source of the length order (equal shares of the
    work, together every source once), and every rank returns the outputs one process
    gives, in the order of the sources."""
    from scratchformer.app.train import decode_outputs  # noqa: PLC0415
    from scratchformer.engine.decode import DecodeOptions  # noqa: PLC0415

    m, tok = model_and_tokenizer
    rng = np.random.default_rng(0)
    sources = [list(rng.integers(4, len(tok), size=int(n))) for n in rng.integers(1, 9, 11)]
    options = DecodeOptions(search=method, beam_size=3, min_len=1)
    alone = decode_outputs(m, sources, options, batch_size=2)
    given: dict = {}
    for r in range(size):
        decode_outputs(m, sources, options, 2, world=_Rank(r, size, given))
    shares = [sorted(given[r]) for r in range(size)]
    assert sorted(i for s in shares for i in s) == list(range(len(sources)))  # each once
    tokens = [sum(len(sources[i]) for i in s) for s in shares]
    assert max(tokens) - min(tokens) <= 8  # at most the longest source apart
    ticks: list = []
    for r in range(size):
        out = decode_outputs(m, sources, options, 2, world=_Rank(r, size, given),
                             progress=ticks.append if r == 0 else None)
        assert out == alone
    assert sum(ticks) == len(sources)  # rank 0's bar stands for every rank's work


@pytest.mark.parametrize(
    "text, looping",
    [
        ("the earth the earth the earth the earth the earth", True),
        ("and and and and and", True),
        ("a b c a b c a b c a b c a b c", True),
        ("and and and and", False),  # four times: not yet
        ("the earth was without form and void", False),
        ("", False),
    ],
)
def test_an_output_that_loops_is_found(text, looping):
    assert loops(text) is looping


def test_the_loop_hint_counts_and_advises():
    assert loop_hint(0, 9) is None
    hint = loop_hint(2, 9)
    assert hint.startswith("note: 2 of 9 outputs repeat a word or phrase 5 or more times")
    assert "undertrained" in hint and "--steps" in hint
    # an unfamiliar input loops too: the note names both causes, and blames neither alone
    assert "input unlike its training data" in hint and "mark of an undertrained" not in hint


def test_the_model_s_source_end_is_appended_where_sources_enter(model_and_tokenizer):
    """A model with ``source_end_id`` (Marian's </s>) translates as the same weights
    without it told ``source_end`` by the options: translate appends the id itself;
    an option given still wins."""
    from scratchformer.engine.models import Transformer, TransformerConfig  # noqa: PLC0415

    m, tok = model_and_tokenizer
    eos = m.config.eos_id
    with_end = Transformer(TransformerConfig.from_dict({**m.config.to_dict(),
                                                        "source_end_id": eos}))
    with_end.load_state_dict(m.state_dict())
    told = translate(m, tok, SENTENCES, beam_size=3, max_len_b=5, source_end=eos)
    assert translate(with_end, tok, SENTENCES, beam_size=3, max_len_b=5) == told
    plain = translate(m, tok, SENTENCES, beam_size=3, max_len_b=5)
    assert told != plain  # the id appended changes what the model reads
    assert translate(with_end, tok, SENTENCES, beam_size=3, max_len_b=5, source_end=3) == (
        translate(m, tok, SENTENCES, beam_size=3, max_len_b=5, source_end=3))
