"""The tokenizer's files of an exported folder (scratchformer/app/export.py, whose module
doc says why each is as it is): our SentencePiece BPE as ``tokenizer.json`` for the
``tokenizers`` library (its merges, byte fallback, SentencePiece's whitespace rules),
with ``tokenizer_config.json`` and the model itself; or, for a model imported from
Marian, Marian's own files (``source.spm``, ``target.spm``, ``vocab.json``). Also the
folder's ids that depend on the zero start's extra last entry.
"""

from __future__ import annotations

import json

#: the extra last entry of a zero-start model's folder (export.py's module doc): its
#: name, and the name our padding id takes there
START_TOKEN, PADDING_NAME = "<pad>", "<padding>"


def extra_entry(cfg) -> bool:
    """Whether the folder has the extra last ``<pad>`` entry (the module doc): a
    zero-start model that does not start from its own padding token (one that does,
    an imported Marian, has OPUS-MT's layout already)."""
    return cfg.zero_start and cfg.bos_id != cfg.pad_id


def pad_token_id(cfg) -> int:
    """transformers' padding id in the folder: the zero start's extra entry, or ours."""
    return cfg.vocab_size if extra_entry(cfg) else cfg.pad_id


def bpe_merges(sp) -> list:
    """The merges of a SentencePiece BPE model for the ``tokenizers`` library: every pair
    of pieces ``(a, b)`` whose concatenation is a piece, ranked by the merged piece's
    score, as SentencePiece merges the best-scoring adjacent pair first."""
    normal = {}
    for i in range(sp.get_piece_size()):
        if not (sp.is_control(i) or sp.is_unknown(i) or sp.is_byte(i)):
            normal[sp.id_to_piece(i)] = i
    merges = []
    for piece, i in normal.items():
        for k in range(1, len(piece)):
            a, b = piece[:k], piece[k:]
            if a in normal and b in normal:
                merges.append((-sp.get_score(i), i, normal[a], normal[b], a, b))
    merges.sort()
    return [[a, b] for *_, a, b in merges]


def _names(tokenizer, cfg=None) -> list:
    """The folder's name of every id: the SentencePiece pieces, and for a zero-start model
    our padding id renamed and the extra last entry (the module doc)."""
    sp = tokenizer.sp
    names = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    if cfg is not None and extra_entry(cfg):
        names[cfg.pad_id] = PADDING_NAME
        names.append(START_TOKEN)
    return names


def tokenizer_json(tokenizer, cfg=None) -> dict:
    """``tokenizer.json``: our SentencePiece BPE for the ``tokenizers`` library, adding no
    special token to a sentence (the module doc); ``cfg``: the model, whose ``zero_start``
    adds the extra last entry."""
    sp = tokenizer.sp
    n = sp.get_piece_size()
    names = _names(tokenizer, cfg)
    specials = [i for i in range(n) if sp.is_control(i) or sp.is_unknown(i)]
    specials += list(range(n, len(names)))  # the extra entry, beyond the pieces
    meta = "\u2581"
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": i,
                "content": names[i],
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
            for i in specials
        ],
        # SentencePiece's remove_extra_whitespaces: spaces (only ' ') trimmed, runs as one
        "normalizer": {
            "type": "Sequence",
            "normalizers": [
                {"type": "Replace", "pattern": {"Regex": "^ +| +$"}, "content": ""},
                {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "},
            ],
        },
        "pre_tokenizer": {
            "type": "Metaspace",
            "replacement": meta,
            "prepend_scheme": "always",
            "split": False,
        },
        "post_processor": None,
        "decoder": {
            "type": "Sequence",
            "decoders": [
                {"type": "Replace", "pattern": {"String": meta}, "content": " "},
                {"type": "ByteFallback"},
                {"type": "Fuse"},
                {"type": "Strip", "content": " ", "start": 1, "stop": 0},
            ],
        },
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": sp.id_to_piece(sp.unk_id()),
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": True,
            "byte_fallback": True,
            "ignore_merges": False,
            "vocab": {names[i]: i for i in range(n)},
            "merges": bpe_merges(sp),
        },
    }


def tokenizer_config(cfg, tokenizer) -> dict:
    """``tokenizer_config.json``: the generic fast tokenizer over ``tokenizer.json``."""
    sp = tokenizer.sp
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": cfg.max_len,
        "pad_token": _names(tokenizer, cfg)[pad_token_id(cfg)],
        "bos_token": sp.id_to_piece(cfg.bos_id),
        "eos_token": sp.id_to_piece(cfg.eos_id),
        "unk_token": sp.id_to_piece(sp.unk_id()),
        "clean_up_tokenization_spaces": False,
    }


def marian_tokenizer_config(cfg, tokenizer) -> dict:
    """``tokenizer_config.json`` of a model with Marian's tokenizer: ``MarianTokenizer``
    over ``source.spm``, ``target.spm`` and ``vocab.json`` (the folder's own files)."""
    itos = tokenizer.vocab.itos
    return {
        "tokenizer_class": "MarianTokenizer",
        "model_max_length": cfg.max_len,
        "eos_token": itos[cfg.eos_id],
        "unk_token": itos[tokenizer.vocab.unk_id],
        "pad_token": itos[cfg.pad_id],
        "separate_vocabs": False,
        "clean_up_tokenization_spaces": False,
    }


def tokenizer_files(cfg, tokenizer) -> dict:
    """The tokenizer's files of the folder, ``{name: text or bytes}``: Marian's own
    (``source.spm``, ``target.spm``, ``vocab.json``) for a model imported with it, else
    our BPE for the ``tokenizers`` library (``tokenizer.json``) and SentencePiece."""
    if tokenizer.kind == "marian-spm":
        return {
            "source.spm": tokenizer.protos[0],
            "target.spm": tokenizer.protos[1],
            "vocab.json": _json({t: i for i, t in enumerate(tokenizer.vocab.itos)}),
            "tokenizer_config.json": _json(marian_tokenizer_config(cfg, tokenizer)),
        }
    return {
        "tokenizer.json": _json(tokenizer_json(tokenizer, cfg)),
        "tokenizer_config.json": _json(tokenizer_config(cfg, tokenizer)),
        "tokenizer.model": tokenizer.proto,
    }


def _json(value) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


__all__ = [
    "PADDING_NAME",
    "START_TOKEN",
    "bpe_merges",
    "extra_entry",
    "marian_tokenizer_config",
    "pad_token_id",
    "tokenizer_config",
    "tokenizer_files",
    "tokenizer_json",
]
