"""``scratchformer import``: a GPT-2 folder (built here with NumPy and safetensors alone,
the gpt2 extra) as one checkpoint, its tensors mapped as docs/import.md derives, its
tokenizer inside; the refusals, one line each; the commands that take an imported model
(generate, plot attention, average, gradcheck --checkpoint).
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from gpt2_folders import gpt2_config, need, numpy_gpt2

need("tokenizers")
need("safetensors")
from scratchformer.app.checkpoint import load_with_tokenizer, read_params  # noqa: E402
from scratchformer.app.cli import main  # noqa: E402
from scratchformer.app.hf_import import HFImportError, import_folder, read_folder  # noqa: E402
from scratchformer.app.hf_import.folder import load_file  # noqa: E402
from scratchformer.engine.models import LanguageModel  # noqa: E402


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return numpy_gpt2(tmp_path_factory.mktemp("hf") / "tiny-gpt2")


@pytest.fixture(scope="module")
def imported(folder, tmp_path_factory):
    return import_folder(folder, tmp_path_factory.mktemp("out") / "gpt2.npz")


def copy_of(folder, tmp_path, **config):
    """A copy of the folder whose config.json has ``config`` laid over it."""
    dest = tmp_path / "copy"
    shutil.copytree(folder, dest)
    c = json.loads((dest / "config.json").read_text())
    (dest / "config.json").write_text(json.dumps({**c, **config}))
    return dest


def test_the_tensors_map_as_derived(folder, imported):
    """Conv1D (in, out) weights go in as they are; c_attn splits into W_q W_k W_v and
    b_q b_k b_v; the config is GPT-2's as options of our language model."""
    t = load_file(folder / "model.safetensors")
    params, header = read_params(imported)
    cfg = header["config"]
    D = cfg["d_model"]
    c_attn, bias = t["transformer.h.1.attn.c_attn.weight"], t["transformer.h.1.attn.c_attn.bias"]
    for j, c in enumerate("qkv"):
        np.testing.assert_array_equal(params[f"decoder.layers.1.self_attn.W_{c}"],
                                      c_attn[:, j * D : (j + 1) * D])
        np.testing.assert_array_equal(params[f"decoder.layers.1.self_attn.b_{c}"],
                                      bias[j * D : (j + 1) * D])
    pairs = {"embed.E": "wte.weight", "decoder.pos.P": "wpe.weight",
             "decoder.layers.0.ffn.W_2": "h.0.mlp.c_proj.weight",
             "decoder.layers.0.self_attn_norm.gamma": "h.0.ln_1.weight",
             "decoder.norm.beta": "ln_f.bias"}
    for ours, theirs in pairs.items():
        np.testing.assert_array_equal(params[ours], t["transformer." + theirs])
    V = cfg["vocab_size"]
    assert (cfg["pad_id"], cfg["bos_id"], cfg["eos_id"]) == (V, 0, 0)
    assert (cfg["norm"], cfg["positions"], cfg["activation"]) == ("pre", "learned", "gelu")
    assert cfg["attention_bias"] and not cfg["scale_embedding"] and cfg["eps_ls"] == 0.0
    assert header["meta"]["imported_from"]["architecture"] == "GPT2LMHeadModel"


def test_the_checkpoint_holds_the_tokenizer(imported):
    ckpt, tok = load_with_tokenizer(imported, expect=LanguageModel)
    assert tok.kind == "gpt2-bpe" and len(tok.vocab) == ckpt.config.vocab_size
    assert tok.decode(tok.encode("Straße 2024  ok<|endoftext|>")) == "Straße 2024  ok<|endoftext|>"


def test_a_tokenizer_json_serves_as_well(folder, tmp_path):
    """A folder with tokenizer.json alone (a fast tokenizer's file) imports the same."""
    tokenizers = need("tokenizers")
    dest = copy_of(folder, tmp_path)
    fast = tokenizers.ByteLevelBPETokenizer(str(dest / "vocab.json"), str(dest / "merges.txt"))
    fast.add_special_tokens(["<|endoftext|>"])
    fast.save(str(dest / "tokenizer.json"))
    (dest / "vocab.json").unlink()
    (dest / "merges.txt").unlink()
    _, tok, _ = read_folder(dest)
    _, ref, _ = read_folder(folder)
    assert tok.to_dict() == ref.to_dict()


REFUSALS = [
    ("bert", {"model_type": "bert", "architectures": ["BertForMaskedLM"]},
     "BertForMaskedLM (model_type 'bert'): it has token-type embeddings"),
    ("llama", {"model_type": "llama", "architectures": ["LlamaForCausalLM"]},
     "rotary positions (RoPE), RMSNorm, a gated (SwiGLU) feed-forward"),
    ("gpt-j", {"model_type": "gptj", "architectures": ["GPTJForCausalLM"], "rotary_dim": 64},
     "rotary positions"),
    ("gpt2 with rope", {"rope_theta": 10000.0}, "with rotary positions (RoPE), by its config"),
    ("cross-attention", {"add_cross_attention": True}, "cross-attention in every block"),
    ("exact gelu", {"activation_function": "gelu"}, "the activation 'gelu'"),
    ("untied", {"tie_word_embeddings": False}, "an output projection of its own"),
    ("scale", {"scale_attn_by_inverse_layer_idx": True}, "1/(layer + 1)"),
]


@pytest.mark.parametrize("what, config, message", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_another_architecture_or_option_is_refused_naming_it(folder, tmp_path, what, config,
                                                             message):
    with pytest.raises(HFImportError, match=None) as e:
        read_folder(copy_of(folder, tmp_path, **config))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_pickle_is_refused_with_the_conversion_command(folder, tmp_path):
    dest = copy_of(folder, tmp_path)
    (dest / "model.safetensors").rename(dest / "pytorch_model.bin")
    with pytest.raises(HFImportError, match="holds pytorch_model.bin, not model.safetensors"
                       r".*never loads a pickle.*import GPT2LMHeadModel as M.*"
                       "safe_serialization=True"):
        read_folder(dest)


def test_a_missing_tokenizer_is_refused(folder, tmp_path):
    dest = copy_of(folder, tmp_path)
    (dest / "vocab.json").unlink()
    with pytest.raises(HFImportError, match="holds no tokenizer .vocab.json and merges.txt, or "
                       "tokenizer.json."):
        read_folder(dest)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: (d / "config.json").write_text("{"), "is not readable JSON"),
        (lambda d: (d / "config.json").unlink(), "holds no config.json"),
        (lambda d: (d / "model.safetensors").write_bytes(b"\x00" * 3), "too short"),
        (lambda d: (d / "config.json").write_text(json.dumps(gpt2_config(7))),
         "the tokenizer has 2600 ids, config.json's vocab_size is 7"),
        (lambda d: (d / "config.json").write_text(json.dumps(gpt2_config(2600, n_embd=48))),
         "are not those of the GPT-2|is \\[2600, 32\\], config.json makes it \\[2600, 48\\]"),
    ],
)
def test_a_damaged_folder_is_refused_in_one_line(folder, tmp_path, change, message):
    dest = copy_of(folder, tmp_path)
    change(dest)
    with pytest.raises(HFImportError, match=message):
        read_folder(dest)


def test_the_command_and_its_output_checks(folder, tmp_path, capsys):
    out = tmp_path / "gpt2.npz"
    assert main(["import", str(folder), "-o", str(out)]) == 0
    assert f"-> {out}" in capsys.readouterr().out
    assert main(["import", str(folder), "-o", str(out)]) == 0  # its own earlier output
    for bad, why in [
        (tmp_path / "checkpoint_5.npz", "names checkpoint_<step>.npz belong to the trainer"),
        (folder / "vocab.json", "the model folder's file"),
        (tmp_path / "gpt2.txt", "should end in .npz"),
    ]:
        assert main(["import", str(folder), "-o", str(bad)]) == 2
        assert why in capsys.readouterr().err
    run = tmp_path / "runs" / "r"
    (run / "checkpoints").mkdir(parents=True)
    shutil.copy(out, run / "checkpoints" / "checkpoint_1.npz")  # a run's checkpoint
    assert main(["import", str(folder), "-o", str(run / "gpt2.npz")]) == 2
    assert "is the folder of a run" in capsys.readouterr().err


def test_commands_on_an_imported_model(imported, tmp_path, capsys):
    """generate (the language model's sampling), average, gradcheck --checkpoint (its
    directions; the keys' biases pass as zero) and plot attention."""
    assert main(["generate", "--checkpoint", str(imported), "--prompt", "Hello",
                 "--max-new", "5", "--temperature", "0"]) == 0
    assert capsys.readouterr().out.startswith("Hello")
    avg = tmp_path / "avg.npz"
    assert main(["average", str(imported), str(imported), "-o", str(avg)]) == 2  # twice: no
    assert "given twice" in capsys.readouterr().err
    assert main(["gradcheck", "--checkpoint", str(imported), "--directions", "1",
                 "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "gradcheck: PASSED" in out and "extrapolated" in out
    assert main(["gradcheck", "--checkpoint", str(imported), "--preset", "small"]) == 2
    pytest.importorskip("matplotlib")
    assert main(["plot", "attention", str(imported), "Hello there", "-o", str(tmp_path)]) == 0
    assert (tmp_path / "attention_decoder.png").is_file()
    assert main(["plot", "attention", str(imported), "Hi", "--kind", "cross",
                 "-o", str(tmp_path)]) == 2
    assert "holds a language model" in capsys.readouterr().err


def test_without_the_extra_a_command_says_so_in_one_line(imported, monkeypatch, capsys):
    import sys  # noqa: PLC0415

    monkeypatch.setitem(sys.modules, "tokenizers", None)
    assert main(["generate", "--checkpoint", str(imported), "--prompt", "a"]) == 2
    err = capsys.readouterr().err
    assert "needs the tokenizers library: pip install -e '.[gpt2]'" in err
    assert len(err.strip().splitlines()) == 1
