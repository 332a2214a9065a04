"""Small GPT-2 folders built here, never downloaded: a varied text, a byte-level BPE
trained on it by the tokenizers library, and a random GPT-2 saved by transformers
(``transformers_gpt2``) or written with NumPy alone (``numpy_gpt2``: the gpt2 extra is
all it needs).

Dimension key: ``V`` vocabulary, ``D`` n_embd, ``F`` n_inner, ``P`` n_positions.
"""

from __future__ import annotations

import importlib
import json
import os
import random
from pathlib import Path

import numpy as np
import pytest

ENDOFTEXT = "<|endoftext|>"

#: pieces of text of several scripts and kinds: words, accents, CJK, emoji, digits,
#: contractions, punctuation
_SYLLABLES = ["ka", "to", "ri", "men", "sa", "lo", "ver", "gen", "da", "ni", "por", "que"]
_WORDS = ["über", "naïve", "café", "ñandú", "Straße", "日本語", "中文", "Ελληνικά",
          "русский", "😀", "🚀✨", "don't", "we'll", "it's", "I'm", "they've", "O'Neil"]
_SPACES = [" ", " ", " ", "  ", "   ", "\t", " \t ", "\u00a0", "\u3000"]
_PUNCT = [".", ",", "!", "?", ";", ":", "...", "--", "(", ")", '"', "'", "#", "@", "%"]


def need(module: str):
    """``pytest.importorskip``, except under CI=true (where .ci/run installs the extras):
    there a missing library fails the test rather than skip it."""
    if os.environ.get("CI") == "true":
        return importlib.import_module(module)  # the submodule itself, as importorskip gives
    return pytest.importorskip(module)


def varied_line(r: random.Random) -> str:
    """One line: made-up words, real words of several scripts, numbers, punctuation,
    runs of whitespace and, now and then, the special token."""
    parts = []
    for _ in range(r.randint(1, 14)):
        k = r.random()
        if k < 0.45:
            w = "".join(r.choice(_SYLLABLES) for _ in range(r.randint(1, 4)))
            parts.append(w.capitalize() if r.random() < 0.2 else w)
        elif k < 0.65:
            parts.append(r.choice(_WORDS))
        elif k < 0.8:
            parts.append(str(r.randint(0, 10 ** r.randint(1, 7))))
        elif k < 0.95:
            parts.append(r.choice(_PUNCT))
        else:
            parts.append(ENDOFTEXT)
        parts.append(r.choice(_SPACES) if r.random() < 0.85 else "")
    line = "".join(parts)
    return line if r.random() < 0.8 else " " + line + r.choice(["", " ", "  "])


def varied_text(n: int, seed: int = 0) -> list[str]:
    r = random.Random(seed)
    return [varied_line(r) for _ in range(n)]


def train_bpe(folder: Path, vocab_size: int = 2600, seed: int = 0) -> Path:
    """vocab.json and merges.txt of a byte-level BPE trained by the tokenizers library on
    a varied text, ``<|endoftext|>`` its id 0. Returns the folder."""
    tokenizers = need("tokenizers")
    bpe = tokenizers.ByteLevelBPETokenizer()
    corpus = varied_text(6000, seed) + [
        "".join(random.Random(seed + i).choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(60))
        for i in range(3000)
    ]
    bpe.train_from_iterator(corpus, vocab_size=vocab_size, min_frequency=2,
                            special_tokens=[ENDOFTEXT], show_progress=False)
    folder.mkdir(parents=True, exist_ok=True)
    bpe.save_model(str(folder))
    return folder


def vocab_size_of(folder: Path) -> int:
    return len(json.loads((folder / "vocab.json").read_text(encoding="utf-8")))


def gpt2_config(V: int, **overrides) -> dict:
    """config.json of a small GPT-2 (2 layers, 4 heads, D = 32, P = 64), ``<|endoftext|>``
    (id 0) its bos and eos."""
    c = {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": V,
        "n_positions": 64, "n_embd": 32, "n_layer": 2, "n_head": 4, "n_inner": None,
        "activation_function": "gelu_new", "resid_pdrop": 0.1, "embd_pdrop": 0.1,
        "attn_pdrop": 0.1, "layer_norm_epsilon": 1e-5, "bos_token_id": 0, "eos_token_id": 0,
        "tie_word_embeddings": True,
    }
    return {**c, **overrides}


def transformers_gpt2(folder: Path, seed: int = 0, **overrides):
    """A random GPT-2 built by transformers (GPT2Config, GPT2LMHeadModel, save_pretrained)
    with a trained tokenizer; every bias and LayerNorm made non-zero (they start at 0 and
    1), the queries' and keys' weights ten times their initial scale (attention that is
    not near uniform). Returns the torch model (float32, eval mode)."""
    torch = need("torch")
    transformers = need("transformers")
    train_bpe(folder, seed=seed)
    c = gpt2_config(vocab_size_of(folder), **overrides)
    c.pop("architectures"), c.pop("model_type")
    torch.manual_seed(seed)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**c))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias") or "ln_" in name:
                p.add_(0.1 * torch.randn_like(p))
            if name.endswith("c_attn.weight"):
                p[:, : 2 * c["n_embd"]] *= 10.0
    model.save_pretrained(str(folder))
    return model.eval()


def numpy_gpt2(folder: Path, seed: int = 0, **overrides) -> Path:
    """The same small GPT-2 written with NumPy and safetensors alone (no torch):
    config.json, model.safetensors (transformers' tensor names) and a trained tokenizer;
    the queries' and keys' weights of scale 0.2 (attention that is not near uniform)."""
    st = need("safetensors.numpy")
    train_bpe(folder, seed=seed)
    c = gpt2_config(vocab_size_of(folder), **overrides)
    r = np.random.default_rng(seed)
    V, D, P, L = c["vocab_size"], c["n_embd"], c["n_positions"], c["n_layer"]
    F = c["n_inner"] or 4 * D

    def w(*shape, scale=0.02):
        return (scale * r.standard_normal(shape)).astype(np.float32)

    t = {"transformer.wte.weight": w(V, D), "transformer.wpe.weight": w(P, D, scale=0.01)}
    for i in range(L):
        h = f"transformer.h.{i}."
        t.update({
            h + "ln_1.weight": 1 + w(D, scale=0.1), h + "ln_1.bias": w(D, scale=0.1),
            h + "attn.c_attn.weight": np.concatenate([w(D, 2 * D, scale=0.2), w(D, D)], 1),
            h + "attn.c_attn.bias": w(3 * D),
            h + "attn.c_proj.weight": w(D, D), h + "attn.c_proj.bias": w(D),
            h + "ln_2.weight": 1 + w(D, scale=0.1), h + "ln_2.bias": w(D, scale=0.1),
            h + "mlp.c_fc.weight": w(D, F), h + "mlp.c_fc.bias": w(F),
            h + "mlp.c_proj.weight": w(F, D), h + "mlp.c_proj.bias": w(D),
        })
    t.update({"transformer.ln_f.weight": 1 + w(D, scale=0.1), "transformer.ln_f.bias": w(D)})
    st.save_file(t, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(c, indent=2), encoding="utf-8")
    return folder
