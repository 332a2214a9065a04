"""Checkpoints written by an earlier version (commit 7ad2f11), which had two training
systems (``train.py`` for the encoder-decoder tasks, ``train_tasks.py`` for lm and
classify), load with the current code and give the same outputs; their runs resume. How
they were made: tests/fixtures/checkpoints_7ad2f11/make_fixtures.py."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from task_data import write_monolingual

from scratchformer.app.checkpoint import load_with_tokenizer
from scratchformer.app.cli import main
from scratchformer.engine import backend as B
from scratchformer.engine.decode import beam_search, greedy_decode
from scratchformer.engine.decode.sample import generate
from scratchformer.engine.models import EncoderClassifier, LanguageModel, Transformer

FIXTURES = Path(__file__).parent / "fixtures" / "checkpoints_7ad2f11"


def _expected(name):
    with np.load(FIXTURES / f"{name}.expected.npz", allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def _ids(row):
    return [int(i) for i in row if i >= 0]


@pytest.mark.parametrize("name", ["reverse", "translate"])
def test_encoder_decoder_checkpoints_give_the_same_outputs(name):
    if name == "translate":
        pytest.importorskip("sentencepiece")
    ck, tok = load_with_tokenizer(FIXTURES / f"{name}.npz", expect=Transformer)
    want = _expected(name)
    logits, _ = ck.model.forward(B.asarray(want["src"]), B.asarray(want["tgt_in"]))
    np.testing.assert_allclose(B.asnumpy(logits), want["logits"], rtol=1e-5, atol=1e-6)
    src = B.asarray(want["src"])
    assert greedy_decode(ck.model, src, min_len=1) == [_ids(r) for r in want["greedy"]]
    beam = [h[0].tokens for h in beam_search(ck.model, src, beam_size=4, alpha=0.6, min_len=1)]
    assert beam == [_ids(r) for r in want["beam"]]
    sources = json.loads(str(want["sources"]))
    assert [tok.encode(s) for s in sources] == [_ids(r[r > 0]) for r in want["src"]]  # pad: 0


def test_language_model_checkpoint_gives_the_same_outputs():
    ck, _ = load_with_tokenizer(FIXTURES / "lm.npz", expect=LanguageModel)
    want = _expected("lm")
    logits, _ = ck.model.forward(B.asarray(want["ids"]))
    np.testing.assert_allclose(B.asnumpy(logits), want["logits"], rtol=1e-5, atol=1e-6)
    prompt = _ids(want["ids"][0][want["ids"][0] > 0])
    assert generate(ck.model, prompt, 20, temperature=0.0) == [_ids(want["generated"][0])]


def test_classifier_checkpoint_gives_the_same_outputs():
    ck, _ = load_with_tokenizer(FIXTURES / "classify.npz", expect=EncoderClassifier)
    want = _expected("classify")
    logits, _ = ck.model.forward(B.asarray(want["ids"]))
    np.testing.assert_allclose(B.asnumpy(logits), want["logits"], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(
        B.asnumpy(ck.model.predict(B.asarray(want["ids"]))), want["predicted"]
    )
    assert ck.meta["labels"] == ["gospels", "law"]


def test_an_earlier_encoder_decoder_run_resumes(tmp_path, capsys):
    """Its stored configuration uses the former names (max_steps, factor, decoding in
    [train]): they are read under the new ones, with a note each."""
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    old = shutil.copy(FIXTURES / "reverse.npz", run / "checkpoints" / "checkpoint_4.npz")
    argv = ["train", "--resume", str(old), "--run-dir", str(run), "--steps", "6", "--no-progress"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "note: train.max_steps is now called train.steps" in out
    assert "note: optim.factor is now called optim.lr_factor" in out
    assert "resuming reverse at step 4" in out and "done: step 6, 2 steps" in out


def test_an_earlier_language_model_run_resumes(tmp_path, capsys):
    """The former lm trainer kept its settings in one flat table; the data is the one
    it trained on (tests/task_data.py writes the same files)."""
    data = write_monolingual(tmp_path / "data", former=True)  # as it was then
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    old = shutil.copy(FIXTURES / "lm.npz", run / "checkpoints" / "checkpoint_4.npz")
    argv = [
        "train",
        "--resume",
        str(old),
        "--run-dir",
        str(run),
        "--data-dir",
        str(data),
        "--steps",
        "6",
        "--no-progress",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "holds lm/classify settings of the former layout" in out
    assert "resuming lm at step 4" in out and "bits/char" in out
