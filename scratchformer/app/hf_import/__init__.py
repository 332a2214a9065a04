"""Import a Hugging Face model folder as one of our checkpoints.

    from scratchformer.app.hf_import import import_folder, read_folder
    import_folder("gpt2-folder", "gpt2.npz")           # the checkpoint, tokenizer inside
    model, tokenizer, meta = read_folder("gpt2-folder")   # the same, in memory

A folder is read by the importer of its architecture (``IMPORTERS``, by config.json's
``model_type``): each maps the architecture's config, tensors and tokenizer onto one of
our models, whose options say what the architecture does, and refuses in one line what
it cannot map. An architecture without an importer is refused naming what it has that
the models here lack (``MISSING``), where that is known.

An importer is a module with ``read(folder: HFFolder) -> (model, tokenizer, meta)``
(``hf_import/gpt2.py``); the folder's reading (config.json, safetensors through the
NumPy API, the tokenizer's files, the refusals of pickles) is shared (``folder.py``).
A translation model (Marian, ``hf_import/marian.py``) imports the same way: its module
beside gpt2.py and one line in ``IMPORTERS``. Nothing is downloaded. The mapping: docs/import.md.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from scratchformer.app.checkpoint import save_checkpoint
from scratchformer.app.hf_import.folder import HFFolder, HFImportError

#: model_type (config.json) -> (the importer's module, the architecture it reads)
IMPORTERS = {
    "gpt2": ("scratchformer.app.hf_import.gpt2", "GPT2LMHeadModel"),
    "marian": ("scratchformer.app.hf_import.marian", "MarianMTModel"),
}

_ROPE = "rotary positions (RoPE)"
_LLAMA = f"{_ROPE}, RMSNorm, a gated (SwiGLU) feed-forward and grouped-query attention"
#: model_type -> what it has that the models here lack
MISSING = {
    "bert": "token-type embeddings, a LayerNorm on the embeddings and a masked-LM head "
            "(an encoder for filling in masked words)",
    "roberta": "a LayerNorm on the embeddings, positions offset by the padding id and a "
               "masked-LM head",
    "distilbert": "a LayerNorm on the embeddings and a masked-LM head",
    "llama": _LLAMA, "mistral": _LLAMA, "qwen2": _LLAMA, "gemma": _LLAMA,
    "gptj": f"{_ROPE} and attention and feed-forward side by side (a parallel block)",
    "gpt_neox": f"{_ROPE} and a parallel block",
    "bloom": "ALiBi positions (linear biases on the attention logits) and a LayerNorm on "
             "the embeddings",
    "mpt": "ALiBi positions", "falcon": f"{_ROPE} (or ALiBi) and a parallel block",
    "t5": "bucketed relative position biases and RMSNorm without a bias",
}
#: config.json keys that mean positions the models here lack
POSITION_KEYS = {
    "rope_theta": _ROPE, "rope_scaling": _ROPE, "rotary_dim": _ROPE, "rotary_pct": _ROPE,
    "rotary_emb_base": _ROPE, "alibi": "ALiBi positions", "use_alibi": "ALiBi positions",
}


def _what(config: dict) -> str:
    arch = config.get("architectures")
    name = arch[0] if isinstance(arch, list) and arch and isinstance(arch[0], str) else None
    return f"{name} (model_type {config.get('model_type')!r})" if name else (
        f"model_type {config.get('model_type')!r}"
    )


def refusal(config: dict) -> str | None:
    """Why config.json describes a model this package cannot import, in one sentence, or
    None: an architecture without an importer (what it has that ours lack, where known),
    or positions we do not have (rotary, ALiBi)."""
    supported = ", ".join(arch for _, arch in IMPORTERS.values())
    kind = config.get("model_type")
    if kind not in IMPORTERS:
        missing = MISSING.get(kind) if isinstance(kind, str) else None
        lacks = f": it has {missing}, which the models here lack" if missing else ""
        return f"a {_what(config)}{lacks}; scratchformer imports {supported}"
    pos = config.get("position_embedding_type", "absolute")
    if pos != "absolute":
        return f"a {_what(config)} with {pos} positions: the models here have learned or sinusoidal"
    found = [key for key in POSITION_KEYS if config.get(key) not in (None, False)]
    if found:
        return (
            f"a {_what(config)} with {POSITION_KEYS[found[0]]}, by its config.json's "
            f"{found[0]}: the models here have learned or sinusoidal positions"
        )
    return None


def read_folder(folder):
    """``(model, tokenizer, meta)`` of the Hugging Face folder ``folder``: the model of
    our classes with its weights, its tokenizer, and ``meta`` for the checkpoint (the
    tokenizer's entry and where it came from). HFImportError in one line when it cannot."""
    f = HFFolder(folder)
    why = refusal(f.config)
    if why:
        raise HFImportError(f"cannot import {f.path}: {why}")
    module = importlib.import_module(IMPORTERS[f.config["model_type"]][0])
    return module.read(f)


def import_folder(folder, out, role: str | None = None) -> Path:
    """Write the model of ``folder`` to the checkpoint ``out`` (step 0, no optimizer
    state), its tokenizer inside; returns the path. ``role``: the writer's name for the
    output (a command's, so that it may replace its own earlier output)."""
    model, _, meta = read_folder(folder)
    return save_checkpoint(out, model, step=0, meta=meta, role=role)


__all__ = [
    "IMPORTERS",
    "MISSING",
    "HFFolder",
    "HFImportError",
    "import_folder",
    "read_folder",
    "refusal",
]
