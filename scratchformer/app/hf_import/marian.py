"""Marian (``MarianMTModel``, OPUS-MT's layout) as our encoder-decoder ``Transformer``.

Marian is the paper's encoder-decoder with options (docs/import.md derives the mapping):
post-LN, sinusoids with every sine before every cosine, SiLU ("swish"), biases on every
projection and on the logits (``final_logits_bias``), ``scale_embedding``, the
source's ``</s>`` and decoding from ``<pad>``, whose embedding row is zero. The import is
the inverse of the export (scratchformer/app/export.py): the residual stream's
coordinates are put back in our interleaved order by ``pi^-1`` everywhere, and every
matrix transposed (PyTorch's ``Linear`` stores ``(out, in)``, ours ``(in, out)``):

    model.shared.weight (V, D)              embed.E = shared[:, pi^-1]
    ...self_attn.q_proj.weight (D, D)       self_attn.W_q = q_proj.weight.T[pi^-1, :]
    ...self_attn.q_proj.bias (D,)           self_attn.b_q (heads: not the stream)
    ...self_attn.out_proj (D, D), (D,)      W_o = out_proj.weight.T[:, pi^-1], b_o = bias[pi^-1]
    ...fc1 (F, D), (F,)                     ffn.W_1 = fc1.weight.T[pi^-1, :], b_1 = fc1.bias
    ...fc2 (D, F), (D,)                     ffn.W_2 = fc2.weight.T[:, pi^-1], b_2 = bias[pi^-1]
    ...*_layer_norm                         *_norm.gamma, beta (permuted)
    ...encoder_attn.*                       decoder.layers.i.cross_attn.*
    final_logits_bias (1, V)                out_bias.b
    lm_head.weight                          tied (checked equal when stored), or out_proj.W

Two tokenizer layouts come in: OPUS-MT's (``source.spm``, ``target.spm``,
``vocab.json``: ``MarianSPTokenizer``, ``</s>`` after every source, every bias on), and
the folders our own export writes (``tokenizer.model``, our SentencePiece BPE). From the
latter the options are read back as the export wrote them: a zero-start model's extra
last ``<pad>`` entry is dropped, and biases that are zero everywhere (the export writes
the zeros of a model without them) are left out, so that the round trip gives back the
very parameters.

Dimension key: ``V`` vocabulary, ``D`` d_model, ``F`` the feed-forward width.
"""

from __future__ import annotations

import json

from scratchformer.app.data.bpe import BPEError, BPETokenizer
from scratchformer.app.data.marian_spm import MarianSPTokenizer, vocab_list
from scratchformer.app.export import NEVER, permutation
from scratchformer.app.hf_import.folder import HFFolder, HFImportError
from scratchformer.engine import backend
from scratchformer.engine.models import Transformer, TransformerConfig
from scratchformer.engine.ops.positional import sinusoidal_table

ARCHITECTURE = "MarianMTModel"
#: Marian's activation_function values that are ours
ACTIVATIONS = {"swish": "silu", "silu": "silu", "relu": "relu", "gelu_new": "gelu",
               "gelu_pytorch_tanh": "gelu"}
#: the tokenizer files of OPUS-MT's layout
MARIAN_FILES = ("source.spm", "target.spm", "vocab.json")
#: Marian's LayerNorm: torch's default epsilon
LN_EPS = 1e-5


def _int(hf: dict, key: str, default=None, least: int = 1) -> int:
    value = hf.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise HFImportError(f"config.json: {key} must be a whole number >= {least}, got {value!r}")
    return value


def refusal(hf: dict) -> str | None:
    """What of Marian's options ``hf`` (config.json) uses that our model has not, in
    words, or None."""
    act = hf.get("activation_function", "gelu")
    same = [f"{a} {hf.get(a)} and {b} {hf.get(b)}"
            for a, b in (("encoder_attention_heads", "decoder_attention_heads"),
                         ("encoder_ffn_dim", "decoder_ffn_dim"))
            if hf.get(a) != hf.get(b)]
    checks = (
        (act not in ACTIVATIONS, f"the activation {act!r}: the activations here are SiLU "
         "('swish'), ReLU and GELU's tanh form ('gelu_new')"),
        (bool(same), f"{same[0] if same else ''}: one value serves both stacks here"),
        (hf.get("normalize_before", False), "LayerNorm before each sub-layer (pre-LN): "
         "Marian's is after"),
        (hf.get("normalize_embedding", False), "a LayerNorm on the embeddings "
         "(normalize_embedding = true)"),
        (not hf.get("static_position_embeddings", True), "learned positions "
         "(static_position_embeddings = false): Marian's are sinusoids"),
        (hf.get("share_encoder_decoder_embeddings", True)
         and not hf.get("tie_word_embeddings", True),
         "one embedding for source and target but an output projection of its own "
         "(tie_word_embeddings = false): the models here tie the output to the target's"),
    )
    return next((why for bad, why in checks if bad), None)


def sharing(hf: dict) -> str:
    """Our ``share_embeddings`` of config.json's two flags."""
    if hf.get("share_encoder_decoder_embeddings", True):
        return "all"
    return "decoder" if hf.get("tie_word_embeddings", True) else "none"


def hf_shapes(hf: dict, V_src: int, V: int) -> dict[str, tuple]:
    """The tensors of the Marian that ``hf`` describes (``V_src``, ``V``: the folder's
    vocabularies), by name and shape; the sinusoids and a tied ``lm_head`` are optional."""
    D, F = _int(hf, "d_model"), _int(hf, "encoder_ffn_dim")
    share = sharing(hf)
    shapes = {"final_logits_bias": (1, V)}
    if share == "all":
        shapes["model.shared.weight"] = (V, D)
    else:
        shapes["model.encoder.embed_tokens.weight"] = (V_src, D)
        shapes["model.decoder.embed_tokens.weight"] = (V, D)
    if share == "none":
        shapes["lm_head.weight"] = (V, D)

    def attention(pre):
        for p in ("q_proj", "k_proj", "v_proj", "out_proj"):
            shapes[f"{pre}.{p}.weight"], shapes[f"{pre}.{p}.bias"] = (D, D), (D,)

    def norm(pre):
        shapes[f"{pre}.weight"] = shapes[f"{pre}.bias"] = (D,)

    def ffn(pre):
        shapes.update({f"{pre}.fc1.weight": (F, D), f"{pre}.fc1.bias": (F,),
                       f"{pre}.fc2.weight": (D, F), f"{pre}.fc2.bias": (D,)})

    for i in range(_int(hf, "encoder_layers", least=0)):
        pre = f"model.encoder.layers.{i}"
        attention(f"{pre}.self_attn"), norm(f"{pre}.self_attn_layer_norm")
        ffn(pre), norm(f"{pre}.final_layer_norm")
    for i in range(_int(hf, "decoder_layers")):
        pre = f"model.decoder.layers.{i}"
        attention(f"{pre}.self_attn"), norm(f"{pre}.self_attn_layer_norm")
        attention(f"{pre}.encoder_attn"), norm(f"{pre}.encoder_attn_layer_norm")
        ffn(pre), norm(f"{pre}.final_layer_norm")
    return shapes


OPTIONAL = ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight",
            "lm_head.weight", "model.encoder.embed_tokens.weight",
            "model.decoder.embed_tokens.weight")


def _checked(t: dict, want: dict, hf: dict, path) -> dict:
    """``t`` with every tensor of ``want`` of its shape, the optional copies checked
    (tied embeddings equal, the sinusoids Marian's) and dropped."""
    missing = sorted(set(want) - set(t))
    extra = sorted(set(t) - set(want) - set(OPTIONAL))
    if missing or extra:
        what = f"missing {missing[:3]}" if missing else f"unexpected {extra[:3]}"
        raise HFImportError(
            f"{path}: its tensors are not those of the Marian its config.json describes ({what})"
        )
    for name, shape in want.items():
        if tuple(t[name].shape) != shape:
            raise HFImportError(
                f"{path}: {name} is {list(t[name].shape)}, config.json makes it {list(shape)}"
            )
    np = backend.np
    D, P = _int(hf, "d_model"), _int(hf, "max_position_embeddings")
    table = np.asarray(backend.asnumpy(sinusoidal_table(P, D, np.float64)))[:, permutation(D)]
    share = sharing(hf)
    for name in OPTIONAL:
        if name not in t or name in want:
            continue
        a = t[name]
        if "embed_positions" in name:
            ok = a.shape == table.shape and float(np.abs(a - table).max()) < 1e-4
            why = "not Marian's sinusoids (sines, then cosines)"
        else:
            tied = "model.shared.weight" if share == "all" else "model.decoder.embed_tokens.weight"
            ok = a.shape == t[tied].shape and bool((a == t[tied]).all())
            why = f"not equal to {tied}, to which config.json ties it"
        if not ok:
            raise HFImportError(f"{path}: {name} is {why}")
    return {k: t[k] for k in want}


def our_parameters(t: dict, hf: dict, share: str, drop_last: bool) -> dict:
    """Our ``Transformer``'s parameters from Marian's tensors ``t`` (see the module's
    table); ``drop_last``: the extra last vocabulary entry of our zero-start export is
    left out."""
    np = backend.np
    D = _int(hf, "d_model")
    inv = np.argsort(permutation(D))  # ours[:, k] = Marian's[:, inv[k]]
    rows = (lambda M: M[:-1]) if drop_last else (lambda M: M)
    p = {}
    if share == "all":
        p["embed.E"] = rows(t["model.shared.weight"])[:, inv]
    else:
        p["src_embed.E"] = rows(t["model.encoder.embed_tokens.weight"])[:, inv]
        p["embed.E"] = rows(t["model.decoder.embed_tokens.weight"])[:, inv]
    if share == "none":
        p["out_proj.W"] = rows(t["lm_head.weight"])[:, inv].T  # (D, V)

    def attention(theirs, ours):
        for c in "qkv":
            p[f"{ours}.W_{c}"] = t[f"{theirs}.{c}_proj.weight"].T[inv, :]  # reads the stream
            p[f"{ours}.b_{c}"] = t[f"{theirs}.{c}_proj.bias"]
        p[f"{ours}.W_o"] = t[f"{theirs}.out_proj.weight"].T[:, inv]  # writes it
        p[f"{ours}.b_o"] = t[f"{theirs}.out_proj.bias"][inv]

    def norm(theirs, ours):
        p[f"{ours}.gamma"] = t[f"{theirs}.weight"][inv]
        p[f"{ours}.beta"] = t[f"{theirs}.bias"][inv]

    def ffn(theirs, ours):
        p[f"{ours}.W_1"] = t[f"{theirs}.fc1.weight"].T[inv, :]
        p[f"{ours}.b_1"] = t[f"{theirs}.fc1.bias"]
        p[f"{ours}.W_2"] = t[f"{theirs}.fc2.weight"].T[:, inv]
        p[f"{ours}.b_2"] = t[f"{theirs}.fc2.bias"][inv]

    for i in range(_int(hf, "encoder_layers", least=0)):
        theirs, ours = f"model.encoder.layers.{i}", f"encoder.layers.{i}"
        attention(f"{theirs}.self_attn", f"{ours}.self_attn")
        norm(f"{theirs}.self_attn_layer_norm", f"{ours}.self_attn_norm")
        ffn(theirs, f"{ours}.ffn")
        norm(f"{theirs}.final_layer_norm", f"{ours}.ffn_norm")
    for i in range(_int(hf, "decoder_layers")):
        theirs, ours = f"model.decoder.layers.{i}", f"decoder.layers.{i}"
        attention(f"{theirs}.self_attn", f"{ours}.self_attn")
        norm(f"{theirs}.self_attn_layer_norm", f"{ours}.self_attn_norm")
        attention(f"{theirs}.encoder_attn", f"{ours}.cross_attn")
        norm(f"{theirs}.encoder_attn_layer_norm", f"{ours}.cross_attn_norm")
        ffn(theirs, f"{ours}.ffn")
        norm(f"{theirs}.final_layer_norm", f"{ours}.ffn_norm")
    p["out_bias.b"] = rows(t["final_logits_bias"][0])
    return {k: np.ascontiguousarray(v) for k, v in p.items()}


# -- the tokenizer ---------------------------------------------------------------------------
def tokenizer(folder: HFFolder):
    """``(tokenizer, layout)``: OPUS-MT's two SentencePiece models and ``vocab.json``
    ("marian"), else our export's ``tokenizer.model`` ("ours"); refused in one line when
    it has neither."""
    try:
        if all(folder.has(n) for n in MARIAN_FILES):
            if folder.has("target_vocab.json"):
                raise HFImportError(
                    f"{folder.path}: a vocabulary for each side (target_vocab.json): the "
                    "tokenizer here shares one vocabulary between source and target"
                )
            try:
                vocab = json.loads(folder.text("vocab.json"))
            except ValueError as e:
                raise HFImportError(f"{folder.path / 'vocab.json'} is not JSON: {e}") from None
            tok = MarianSPTokenizer(folder.data("source.spm"), folder.data("target.spm"),
                                    vocab_list(vocab))
            return tok, "marian"
        if folder.has("tokenizer.model"):
            return BPETokenizer(folder.data("tokenizer.model")), "ours"
    except BPEError as e:
        raise HFImportError(f"{folder.path}: its tokenizer: {e}") from None
    raise HFImportError(
        f"{folder.path} holds no tokenizer (source.spm, target.spm and vocab.json, as "
        "OPUS-MT's folders do): the model's text cannot be read or written without it; copy "
        "its tokenizer files there"
    )


def _ids(hf: dict, tok, layout: str, path) -> dict:
    """Our special ids and the zero start, from config.json and the tokenizer (module
    doc); ``drop_last`` for the extra entry of our zero-start export."""
    V = _int(hf, "decoder_vocab_size") if hf.get("decoder_vocab_size") else _int(hf, "vocab_size")
    pad = _int(hf, "pad_token_id", least=0)
    start = _int(hf, "decoder_start_token_id", pad, least=0)
    eos = _int(hf, "eos_token_id", least=0)
    v = tok.vocab
    if layout == "marian":
        if len(v) != V:
            raise HFImportError(f"{path}: vocab.json has {len(v)} pieces, config.json's "
                                f"vocabulary {V}")
        for name, ours, theirs in (("pad", v.pad_id, pad), ("eos", v.eos_id, eos)):
            if ours != theirs:
                raise HFImportError(f"{path}: config.json's {name}_token_id is {theirs}, the "
                                    f"vocabulary's {name} is {ours}")
        if start != pad:
            raise HFImportError(
                f"{path}: decoder_start_token_id {start} is not the pad token {pad}: Marian's "
                "decoding starts from <pad>"
            )
        return dict(V=V, pad_id=pad, bos_id=pad, eos_id=eos, zero_start=True,
                    source_end_id=eos, drop_last=False)
    n = len(v)
    extra = V == n + 1 and start == pad == n  # our zero-start export's extra <pad>
    if V != n and not extra:
        raise HFImportError(f"{path}: tokenizer.model has {n} pieces, config.json's "
                            f"vocabulary {V}")
    if extra:
        return dict(V=n, pad_id=v.pad_id, bos_id=v.bos_id, eos_id=eos, zero_start=True,
                    source_end_id=None, drop_last=True)
    return dict(V=n, pad_id=pad, bos_id=start, eos_id=eos, zero_start=False,
                source_end_id=None, drop_last=False)


def model_config(hf: dict, ids: dict, V_src: int, biases: bool, out_bias: bool):
    D, H = _int(hf, "d_model"), _int(hf, "encoder_attention_heads")
    if D % H:
        raise HFImportError(f"config.json: d_model {D} is not divisible by the {H} heads")
    drops = {k: hf.get(k, 0.0) for k in ("dropout", "attention_dropout", "activation_dropout")}
    for key, value in drops.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < 1:
            raise HFImportError(f"config.json: {key} must be a number in [0, 1), got {value!r}")
    share = sharing(hf)
    try:
        return TransformerConfig(
            vocab_size=ids["V"], N=_int(hf, "encoder_layers", least=0),
            N_dec=_int(hf, "decoder_layers"), d_model=D, d_ff=_int(hf, "encoder_ffn_dim"),
            h=H, P_drop=float(drops["dropout"]), P_drop_attn=float(drops["attention_dropout"]),
            P_drop_ffn=float(drops["activation_dropout"]), eps_ls=0.1,
            positions="sinusoidal", max_len=_int(hf, "max_position_embeddings"), norm="post",
            share_embeddings=share, activation=ACTIVATIONS[hf.get("activation_function", "gelu")],
            ln_eps=LN_EPS, pad_id=ids["pad_id"], bos_id=ids["bos_id"], eos_id=ids["eos_id"],
            src_vocab_size=None if share == "all" else V_src,
            attention_bias=biases, scale_embedding=bool(hf.get("scale_embedding", False)),
            zero_start=ids["zero_start"], output_bias=out_bias,
            source_end_id=ids["source_end_id"],
        )
    except ValueError as e:
        message = str(e).removeprefix("invalid TransformerConfig: ")
        raise HFImportError(f"config.json: {message}") from None


def read(folder: HFFolder):
    """``(model, tokenizer, meta)`` of a Marian folder: our Transformer with Marian's
    weights, its tokenizer, and what the checkpoint records of where it came from."""
    hf = folder.config
    why = refusal(hf)
    if why:
        raise HFImportError(f"cannot import {folder.path}: this Marian has {why}")
    files = folder.weight_files()  # refused first when it holds only a pickle
    tok, layout = tokenizer(folder)
    ids = _ids(hf, tok, layout, folder.path)
    V_file = ids["V"] + int(ids["drop_last"])
    V_src = _int(hf, "vocab_size") if sharing(hf) != "all" else V_file  # the folder's
    tensors = _checked(folder.tensors(), hf_shapes(hf, V_src, V_file), hf, files[0])
    V_src -= int(ids["drop_last"])  # ours
    share = sharing(hf)
    params = our_parameters(tensors, hf, share, ids["drop_last"])
    np = backend.np
    bias = tensors["final_logits_bias"][0]
    if ids["drop_last"] and bias[-1] != np.float32(NEVER):
        raise HFImportError(f"{files[0]}: the last entry <pad> of final_logits_bias is not "
                            f"{NEVER:g}, as the export writes it")
    if layout == "marian":
        biases = out_bias = True
        tied = "shared" if share == "all" else "decoder.embed_tokens"
        E = tensors[f"model.{tied}.weight"]
        if (E[ids["pad_id"]] != 0).any():
            raise HFImportError(
                f"{files[0]}: the embedding row of <pad>, the decoder's start, is not zero: the "
                "model here starts from the zero vector, as OPUS-MT's do"
            )
    else:  # our export: the zeros of a model without biases left out (module doc)
        biases = any((a != 0).any() for k, a in params.items() if ".b_" in k and "attn" in k)
        out_bias = bool((params["out_bias.b"] != 0).any())
    cfg = model_config(hf, ids, V_src, biases, out_bias)
    model = Transformer(cfg)
    have = set(model.parameters())
    dtype = backend.get_dtype()
    model.load_state_dict(
        {k: np.asarray(v, dtype=dtype) for k, v in params.items() if k in have}
    )
    meta = {
        "tokenizer": tok.to_dict(),
        "imported_from": {
            "folder": str(folder.path), "architecture": ARCHITECTURE, "model_type": "marian",
            "transformers_version": str(hf.get("transformers_version", "")),
        },
    }
    return model, tok, meta


__all__ = ["ARCHITECTURE", "hf_shapes", "model_config", "our_parameters", "read", "refusal"]
