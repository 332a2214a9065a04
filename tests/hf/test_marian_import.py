"""``scratchformer import`` of Marian folders and the round trip through the export:

- a random MarianMTModel (OPUS-MT's layout) imports with the options it has (SiLU,
  biases, final_logits_bias, the start from <pad>, the source's </s>); exported again,
  transformers loads it and computes the same logits as the original;
- our own exported models (zero start or not, the embeddings shared or not) import back
  with their parameters bit for bit; export, import, export gives identical files;
- the refusals, one line each.

Slow: needs torch and transformers (the hf extra).
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from gpt2_folders import need
from marian_folders import transformers_marian

from scratchformer.app.checkpoint import load_with_tokenizer, read_params, save_checkpoint
from scratchformer.app.cli import main
from scratchformer.app.data.bpe import BPETokenizer
from scratchformer.app.export import export_marian
from scratchformer.app.hf_import import HFImportError, import_folder, read_folder
from scratchformer.engine import backend as B
from scratchformer.engine.models import Transformer, TransformerConfig

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    """(folder, transformers' model, our checkpoint) of one random Marian."""
    need("torch")
    root = tmp_path_factory.mktemp("marian-import")
    theirs = transformers_marian(root / "random-marian", seed=1)
    assert main(["import", str(root / "random-marian"), "-o", str(root / "m.npz")]) == 0
    return root / "random-marian", theirs, root / "m.npz"


def test_the_options_of_marian_come_in(marian):
    folder, theirs, ckpt = marian
    params, header = read_params(ckpt)
    cfg, V = header["config"], theirs.config.vocab_size
    assert (cfg["activation"], cfg["norm"], cfg["positions"]) == ("silu", "post", "sinusoidal")
    assert cfg["attention_bias"] and cfg["output_bias"] and cfg["scale_embedding"]
    assert (cfg["pad_id"], cfg["bos_id"], cfg["eos_id"], cfg["source_end_id"]) == (
        V - 1, V - 1, 0, 0)
    assert cfg["zero_start"] and cfg["share_embeddings"] == "all"
    np.testing.assert_array_equal(params["out_bias.b"],
                                  theirs.final_logits_bias.detach().numpy()[0])
    assert header["meta"]["imported_from"]["architecture"] == "MarianMTModel"
    _, tok = load_with_tokenizer(ckpt)
    assert tok.kind == "marian-spm" and len(tok.vocab) == V


def test_exported_again_transformers_computes_the_same(marian, tmp_path):
    """import, export: transformers loads the folder (MarianTokenizer and all) and its
    logits are the original model's, bit for bit (the same float32 numbers in the same
    layout)."""
    torch, transformers = need("torch"), need("transformers")
    folder, theirs, ckpt = marian
    export_marian(ckpt, tmp_path / "again")
    again = transformers.MarianMTModel.from_pretrained(str(tmp_path / "again")).eval()
    tok = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "again"))
    assert type(tok).__name__ == "MarianTokenizer"
    batch = tok(["ka to ri über café", "men 42 !"], return_tensors="pt", padding=True)
    start = torch.full((2, 1), theirs.config.decoder_start_token_id)
    with torch.no_grad():
        a = theirs(**batch, decoder_input_ids=start).logits
        b = again(**batch, decoder_input_ids=start).logits
    assert torch.equal(a, b)
    for name, t in theirs.state_dict().items():
        assert torch.equal(t, again.state_dict()[name]), name


def test_export_import_export_gives_identical_files(marian, tmp_path):
    _, _, ckpt = marian
    first = export_marian(ckpt, tmp_path / "one")
    import_folder(tmp_path / "one", tmp_path / "back.npz")
    second = export_marian(tmp_path / "back.npz", tmp_path / "two")
    assert [p.name for p in first] == [p.name for p in second]
    for a, b in zip(first, second):
        assert a.read_bytes() == b.read_bytes(), a.name
    p1, _ = read_params(ckpt)
    p2, _ = read_params(tmp_path / "back.npz")
    assert sorted(p1) == sorted(p2)
    assert all(np.array_equal(p1[k], p2[k]) for k in p1)


@pytest.fixture(scope="module")
def bpe():
    need("sentencepiece")
    words = ["la", "casa", "verde", "el", "perro", "corre", "the", "house", "green", "dog"]
    r = np.random.default_rng(0)
    texts = [" ".join(r.choice(words, 6)) for _ in range(300)]
    return BPETokenizer.train(texts, 290)


@pytest.mark.parametrize(("zero_start", "share", "options"), [
    (False, "all", {}),
    (True, "all", {}),
    (True, "none", {"activation": "silu", "attention_bias": True, "output_bias": True}),
    (False, "decoder", {"scale_embedding": False, "activation": "gelu"}),
])
def test_our_exported_model_imports_back_bit_for_bit(bpe, tmp_path, zero_start, share, options):
    """Our model, exported (the zero start's extra last entry, zero biases where it has
    none), imported: the same config and every parameter bit for bit; exported again,
    the same files."""
    V = len(bpe.vocab)
    cfg = TransformerConfig(vocab_size=V, N=1, N_dec=2, d_model=16, d_ff=24, h=2,
                            max_len=40, zero_start=zero_start, share_embeddings=share,
                            src_vocab_size=None if share == "all" else V, seed=3, **options)
    model = Transformer(cfg)
    r = np.random.default_rng(1)
    for name, p in model.parameters().items():  # biases non-zero where the model has them
        if ".b_" in name or name == "out_bias.b":
            p[...] = B.asarray(0.1 * r.standard_normal(p.shape))
    ckpt = save_checkpoint(tmp_path / "ours.npz", model, step=0, meta={"tokenizer": bpe.to_dict()})
    first = export_marian(ckpt, tmp_path / "one")
    back, tok, _ = read_folder(tmp_path / "one")
    assert back.config.to_dict() == {**cfg.to_dict(), "eps_ls": 0.1, "P_drop": 0.1, "seed": 0}
    mine = model.parameters()
    assert list(back.parameters()) == list(mine)
    for k, v in back.parameters().items():
        assert np.array_equal(B.asnumpy(v), B.asnumpy(mine[k])), k
    assert tok.to_dict() == bpe.to_dict()
    save_checkpoint(tmp_path / "back.npz", back, step=0, meta={"tokenizer": tok.to_dict()})
    second = export_marian(tmp_path / "back.npz", tmp_path / "two")
    for a, b in zip(first, second):
        assert a.read_bytes() == b.read_bytes(), a.name


def copy_of(folder, tmp_path, **config):
    dest = tmp_path / "copy"
    shutil.copytree(folder, dest)
    c = json.loads((dest / "config.json").read_text())
    (dest / "config.json").write_text(json.dumps({**c, **config}))
    return dest


@pytest.mark.parametrize(("config", "says"), [
    ({"activation_function": "gelu"}, "the activation 'gelu'"),
    ({"decoder_attention_heads": 4}, "encoder_attention_heads 2 and decoder_attention_heads 4"),
    ({"decoder_start_token_id": 0}, "decoder_start_token_id 0 is not the pad token"),
    ({"share_encoder_decoder_embeddings": True, "tie_word_embeddings": False},
     "an output projection of its own"),
    ({"model_type": "t5"}, "bucketed relative position biases"),
    ({"normalize_embedding": True}, "a LayerNorm on the embeddings"),
])
def test_refusals_one_line(marian, tmp_path, capsys, config, says):
    folder, _, _ = marian
    bad = copy_of(folder, tmp_path, **config)
    with pytest.raises(HFImportError, match="") as e:
        read_folder(bad)
    assert says in str(e.value) and "\n" not in str(e.value)
    assert main(["import", str(bad), "-o", str(tmp_path / "x.npz")]) == 2
    assert not (tmp_path / "x.npz").exists()
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1
    with capsys.disabled():
        print(f"\n{config}: exit 2, stderr: {err.strip()}")


def test_a_non_zero_start_row_is_refused(marian, tmp_path):
    """OPUS-MT's <pad> row is zero (the zero start); a folder whose row is not is refused."""
    st = need("safetensors.numpy")
    folder, theirs, _ = marian
    bad = copy_of(folder, tmp_path)
    t = st.load_file(str(bad / "model.safetensors"))
    t["model.shared.weight"][theirs.config.pad_token_id] = 0.5
    st.save_file(t, str(bad / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(HFImportError, match="the embedding row of <pad>, the decoder's start") as e:
        read_folder(bad)
    print(f"\n<pad> row 0.5: {e.value}")
