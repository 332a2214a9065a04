"""``scratchformer evaluate`` and the translation task: sacreBLEU scores checked against
BLEU computed here by hand, the checkpoint's own tokenizer, and the errors for bad input."""

import json
import math
from collections import Counter

import pytest

from scratchformer.app.checkpoint import save_checkpoint
from scratchformer.app.cli import main
from scratchformer.engine.models import Transformer, TransformerConfig

pytest.importorskip("sentencepiece")


def _bleu_by_hand(hyps, refs):
    """BLEU-4 (Papineni et al.), one reference, no smoothing; the sentences hold only
    lowercase words and spaces, so sacreBLEU's 13a tokenization is the identity."""
    match, total = [0] * 4, [0] * 4
    hyp_len = ref_len = 0
    for h, r in zip(hyps, refs):
        hw, rw = h.split(), r.split()
        hyp_len, ref_len = hyp_len + len(hw), ref_len + len(rw)
        for n in range(1, 5):
            hc = Counter(tuple(hw[i : i + n]) for i in range(len(hw) - n + 1))
            rc = Counter(tuple(rw[i : i + n]) for i in range(len(rw) - n + 1))
            match[n - 1] += sum(min(c, rc[g]) for g, c in hc.items())
            total[n - 1] += max(len(hw) - n + 1, 0)
    log_p = sum(math.log(m / t) for m, t in zip(match, total)) / 4
    bp = 1.0 if hyp_len > ref_len else math.exp(1 - ref_len / hyp_len)
    return 100 * bp * math.exp(log_p)


REFS = ["the king sees the house of his son", "a boy eats the bread in the house"]
HYPS = ["the king sees the house of the son", "a boy eats bread in the house"]


def test_corpus_scores_match_bleu_computed_by_hand():
    pytest.importorskip("sacrebleu")
    from scratchformer.app.bleu import corpus_scores  # noqa: PLC0415

    s = corpus_scores(HYPS, REFS)
    assert s["bleu"] == pytest.approx(_bleu_by_hand(HYPS, REFS), abs=1e-9)
    assert s["bleu"] == pytest.approx(55.0, abs=15)  # a sanity range around the true value
    assert corpus_scores(REFS, REFS)["bleu"] == pytest.approx(100.0)
    assert s["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp")
    assert 0 < s["chrf"] < 100


def _checkpoint(tmp_path, tok, data_dir, vocab_size=None):
    cfg = TransformerConfig(
        vocab_size=vocab_size or len(tok.vocab), N=1, d_model=16, d_ff=32, h=2, max_len=64
    )
    meta = {"tokenizer": tok.to_dict(), "train_config": {"task": {"data_dir": str(data_dir)}}}
    return save_checkpoint(tmp_path / "checkpoint_1.npz", Transformer(cfg), step=1, meta=meta)


def test_evaluate_scores_the_decoded_split(tmp_path, bpe, data_dir, monkeypatch, capsys):
    """End to end with a real (untrained) checkpoint; then with the decoder replaced by
    one that returns known hypotheses, the printed BLEU is the hand-computed one."""
    pytest.importorskip("sacrebleu")
    ckpt = _checkpoint(tmp_path, bpe, data_dir)
    out = tmp_path / "hyp.txt"
    assert main(["evaluate", "--checkpoint", str(ckpt), "--greedy", "--output", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.count("BLEU = ") == 1  # sacreBLEU's own line, not repeated inside ours
    assert "signature: nrefs:1|case:mixed" in text and "chrF = " in text
    assert "test: 6 sentences, greedy" in text
    assert "perplexity = " in text and "output tokens/s" in text
    assert len(out.read_text(encoding="utf-8").splitlines()) == 6  # the test split

    test_refs = [line.split("\t")[1] for line in (data_dir / "test.tsv").read_text().splitlines()]
    hyps = [h.lower().rstrip(".") for h in test_refs]
    hyps[0] = " ".join(hyps[0].split()[:-1] + ["king"])

    def fake_translate(model, tok, sources, options=None, **kw):
        assert len(sources) == len(hyps)
        return hyps

    monkeypatch.setattr("scratchformer.app.commands.evaluate.translate", fake_translate)
    refs = [r.lower().rstrip(".") for r in test_refs]
    (data_dir / "test.tsv").write_text("".join(f"x\t{r}\n" for r in refs), encoding="utf-8")
    assert main(["evaluate", "--checkpoint", str(ckpt), "--beam", "4", "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["bleu"] == pytest.approx(_bleu_by_hand(hyps, refs), abs=1e-9)
    assert rec["decode"] == "beam 4, alpha 0.6"


def test_evaluate_output_dash_is_the_standard_output(tmp_path, bpe, data_dir, capsys, monkeypatch):
    """``--output -`` writes the hypotheses to standard output (no file named "-"), the
    scores to standard error beside them."""
    pytest.importorskip("sacrebleu")
    ckpt = _checkpoint(tmp_path, bpe, data_dir)
    monkeypatch.chdir(tmp_path)
    assert main(["evaluate", "--checkpoint", str(ckpt), "--greedy", "--output", "-"]) == 0
    got = capsys.readouterr()
    assert len(got.out.splitlines()) == 6 and "BLEU" not in got.out  # the hypotheses alone
    assert "BLEU = " in got.err and "chrF = " in got.err
    assert not (tmp_path / "-").exists()


def test_evaluate_perplexity_is_the_per_token_likelihood_of_the_references(bpe, pairs):
    """The teacher-forced perplexity ``evaluate`` prints equals exp of the mean negative
    log-likelihood computed one sentence at a time with a plain log-softmax (so padding
    and batching change nothing), ``<eos>`` counted as a token."""
    import numpy as np  # noqa: PLC0415  (the test's own reference computation)

    from scratchformer.app.commands.evaluate import teacher_forced  # noqa: PLC0415

    cfg = TransformerConfig(
        vocab_size=len(bpe.vocab), N=1, d_model=16, d_ff=32, h=2, max_len=64, seed=3
    )
    model = Transformer(cfg)
    subset = pairs[:7]
    got = teacher_forced(model, bpe, subset, max_tokens=64)
    nll, n = 0.0, 0
    for src_text, tgt_text in subset:
        src, tgt = bpe.encode(src_text), bpe.encode(tgt_text)
        tgt_in = [cfg.bos_id, *tgt]
        tgt_out = [*tgt, cfg.eos_id]
        logits, _ = model.forward(np.array([src]), np.array([tgt_in]))
        z = np.asarray(logits[0], dtype=np.float64)
        logp = z - z.max(-1, keepdims=True)
        logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
        nll -= logp[np.arange(len(tgt_out)), tgt_out].sum()
        n += len(tgt_out)
    assert got["ppl_tokens"] == n and got["ppl_sentences"] == 7
    assert got["ppl"] == pytest.approx(math.exp(nll / n), rel=1e-4)


def test_a_blank_line_of_any_whitespace_translates_to_an_empty_line(bpe):
    """SentencePiece drops spaces alone but spells tabs and no-break spaces: a line of
    them alone is as blank as one of spaces, an empty output with no n-best entries, the
    model never run on it."""
    from scratchformer.app.translate import translate, translate_nbest  # noqa: PLC0415

    assert bpe.encode("\t") and bpe.encode("\u00a0") and not bpe.encode("   ")
    model = Transformer(TransformerConfig(vocab_size=len(bpe.vocab), N=1, d_model=16, d_ff=32, h=2))
    blank = ["", "   ", "\t", "\t\t", "\u00a0", " \t\u00a0 "]
    assert translate(model, bpe, blank, beam_size=2, max_len_b=3) == [""] * len(blank)
    assert translate(model, bpe, blank, search="greedy", max_len_b=3) == [""] * len(blank)
    nbest = translate_nbest(model, bpe, blank, beam_size=2, nbest=2, max_len_b=3)
    assert nbest == [[]] * len(blank)
    assert translate(model, bpe, ["\tla casa"], search="greedy", max_len_b=3) != [""]


def test_vocabulary_checkpoint_mismatch_is_an_error(tmp_path, bpe, data_dir, capsys):
    ckpt = _checkpoint(tmp_path, bpe, data_dir, vocab_size=len(bpe.vocab) + 7)
    assert main(["evaluate", "--checkpoint", str(ckpt)]) == 2
    err = capsys.readouterr().err
    assert "vocabulary/checkpoint mismatch" in err and "357" in err


def test_empty_split_is_an_error(tmp_path, bpe, data_dir, capsys):
    ckpt = _checkpoint(tmp_path, bpe, data_dir)
    (data_dir / "dev.tsv").write_text("", encoding="utf-8")
    assert main(["evaluate", "--checkpoint", str(ckpt), "--split", "dev"]) == 2
    assert "empty split" in capsys.readouterr().err


def test_translation_task_loads_tsv_with_a_cached_joint_bpe(data_dir):
    from scratchformer.app.data.pairs import DataError, translation_pairs  # noqa: PLC0415

    data = translation_pairs(str(data_dir), vocab_size=350, max_len=12)
    assert (data_dir / "spm-bpe-350.json").is_file()
    assert len(data.train) + data.dropped == 120 and len(data.test) == 6
    assert all(len(s) <= 12 and len(t) <= 12 for s, t in data.encoded("train"))
    again = translation_pairs(str(data_dir), vocab_size=350, max_len=12)  # from the cache
    assert again.tokenizer.vocab == data.tokenizer.vocab
    with pytest.raises(DataError, match="data_dir"):
        translation_pairs("", vocab_size=350, max_len=12)
    (data_dir / "train.tsv").write_text("hola\n", encoding="utf-8")
    with pytest.raises(Exception, match=r"train\.tsv:1: expected source<TAB>target"):
        translation_pairs(str(data_dir), vocab_size=350, max_len=12)


def test_dev_and_test_pairs_longer_than_the_task_allows_are_left_out_as_in_training(
    tmp_path, data_dir
):
    """A pair with a side longer than task.max_len is left out of dev and test as of
    training (counted, and said in the run's notes), so that a model sized to its training
    pairs is never asked to score one it cannot hold; a split left empty is refused."""
    from scratchformer.app.data.pairs import DataError, translation_pairs  # noqa: PLC0415

    long = " ".join(["Él rey ve á la casa."] * 40)
    for split in ("dev", "test"):
        with open(data_dir / f"{split}.tsv", "a", encoding="utf-8") as f:
            f.write(f"{long}\t{long}\n")
    data = translation_pairs(str(data_dir), vocab_size=350, max_len=30)
    assert data.dropped_held_out == {"valid": 1, "test": 1}
    assert len(data.valid) == len(data.test) == 6 and long not in dict(data.test)
    assert all(len(s) <= 30 and len(t) <= 30 for s, t in data.encoded("test"))
    (data_dir / "test.tsv").write_text(f"{long}\t{long}\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"no pair of .*test\.tsv fits task\.max_len=30"):
        translation_pairs(str(data_dir), vocab_size=350, max_len=30)


def test_training_a_few_steps_and_resuming_checks_the_vocabulary(tmp_path, data_dir, monkeypatch):
    import scratchformer.app.train.tasks.seq2seq as seq2seq  # noqa: PLC0415
    from scratchformer.app.train import ConfigError, TrainConfig, train  # noqa: PLC0415

    seen = []  # the final test decoding of a translation task never allows an empty output
    real = seq2seq.decode_outputs

    def spy(*args, **kw):
        seen.append(args[2].min_len)
        return real(*args, **kw)

    monkeypatch.setattr(seq2seq, "decode_outputs", spy)

    d = {
        "name": "t",
        "run_dir": str(tmp_path / "run"),
        "task": {
            "name": "translate",
            "data_dir": str(data_dir),
            "vocab_size": 350,
            "max_len": 30,
            "decode": "greedy",
        },
        "model": {"N": 1, "d_model": 16, "d_ff": 32, "h": 2, "max_len": 64},
        "train": {
            "steps": 2,
            "max_tokens": 256,
            "eval_every": 0,
            "checkpoint_every": 1,
            "average_last": 0,
        },
    }
    res = train(TrainConfig.from_dict(d), progress=False, echo=lambda *a: None)
    assert res.step == 2 and res.test is not None and seen == [1]
    assert "bleu" in res.test and "chrf" in res.test
    (data_dir / "spm-bpe-350.json").unlink()  # a different vocabulary...
    d["task"]["vocab_size"] = 360
    d["train"]["steps"] = 3
    with pytest.raises(ConfigError, match="cannot resume"):
        train(TrainConfig.from_dict(d), resume="latest", progress=False, echo=lambda *a: None)


def test_task_translate_flag_gives_the_cpu_config():
    from scratchformer.app.cli import build_parser  # noqa: PLC0415
    from scratchformer.app.commands.train import resolve_config  # noqa: PLC0415
    from scratchformer.app.train import TrainConfig  # noqa: PLC0415

    args = build_parser().parse_args(["train", "--task", "translate"])
    cfg, _ = resolve_config(args)
    assert cfg == TrainConfig.load("bible-cpu")
    assert cfg.task.data_dir == "data/bible" and cfg.train.steps == 1500
