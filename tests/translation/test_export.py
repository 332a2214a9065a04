"""``scratchformer export``: a translation checkpoint as a transformers (Marian) folder.

Without transformers: the refusals, the tensor mapping's permutation against Marian's
sinusoids (by their definition), the folder's files. With the ``tokenizers`` library:
tokenizer.json against SentencePiece. Slow, with transformers and torch: a model
trained in seconds, exported, loaded by transformers and decoded by ``generate``, token
for token against our greedy search, logits within float32 rounding.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from task_data import corpus, train_translation

from scratchformer.app.checkpoint import load_with_tokenizer, save_checkpoint
from scratchformer.app.cli import main as cli_main
from scratchformer.app.data.tokenizers import CharTokenizer
from scratchformer.app.data.vocab import Vocab
from scratchformer.engine.models import Transformer, TransformerConfig
from scratchformer.engine.models.classifier import EncoderClassifier
from scratchformer.engine.models.lm import LanguageModel
from scratchformer.engine.ops.positional import sinusoidal_table

export = pytest.importorskip("scratchformer.app.export")
pytest.importorskip("sentencepiece")
pytest.importorskip("safetensors")

#: sentences whose spacing and characters exercise the tokenizer's edges
EDGES = ["  doble  espacio ", "trail ", " lead", "x\ty", "☃ nieve", "ü", "a  b   c"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(checkpoint, model, tokenizer) of the small model of ``train_translation``."""
    ckpt = train_translation(tmp_path_factory.mktemp("export"))
    loaded, tok = load_with_tokenizer(ckpt)
    return ckpt, loaded.model, tok


def config(bpe, **kw):
    sizes = {"N": 1, "d_model": 8, "d_ff": 16, "h": 2} | kw
    return TransformerConfig(vocab_size=len(bpe.vocab), **sizes)


@pytest.mark.parametrize(
    "kw, reason",
    [
        ({"norm": "pre"}, "a pre-LN model: Marian's layers are post-LN"),
        ({"positions": "learned"}, "learned positions: Marian's positions are the paper's"),
        ({"attention": "relative"}, "relative attention (attention)"),
        ({"attention": "local", "encoder_attention": "dense"}, "local attention (attention)"),
        ({"d_k": 2}, "heads of width d_k=2, d_v=4"),
        ({"ln_eps": 1e-6}, "LayerNorm epsilon 1e-06: Marian's is fixed at 1e-05"),
        ({"source_end_id": 2}, "an id appended to every source (source_end_id)"),
    ],
)
def test_configurations_without_an_exact_mapping_are_refused_with_the_reason(bpe, kw, reason):
    assert reason in export.refusal(Transformer(config(bpe, **kw)), bpe)


def test_the_language_model_the_classifier_and_other_tokenizers_are_refused(bpe, trained):
    assert "holds a LanguageModel" in export.refusal(LanguageModel(config(bpe)), bpe)
    assert "holds an EncoderClassifier" in export.refusal(EncoderClassifier(config(bpe), 3), bpe)
    char = CharTokenizer(Vocab(list("abc")))
    assert "a char tokenizer" in export.refusal(trained[1], char)
    assert export.refusal(trained[1], trained[2]) is None


def test_the_command_refuses_in_one_line_and_writes_nothing(tmp_path, bpe, capsys):
    ckpt = tmp_path / "pre.npz"
    save_checkpoint(ckpt, Transformer(config(bpe, norm="pre")), meta={"tokenizer": bpe.to_dict()})
    assert cli_main(["export", str(ckpt), "-o", str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot be exported: a pre-LN model" in err[0], err
    assert not (tmp_path / "hf").exists()


def test_the_permutation_turns_our_sinusoids_into_marians(trained):
    """Marian's table by its definition (sines of every frequency, then cosines) is ours
    with the coordinates permuted by ``pi``; and every tensor goes through the same pi."""
    D, L = 32, 40
    pos = np.arange(L)[:, None]
    freq = np.power(10000.0, np.arange(0, D, 2) / D)[None, :]
    marian = np.concatenate([np.sin(pos / freq), np.cos(pos / freq)], axis=1)
    pi = export.permutation(D)
    assert np.array_equal(sinusoidal_table(L, D, np.float64)[:, pi], marian)
    model = trained[1]
    t = export.marian_tensors(model)
    p = model.parameters()
    assert np.array_equal(t["model.shared.weight"], np.asarray(p["embed.E"])[:, pi])
    W_q = np.asarray(p["decoder.layers.1.cross_attn.W_q"])
    assert np.array_equal(t["model.decoder.layers.1.encoder_attn.q_proj.weight"], W_q[pi, :].T)
    W_2 = np.asarray(p["encoder.layers.0.ffn.W_2"])
    assert np.array_equal(t["model.encoder.layers.0.fc2.weight"], W_2[:, pi].T)
    ours = sum(v.size for v in p.values())
    biases = sum(v.size for k, v in t.items() if k.endswith(("proj.bias", "final_logits_bias")))
    tied = 2 * p["embed.E"].size  # decoder.embed_tokens and lm_head repeat model.shared
    assert sum(v.size for v in t.values()) == ours + biases + tied


def test_the_folder_holds_the_six_files_and_a_rerun_is_a_no_op(trained, tmp_path, capsys):
    out = tmp_path / "hf"
    assert cli_main(["export", str(trained[0]), "-o", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(export.FILES)
    cfg = json.loads((out / "config.json").read_text())
    assert (cfg["model_type"], cfg["decoder_start_token_id"], cfg["d_model"]) == ("marian", 1, 32)
    gen = json.loads((out / "generation_config.json").read_text())
    assert gen["suppress_tokens"] == [0, 1] and gen["num_beams"] == 1
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    assert cli_main(["export", str(trained[0]), "-o", str(out)]) == 0
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before


def test_a_run_folder_is_never_an_export_folder(trained, capsys):
    run = trained[0].parent.parent  # holds the run's config.json
    before = (run / "config.json").read_bytes()
    assert cli_main(["export", str(trained[0]), "-o", str(run), "--overwrite"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is the folder of a run" in err[0], err
    assert (run / "config.json").read_bytes() == before


def test_the_folder_of_a_data_set_of_checkpoints_or_of_the_exercises_is_refused(
    trained, tmp_path, capsys
):
    """By what the program writes there (a manifest or splits, checkpoint_<step>.npz
    files, an exercise's file), not only a run's config.json."""
    data, exercises = tmp_path / "data", tmp_path / "exercises"
    data.mkdir()
    for s in ("train", "dev"):
        (data / f"{s}.tsv").write_text("hola\thello\n")
    exercises.mkdir()
    (exercises / "relu.py").write_text('EXERCISE = "relu"\n')
    cases = [
        (trained[0].parent, "the checkpoints folder of the run in"),
        (data, "the folder of a data set"),
        (exercises, "the exercises folder"),
    ]
    for out, what in cases:
        before = sorted(p.name for p in out.iterdir())
        assert cli_main(["export", str(trained[0]), "-o", str(out), "--overwrite"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"-o {out} is {what}" in err[0], err
        assert sorted(p.name for p in out.iterdir()) == before


def test_an_export_replaces_only_an_earlier_export_whole(trained, tmp_path, capsys):
    """A directory where a file goes, or a file that is not an export's, refuses the
    folder before anything is written; over an earlier export, the new folder is built
    beside it and renamed into place, nothing left beside it."""
    out = tmp_path / "hf"
    (out / "model.safetensors").mkdir(parents=True)
    assert cli_main(["export", str(trained[0]), "-o", str(out), "--overwrite"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "model.safetensors is a directory" in err[0], err
    assert [p.name for p in tmp_path.iterdir()] == ["hf"]
    (out / "model.safetensors").rmdir()
    (out / "notes.txt").write_text("mine")
    assert cli_main(["export", str(trained[0]), "-o", str(out), "--overwrite"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds notes.txt, which is not part of an export" in err[0], err
    (out / "notes.txt").unlink()
    assert cli_main(["export", str(trained[0]), "-o", str(out)]) == 0
    (out / "config.json").write_text("{}")
    assert cli_main(["export", str(trained[0]), "-o", str(out)]) == 2
    assert "config.json exists with other content" in capsys.readouterr().err
    inode = out.stat().st_ino
    assert cli_main(["export", str(trained[0]), "-o", str(out), "--overwrite"]) == 0
    assert out.stat().st_ino != inode  # a new folder, renamed into place
    assert sorted(p.name for p in out.iterdir()) == sorted(export.FILES)
    assert [p.name for p in tmp_path.iterdir()] == ["hf"]


def test_tokenizer_json_encodes_and_decodes_as_sentencepiece(trained):
    tokenizers = pytest.importorskip("tokenizers")
    tok = trained[2]
    theirs = tokenizers.Tokenizer.from_str(json.dumps(export.tokenizer_json(tok)))
    for text in [s for pair in corpus() for s in pair] + EDGES:
        ids = tok.encode(text)
        assert theirs.encode(text).ids == ids, text
        assert theirs.decode(ids, skip_special_tokens=True) == tok.decode(ids), text


@pytest.mark.slow
def test_transformers_decodes_the_export_as_we_do(trained, tmp_path):
    """generate's greedy output equals ours on every training sentence, and the logits
    agree within float32 rounding (max|a - b| / max|a|)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from scratchformer.app.translate import translate
    from scratchformer.engine.decode import greedy_decode

    ckpt, model, tok = trained
    out = tmp_path / "hf"
    export.export_marian(ckpt, out)
    hf = transformers.MarianMTModel.from_pretrained(out).eval()
    their_tok = transformers.AutoTokenizer.from_pretrained(out)
    sources = [s for s, _ in corpus()]
    worst = 0.0
    for s in sources:
        ids = tok.encode(s)
        assert their_tok(s)["input_ids"] == ids
        ours = greedy_decode(model, np.array([ids]), min_len=1)[0]
        with torch.no_grad():
            theirs = hf.generate(torch.tensor([ids]), max_length=len(ids) + 52)[0].tolist()
        assert theirs == [1, *ours, 2], s
        tgt = np.array([[1, *ours]])
        a = np.asarray(model.forward(np.array([ids]), tgt)[0])
        with torch.no_grad():
            b = hf(input_ids=torch.tensor([ids]), decoder_input_ids=torch.from_numpy(tgt)).logits
        worst = max(worst, float(np.abs(a - b.numpy()).max() / np.abs(a).max()))
    assert worst < 1e-5, worst
    enc = their_tok(sources, return_tensors="pt", padding=True)
    with torch.no_grad():
        generated = hf.generate(**enc, max_new_tokens=60)
    text = their_tok.batch_decode(generated, skip_special_tokens=True)
    assert text == translate(model, tok, sources, search="greedy")


@pytest.mark.slow
@pytest.mark.parametrize("share", ["decoder", "none"])
def test_untied_embeddings_export_exactly(bpe, share, tmp_path):
    """A source embedding of its own (and an output projection of its own): the logits
    of transformers' model equal ours within float32 rounding."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model = Transformer(config(bpe, share_embeddings=share, N=2, seed=3))
    ckpt = tmp_path / "m.npz"
    save_checkpoint(ckpt, model, meta={"tokenizer": bpe.to_dict()})
    export.export_marian(ckpt, tmp_path / "hf")
    hf = transformers.MarianMTModel.from_pretrained(tmp_path / "hf").eval()
    r = np.random.default_rng(0)
    src, tgt = r.integers(4, len(bpe.vocab), (3, 7)), r.integers(4, len(bpe.vocab), (3, 5))
    a = np.asarray(model.forward(src, tgt)[0])
    with torch.no_grad():
        b = hf(input_ids=torch.from_numpy(src), decoder_input_ids=torch.from_numpy(tgt)).logits
    assert np.abs(a - b.numpy()).max() / np.abs(a).max() < 1e-5


def test_a_zero_start_model_gets_the_extra_last_entry(bpe, tmp_path):
    """A ``zero_start`` model's folder (the module doc): the extra last entry ``<pad>``
    (zero row, bias -1e9, the start and transformers' padding), our padding renamed."""
    model = Transformer(config(bpe, zero_start=True, seed=4))
    V = len(bpe.vocab)
    ckpt = tmp_path / "m.npz"
    save_checkpoint(ckpt, model, meta={"tokenizer": bpe.to_dict()})
    out = tmp_path / "hf"
    export.export_marian(ckpt, out)
    cfg = json.loads((out / "config.json").read_text())
    gen = json.loads((out / "generation_config.json").read_text())
    assert (cfg["vocab_size"], cfg["decoder_vocab_size"]) == (V + 1, V + 1)
    assert cfg["decoder_start_token_id"] == cfg["pad_token_id"] == V
    assert gen["decoder_start_token_id"] == V and V in gen["suppress_tokens"]
    t = export.marian_tensors(model)
    assert t["model.shared.weight"].shape == (V + 1, 8)
    assert not t["model.shared.weight"][V].any()
    assert t["final_logits_bias"][0, V] == export.NEVER and not t["final_logits_bias"][0, :V].any()
    tok = json.loads((out / "tokenizer.json").read_text())
    names = {a["id"]: a["content"] for a in tok["added_tokens"]}
    assert names[V] == "<pad>" and names[model.config.pad_id] == "<padding>"
    assert json.loads((out / "tokenizer_config.json").read_text())["pad_token"] == "<pad>"


@pytest.mark.slow
@pytest.mark.parametrize("share", ["all", "none"])
def test_a_zero_start_model_exports_exactly(bpe, share, tmp_path):
    """transformers starts from the extra entry's zero row: its logits equal ours (which
    start from the zero vector, whatever token is at position 0) within float32
    rounding, and the extra entry's probability is exactly 0."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model = Transformer(config(bpe, zero_start=True, share_embeddings=share, N=2, seed=5))
    V = len(bpe.vocab)
    ckpt = tmp_path / "m.npz"
    save_checkpoint(ckpt, model, meta={"tokenizer": bpe.to_dict()})
    export.export_marian(ckpt, tmp_path / "hf")
    hf = transformers.MarianMTModel.from_pretrained(tmp_path / "hf").eval()
    r = np.random.default_rng(0)
    src, tgt = r.integers(4, V, (3, 7)), r.integers(4, V, (3, 5))
    tgt[:, 0] = model.config.bos_id
    theirs_in = tgt.copy()
    theirs_in[:, 0] = V  # the folder's start
    a = np.asarray(model.forward(src, tgt)[0])
    with torch.no_grad():
        b = hf(input_ids=torch.from_numpy(src), decoder_input_ids=torch.from_numpy(theirs_in))
    b = b.logits.numpy()
    assert np.abs(a - b[..., :V]).max() / np.abs(a).max() < 1e-5
    assert (torch.log_softmax(torch.from_numpy(b), -1)[..., V] < -1e8).all()
    with torch.no_grad():
        p_theirs = torch.softmax(torch.from_numpy(b), -1)[..., :V].numpy()
    p_ours = np.exp(a - a.max(-1, keepdims=True))
    p_ours /= p_ours.sum(-1, keepdims=True)
    assert np.abs(p_theirs - p_ours).max() < 1e-6
