"""GPT-2 (``GPT2LMHeadModel``) as our decoder-only ``LanguageModel``.

GPT-2 is the language model of this package with its options (docs/import.md derives
the mapping): pre-LN, learned positions, GELU in its tanh form, biases on the attention
projections, a final LayerNorm, the output tied to the token embedding, no sqrt(d_model)
on the embeddings, ``<|endoftext|>`` as <bos> and <eos> and padding that is no token.

    wte (V, D)                        embed.E
    wpe (P, D)                        decoder.pos.P
    h.i.ln_1 / ln_2                   decoder.layers.i.self_attn_norm / ffn_norm
    h.i.attn.c_attn.weight (D, 3D)    W_q | W_k | W_v, side by side (Conv1D: x W + b)
    h.i.attn.c_attn.bias (3D,)        b_q | b_k | b_v
    h.i.attn.c_proj (D, D), (D,)      W_o, b_o
    h.i.mlp.c_fc (D, F), c_proj (F, D)  ffn.W_1, b_1, ffn.W_2, b_2
    ln_f                              decoder.norm
    lm_head.weight                    tied to wte: not stored (checked equal if present)

Conv1D stores its weight (in, out) and computes ``x W + b``, as our linear op does: the
weights go in as they are (an ``nn.Linear`` would need a transpose).

Dimension key: ``V`` vocabulary, ``P`` positions, ``D`` n_embd, ``F`` n_inner.
"""

from __future__ import annotations

import json

from scratchformer.app.data.gpt2_bpe import ENDOFTEXT, ByteLevelBPETokenizer, GPT2TokenizerError
from scratchformer.app.hf_import.folder import HFFolder, HFImportError
from scratchformer.engine import backend
from scratchformer.engine.models import LanguageModel, TransformerConfig

ARCHITECTURE = "GPT2LMHeadModel"
#: GPT-2's activation_function values that are our GELU (the tanh form) or ReLU
ACTIVATIONS = {"gelu_new": "gelu", "gelu_pytorch_tanh": "gelu", "relu": "relu"}
#: buffers of older checkpoints (the causal mask), not parameters: skipped
BUFFERS = (".attn.bias", ".attn.masked_bias")


def _int(hf: dict, key: str, default=None) -> int:
    value = hf.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise HFImportError(f"config.json: {key} must be a whole number >= 1, got {value!r}")
    return value


def refusal(hf: dict) -> str | None:
    """What of GPT-2's options ``hf`` (config.json) uses that our model has not, in words,
    or None."""
    act = hf.get("activation_function", "gelu_new")
    checks = (
        (hf.get("add_cross_attention", False), "cross-attention in every block "
         "(add_cross_attention = true): the language model here has none"),
        (not hf.get("scale_attn_weights", True), "attention logits without the 1/sqrt(d_k) "
         "scale (scale_attn_weights = false)"),
        (hf.get("scale_attn_by_inverse_layer_idx", False), "attention logits scaled by "
         "1/(layer + 1) (scale_attn_by_inverse_layer_idx = true)"),
        (act not in ACTIVATIONS, f"the activation {act!r}: the GELU here is the tanh form "
         "('gelu_new'); ReLU is 'relu'"),
        (not hf.get("tie_word_embeddings", True), "an output projection of its own "
         "(tie_word_embeddings = false): the language model here ties it to the embedding"),
        (hf.get("embd_pdrop", 0.1) != hf.get("resid_pdrop", 0.1), "embedding dropout "
         f"{hf.get('embd_pdrop')} and residual dropout {hf.get('resid_pdrop')}: one rate "
         "(P_drop) serves both here"),
    )
    return next((why for bad, why in checks if bad), None)


def model_config(hf: dict, vocab_size: int, eot: int) -> TransformerConfig:
    """Our config of the GPT-2 that ``hf`` (config.json) describes, ``<|endoftext|>``'s id
    ``eot`` its <bos> and <eos>, padding the id ``vocab_size`` (no token)."""
    D, H = _int(hf, "n_embd", 768), _int(hf, "n_head", 12)
    if D % H:
        raise HFImportError(f"config.json: n_embd {D} is not divisible by n_head {H}")
    F = _int(hf, "n_inner") if hf.get("n_inner") is not None else 4 * D
    eps = hf.get("layer_norm_epsilon", 1e-5)
    drops = {k: hf.get(k, 0.1) for k in ("resid_pdrop", "attn_pdrop")}
    for key, value in [("layer_norm_epsilon", eps), *drops.items()]:
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
            raise HFImportError(f"config.json: {key} must be a number >= 0, got {value!r}")
    try:
        return TransformerConfig(
            vocab_size=vocab_size, N=_int(hf, "n_layer", 12), d_model=D, d_ff=F,
            h=H, P_drop=float(drops["resid_pdrop"]), P_drop_attn=float(drops["attn_pdrop"]),
            P_drop_ffn=0.0, eps_ls=0.0, positions="learned",
            max_len=_int(hf, "n_positions", 1024), norm="pre", share_embeddings="all",
            activation=ACTIVATIONS[hf.get("activation_function", "gelu_new")],
            ln_eps=float(eps), pad_id=vocab_size, bos_id=eot, eos_id=eot,
            attention_bias=True, scale_embedding=False,
        )
    except ValueError as e:
        message = str(e).removeprefix("invalid TransformerConfig: ")
        raise HFImportError(f"config.json: {message}") from None


def hf_shapes(cfg: TransformerConfig) -> dict[str, tuple]:
    """GPT-2's parameter names (without the ``transformer.`` prefix) and shapes."""
    V, D, F = cfg.vocab_size, cfg.d_model, cfg.d_ff
    shapes = {"wte.weight": (V, D), "wpe.weight": (cfg.max_len, D)}
    for i in range(cfg.N):
        for name, shape in (
            ("ln_1.weight", (D,)), ("ln_1.bias", (D,)),
            ("attn.c_attn.weight", (D, 3 * D)), ("attn.c_attn.bias", (3 * D,)),
            ("attn.c_proj.weight", (D, D)), ("attn.c_proj.bias", (D,)),
            ("ln_2.weight", (D,)), ("ln_2.bias", (D,)),
            ("mlp.c_fc.weight", (D, F)), ("mlp.c_fc.bias", (F,)),
            ("mlp.c_proj.weight", (F, D)), ("mlp.c_proj.bias", (D,)),
        ):
            shapes[f"h.{i}.{name}"] = shape
    shapes.update({"ln_f.weight": (D,), "ln_f.bias": (D,)})
    return shapes


def _strip(tensors: dict, path) -> dict:
    """GPT-2's tensors by their names without ``transformer.``, the causal-mask buffers
    of older files dropped; a stored ``lm_head.weight`` must be the embedding (tied)."""
    out = {}
    for name, a in tensors.items():
        short = name.removeprefix("transformer.")
        if short.endswith(BUFFERS):
            continue
        out[short] = a
    head = out.pop("lm_head.weight", None)
    wte = out.get("wte.weight")
    if head is not None and (wte is None or head.shape != wte.shape or (head != wte).any()):
        raise HFImportError(
            f"{path}: lm_head.weight differs from wte.weight: an output projection that is "
            "not tied to the embedding has no counterpart in the language model here"
        )
    return out


def our_parameters(tensors: dict, cfg: TransformerConfig, path) -> dict:
    """Our ``LanguageModel``'s parameters from GPT-2's tensors (see the module's table):
    every name and shape checked, c_attn split into the three projections."""
    t = _strip(tensors, path)
    want = hf_shapes(cfg)
    missing, extra = sorted(set(want) - set(t)), sorted(set(t) - set(want))
    if missing or extra:
        what = f"missing {missing[:3]}" if missing else f"unexpected {extra[:3]}"
        raise HFImportError(
            f"{path}: its tensors are not those of the GPT-2 its config.json describes ({what})"
        )
    for name, shape in want.items():
        if tuple(t[name].shape) != shape:
            raise HFImportError(
                f"{path}: {name} is {list(t[name].shape)}, config.json makes it {list(shape)}"
            )
    D = cfg.d_model
    p = {"embed.E": t["wte.weight"], "decoder.pos.P": t["wpe.weight"]}
    for i in range(cfg.N):
        h, o = f"h.{i}.", f"decoder.layers.{i}."
        W, b = t[h + "attn.c_attn.weight"], t[h + "attn.c_attn.bias"]  # (D, 3D), (3D,)
        for j, c in enumerate("qkv"):
            p[o + f"self_attn.W_{c}"] = W[:, j * D : (j + 1) * D]  # (D, D): x W_c + b_c
            p[o + f"self_attn.b_{c}"] = b[j * D : (j + 1) * D]
        pairs = (
            ("attn.c_proj.weight", "self_attn.W_o"), ("attn.c_proj.bias", "self_attn.b_o"),
            ("ln_1.weight", "self_attn_norm.gamma"), ("ln_1.bias", "self_attn_norm.beta"),
            ("mlp.c_fc.weight", "ffn.W_1"), ("mlp.c_fc.bias", "ffn.b_1"),
            ("mlp.c_proj.weight", "ffn.W_2"), ("mlp.c_proj.bias", "ffn.b_2"),
            ("ln_2.weight", "ffn_norm.gamma"), ("ln_2.bias", "ffn_norm.beta"),
        )
        p.update({o + ours: t[h + theirs] for theirs, ours in pairs})
    p["decoder.norm.gamma"], p["decoder.norm.beta"] = t["ln_f.weight"], t["ln_f.bias"]
    return p


# -- the tokenizer ---------------------------------------------------------------------------
def _from_tokenizer_json(text: str, path) -> ByteLevelBPETokenizer:
    """GPT-2's tokenizer from a ``tokenizer.json``: a byte-level BPE (checked), its vocab
    and merges."""
    try:
        d = json.loads(text)
        model, pre, dec = d["model"], d.get("pre_tokenizer") or {}, d.get("decoder") or {}
    except (ValueError, KeyError, TypeError) as e:
        raise HFImportError(f"{path} is not a tokenizer.json: {e}") from None
    found = (
        (model.get("type") == "BPE", f"a {model.get('type')} model"),
        (d.get("normalizer") is None, "a normalizer"),
        (pre.get("type") == "ByteLevel" and not pre.get("add_prefix_space"),
         "another pre-tokenizer than ByteLevel without a prefix space"),
        (dec.get("type") == "ByteLevel", "another decoder than ByteLevel"),
        (all(a.get("content") == ENDOFTEXT for a in d.get("added_tokens") or []),
         f"added tokens besides {ENDOFTEXT}"),
    )
    bad = next((why for ok, why in found if not ok), None)
    if bad:
        raise HFImportError(f"{path} is not GPT-2's byte-level BPE: it has {bad}")
    merges = [m.split(" ") if isinstance(m, str) else m for m in model.get("merges") or []]
    return ByteLevelBPETokenizer(model.get("vocab") or {}, merges)


def tokenizer(folder: HFFolder) -> ByteLevelBPETokenizer:
    """The folder's byte-level BPE: ``vocab.json`` + ``merges.txt``, else
    ``tokenizer.json``; refused in one line when it has neither or another tokenizer."""
    settings = {}
    if folder.has("tokenizer_config.json"):
        try:
            settings = json.loads(folder.text("tokenizer_config.json"))
        except ValueError:
            settings = {}
    if isinstance(settings, dict) and settings.get("add_prefix_space"):
        raise HFImportError(
            f"{folder.path}: its tokenizer adds a space before the text (add_prefix_space): "
            "GPT-2's does not, and neither does the tokenizer here"
        )
    try:
        if folder.has("vocab.json") and folder.has("merges.txt"):
            return ByteLevelBPETokenizer.from_files(
                folder.text("vocab.json"), folder.text("merges.txt")
            )
        if folder.has("tokenizer.json"):
            path = folder.path / "tokenizer.json"
            return _from_tokenizer_json(folder.text("tokenizer.json"), path)
    except GPT2TokenizerError as e:
        raise HFImportError(f"{folder.path}: its tokenizer: {e}") from None
    raise HFImportError(
        f"{folder.path} holds no tokenizer (vocab.json and merges.txt, or tokenizer.json): the "
        "model's text cannot be read or written without it; copy its tokenizer files there"
    )


def read(folder: HFFolder):
    """``(model, tokenizer, meta)`` of a GPT-2 folder: our LanguageModel with GPT-2's
    weights, its tokenizer, and what the checkpoint records of where it came from."""
    hf = folder.config
    why = refusal(hf)
    if why:
        raise HFImportError(f"cannot import {folder.path}: this GPT-2 has {why}")
    files = folder.weight_files()  # refused first when it holds only a pickle
    tok = tokenizer(folder)
    V, eot = _int(hf, "vocab_size", 50257), tok.vocab.eos_id
    if len(tok.vocab) != V:
        raise HFImportError(
            f"{folder.path}: the tokenizer has {len(tok.vocab)} ids, config.json's vocab_size "
            f"is {V}"
        )
    for key in ("bos_token_id", "eos_token_id"):
        if hf.get(key) is not None and hf[key] != eot:
            raise HFImportError(
                f"{folder.path}: config.json's {key} is {hf[key]}, but {ENDOFTEXT} is id {eot}"
                " in the tokenizer"
            )
    cfg = model_config(hf, V, eot)
    params = our_parameters(folder.tensors(), cfg, files[0])
    model = LanguageModel(cfg)
    dtype = backend.get_dtype()
    model.load_state_dict({k: backend.np.asarray(v, dtype=dtype) for k, v in params.items()})
    meta = {
        "tokenizer": tok.to_dict(),
        "imported_from": {
            "folder": str(folder.path), "architecture": ARCHITECTURE, "model_type": "gpt2",
            "transformers_version": str(hf.get("transformers_version", "")),
        },
    }
    return model, tok, meta


__all__ = ["ARCHITECTURE", "hf_shapes", "model_config", "our_parameters", "read", "refusal"]
