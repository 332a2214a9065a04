"""A trained translation model as a Hugging Face ``transformers`` model folder (Marian).

    scratchformer export runs/bible-cpu/checkpoints/final.npz -o bible-es-en

writes ``config.json``, ``generation_config.json``, ``model.safetensors`` (float32),
``tokenizer.json``, ``tokenizer_config.json`` and the SentencePiece model
``tokenizer.model``: ``MarianMTModel.from_pretrained(folder)`` and
``AutoTokenizer.from_pretrained(folder)`` load it, and ``pipeline("translation",
model=folder)`` translates with it. Writing needs only ``safetensors``' NumPy API
(``pip install -e '.[export]'``); nothing here imports ``torch`` or ``transformers``.

**Why the mapping is exact.** Marian's layers are the paper's post-LN layers: token
embeddings times ``sqrt(D)`` plus sinusoids, ``LN(x + Sublayer(x))`` after every
sub-layer, ReLU feed-forward, one embedding matrix for source, target and output (here
``share_embeddings="all"``), LayerNorm epsilon 1e-5. Its sinusoids differ in the order
of the model dimension: ours interleave, ``PE[pos, 2i] = sin``, ``PE[pos, 2i+1] = cos``;
Marian's put every sine first, then every cosine, at the same frequencies. Let
``pi = (0, 2, 4, ..., 1, 3, 5, ...)``, so that ``PE_marian = PE_ours[:, pi]``. Permuting
the residual stream's coordinates by ``pi`` everywhere is an exact symmetry of the
network: LayerNorm's mean and variance are sums over all coordinates (the same in any
order), and every matrix that reads or writes the residual stream gets its rows or
columns permuted with it, so each layer computes the same numbers in permuted order:

    E'  = E[:, pi]                  embeddings and output projection   (V, D)
    W'  = W[pi, :]                  W_q, W_k, W_v, W_1: read the stream (D, *)
    W'  = W[:, pi]                  W_o, W_2: write the stream           (*, D)
    b'  = b[pi], gamma' = gamma[pi], beta' = beta[pi]
    W_1's columns, W_2's rows, the heads and b_1: untouched (not the stream)

The only differences are float32 rounding (sums taken in another order). PyTorch's
``Linear`` stores ``(out, in)``, ours ``(in, out)``: every matrix is also transposed.
Marian's attention projections have biases: a model with ``attention_bias`` writes its
own (``b_o`` permuted with the stream, ``b_q b_k b_v`` as they are: the heads), one
without writes zeros; ``final_logits_bias`` is the ``output_bias`` (else zeros). SiLU is
``swish``; unscaled embeddings are ``scale_embedding = false``.

**The special tokens.** Our sources carry no <bos> or <eos>, and decoding starts from
<bos> (id 1); Marian's tokenizer appends ``</s>`` to every source and its decoding starts
from the pad token. So the folder does not use ``MarianTokenizer``: its tokenizer is a
plain ``tokenizer.json`` that adds nothing to a sentence, and ``decoder_start_token_id``
is our <bos>. ``generation_config.json`` also carries our decoding rules: <pad> and <bos>
are never produced (``suppress_tokens``), <eos> not before the first token
(``min_new_tokens``, our ``min_len=1``), and <eos> forced once the position table is
used up (``forced_eos_token_id``, ``max_length``). Greedy is the default
(``num_beams=1``): beam search in ``transformers`` ranks by ``log P / |Y|^alpha``, ours
by the GNMT penalty ``((5 + |Y|) / 6)^alpha``, which no ``generate`` option expresses.

**A model imported from Marian** (its tokenizer Marian's two SentencePiece models, its
decoder started from ``<pad>``) is written back in OPUS-MT's layout: ``source.spm``,
``target.spm``, ``vocab.json`` and a ``tokenizer_config.json`` naming
``MarianTokenizer`` (which appends the source's ``</s>``, our ``source_end_id``) in
place of ``tokenizer.json`` and ``tokenizer.model``; ``decoder_start_token_id`` and
``pad_token_id`` its ``<pad>``, no extra entry (``MARIAN_FILES``).

**The tokenizer.** ``tokenizer.json`` is our SentencePiece BPE written for the
``tokenizers`` library: the same pieces and ids, its merges (every pair of pieces whose
concatenation is a piece, ranked as SentencePiece ranks the merged piece), byte
fallback, SentencePiece's whitespace rules (no leading or trailing spaces, runs of
spaces as one, a ``▁`` before the first word) and its decoder.

**The zero start and CTranslate2.** A model trained with ``zero_start`` starts its
decoder from the zero vector, as Marian's do. Its folder is written in the layout of
OPUS-MT's, which CTranslate2's own converter assumes: one more vocabulary entry, the
last, named ``<pad>``, with a zero embedding row (``decoder_start_token_id`` and
``pad_token_id``: Marian's start is that zero row) and ``final_logits_bias`` -1e9, so that
its probability ``exp(-1e9 - max)`` is exactly 0 in float32 and it changes no score;
our padding id keeps its place under the name ``<padding>`` (never produced, like
``<bos>``). The converter drops that last row and entry and starts from a zero vector:
the same computation. A model that starts from ``<bos>`` is written without the extra
entry (that converter would start it from the wrong vector); CTranslate2 reads it
through a loader of five lines (docs/export.md).

Refused in one line, with the reason: models other than the encoder-decoder
Transformer (the language model, the classifier), pre-LN, learned positions, relative
or local attention, head widths other than ``d_model / h``, a LayerNorm epsilon other
than 1e-5, tokenizers other than the SentencePiece BPE and Marian's, an id appended to
every source that the tokenizer written would not append.
"""

from __future__ import annotations

from pathlib import Path

from scratchformer.app import writer
from scratchformer.app.checkpoint import load_with_tokenizer
from scratchformer.app.export_tokenizer import (
    PADDING_NAME,
    START_TOKEN,
    _json,
    bpe_merges,
    extra_entry,
    marian_tokenizer_config,
    pad_token_id,
    tokenizer_config,
    tokenizer_files,
    tokenizer_json,
)
from scratchformer.engine import backend
from scratchformer.engine.errors import ScratchformerError
from scratchformer.engine.models.transformer import Transformer

#: the files of an exported folder, in the order they are written
FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
)
#: ``transformers``' names of our activations (ours: ReLU, GELU's tanh form, SiLU)
ACTIVATIONS = {"relu": "relu", "gelu": "gelu_new", "silu": "swish"}
#: the tokenizer files of a model with Marian's own tokenizer (OPUS-MT's layout), in the
#: order they are written, instead of ``tokenizer.json`` and ``tokenizer.model``
MARIAN_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "source.spm",
    "target.spm",
    "vocab.json",
    "tokenizer_config.json",
)
#: the bias of a zero-start model's extra last entry (see the module doc): its
#: probability exactly 0 in float32
NEVER = -1e9
#: Marian's LayerNorm: torch.nn.LayerNorm's default epsilon, fixed
MARIAN_LN_EPS = 1e-5


class ExportError(ScratchformerError):
    """The checkpoint cannot be written as a ``transformers`` model, or safetensors is
    missing."""


def _safetensors_save():
    try:
        from safetensors.numpy import save  # noqa: PLC0415  (optional: the export extra)
    except ImportError:
        raise ExportError(
            "export writes safetensors: pip install -e '.[export]' (or pip install safetensors)"
        ) from None
    return save


def refusal(model, tokenizer) -> str | None:
    """Why ``model`` (with ``tokenizer``) cannot be exported exactly, or None."""
    if not isinstance(model, Transformer):
        kind = type(model).__name__
        return (
            f"this checkpoint holds {'an' if kind[0] in 'AEIOU' else 'a'} {kind}: export writes "
            "translation models (the encoder-decoder Transformer) as Marian, which has no "
            "counterpart for it"
        )
    cfg = model.config
    if cfg.norm != "post":
        return "a pre-LN model: Marian's layers are post-LN (LayerNorm after each residual sum)"
    if cfg.positions != "sinusoidal":
        return f"{cfg.positions} positions: Marian's positions are the paper's sinusoids"
    for where, variant in (
        ("attention", cfg.attention),
        ("encoder_attention", cfg.encoder_attention),
    ):
        if variant not in (None, "dense"):
            return (
                f"{variant} attention ({where}): Marian's attention is the paper's dense attention"
            )
    head = cfg.d_model // cfg.h
    if cfg.d_model % cfg.h or (cfg.d_k or head) != head or (cfg.d_v or head) != head:
        return (
            f"heads of width d_k={cfg.d_k or head}, d_v={cfg.d_v or head} with d_model "
            f"{cfg.d_model} and h {cfg.h}: Marian's heads are d_model / h wide"
        )
    if cfg.ln_eps != MARIAN_LN_EPS:
        return f"LayerNorm epsilon {cfg.ln_eps:g}: Marian's is fixed at {MARIAN_LN_EPS:g}"
    if cfg.activation not in ACTIVATIONS:
        return f"the {cfg.activation} activation has no transformers name"
    kind = getattr(tokenizer, "kind", None)
    if kind not in ("spm-bpe", "marian-spm"):
        return (
            f"a {kind or type(tokenizer).__name__} tokenizer: export writes SentencePiece BPE "
            "tokenizers (the translation task's) and Marian's"
        )
    if kind == "spm-bpe" and cfg.source_end_id is not None:
        return (
            "an id appended to every source (source_end_id) with our BPE tokenizer: the "
            "tokenizer.json written adds nothing to a sentence"
        )
    if kind == "marian-spm" and cfg.source_end_id != cfg.eos_id:
        return (
            f"source_end_id {cfg.source_end_id} with Marian's tokenizer, which appends </s> "
            f"(id {cfg.eos_id}) to every source"
        )
    return None


def permutation(d_model: int):
    """``pi`` (D,): Marian's coordinate ``k`` is our coordinate ``pi[k]`` (sines, then
    cosines: ``PE_marian = PE_ours[:, pi]``)."""
    np = backend.np
    return np.concatenate([np.arange(0, d_model, 2), np.arange(1, d_model, 2)])


def _attention(p: dict, pre: str, out: str, pi, tensors: dict) -> None:
    """One attention's projections; its biases, or zeros for a model without them."""
    np = backend.np

    def bias(name, n):
        b = p.get(f"{pre}.{name}")
        return np.zeros(n, np.float32) if b is None else b

    for c, theirs in (("q", "q_proj"), ("k", "k_proj"), ("v", "v_proj")):
        W = p[f"{pre}.W_{c}"]  # (D, H*Dh): reads the stream
        tensors[f"{out}.{theirs}.weight"] = W[pi, :].T
        tensors[f"{out}.{theirs}.bias"] = bias(f"b_{c}", W.shape[1])  # heads: not the stream
    W_o = p[f"{pre}.W_o"]  # (H*Dv, D): writes the stream
    tensors[f"{out}.out_proj.weight"] = W_o[:, pi].T
    tensors[f"{out}.out_proj.bias"] = bias("b_o", W_o.shape[1])[pi]


def _norm(p: dict, pre: str, out: str, pi, tensors: dict) -> None:
    tensors[f"{out}.weight"] = p[f"{pre}.gamma"][pi]
    tensors[f"{out}.bias"] = p[f"{pre}.beta"][pi]


def _ffn(p: dict, pre: str, out: str, pi, tensors: dict) -> None:
    tensors[f"{out}.fc1.weight"] = p[f"{pre}.W_1"][pi, :].T  # (D, F) reads the stream
    tensors[f"{out}.fc1.bias"] = p[f"{pre}.b_1"]
    tensors[f"{out}.fc2.weight"] = p[f"{pre}.W_2"][:, pi].T  # (F, D) writes it
    tensors[f"{out}.fc2.bias"] = p[f"{pre}.b_2"][pi]


def _rows(cfg):
    """What a vocabulary matrix (V, D) becomes in the folder: itself, or for a zero-start
    model with the extra last row, zero (the module doc)."""
    np = backend.np
    if not extra_entry(cfg):
        return lambda M: M
    return lambda M: np.concatenate([M, np.zeros((1, M.shape[1]), M.dtype)])


def marian_tensors(model) -> dict:
    """``{transformers name: float32 host array}`` for ``MarianMTModel`` (see the module
    doc for the mapping); every array contiguous, as safetensors stores them."""
    np = backend.np
    cfg = model.config
    p = {k: np.asarray(backend.asnumpy(v), dtype=np.float32) for k, v in model.parameters().items()}
    pi = permutation(cfg.d_model)
    t: dict = {}
    rows = _rows(cfg)
    if cfg.bos_id == cfg.pad_id:  # Marian's start: the padding's row is the zero vector
        for name in ("embed.E", "src_embed.E"):  # (V, D): read at the start, or masked
            if name in p:
                p[name] = p[name].copy()  # the model's own arrays stay as they are
                p[name][cfg.pad_id] = 0.0
        if "out_proj.W" in p:  # (D, V): the padding's logit is its bias alone
            p["out_proj.W"] = p["out_proj.W"].copy()
            p["out_proj.W"][:, cfg.pad_id] = 0.0
    E = rows(p["embed.E"][:, pi])  # (V, D): target embeddings, and the output when tied
    if cfg.share_embeddings == "all":
        t["model.shared.weight"] = E
    else:
        t["model.encoder.embed_tokens.weight"] = rows(p["src_embed.E"][:, pi])
    t["model.decoder.embed_tokens.weight"] = E
    # lm_head: E itself when tied (written too: a reader that does not tie still gets it)
    t["lm_head.weight"] = E if cfg.share_embeddings != "none" else rows(p["out_proj.W"][pi, :].T)
    bias = np.zeros((1, E.shape[0]), np.float32)
    if cfg.output_bias:
        bias[0, : cfg.vocab_size] = p["out_bias.b"]
    if extra_entry(cfg):
        bias[0, -1] = NEVER
    t["final_logits_bias"] = bias
    for i in range(cfg.N):
        ours, theirs = f"encoder.layers.{i}", f"model.encoder.layers.{i}"
        _attention(p, f"{ours}.self_attn", f"{theirs}.self_attn", pi, t)
        _norm(p, f"{ours}.self_attn_norm", f"{theirs}.self_attn_layer_norm", pi, t)
        _ffn(p, f"{ours}.ffn", theirs, pi, t)
        _norm(p, f"{ours}.ffn_norm", f"{theirs}.final_layer_norm", pi, t)
    for i in range(cfg.N_dec):
        ours, theirs = f"decoder.layers.{i}", f"model.decoder.layers.{i}"
        _attention(p, f"{ours}.self_attn", f"{theirs}.self_attn", pi, t)
        _norm(p, f"{ours}.self_attn_norm", f"{theirs}.self_attn_layer_norm", pi, t)
        _attention(p, f"{ours}.cross_attn", f"{theirs}.encoder_attn", pi, t)
        _norm(p, f"{ours}.cross_attn_norm", f"{theirs}.encoder_attn_layer_norm", pi, t)
        _ffn(p, f"{ours}.ffn", theirs, pi, t)
        _norm(p, f"{ours}.ffn_norm", f"{theirs}.final_layer_norm", pi, t)
    return {k: np.ascontiguousarray(v) for k, v in t.items()}


def start_id(cfg) -> int:
    """The decoder's start in the folder: the zero start's extra last entry, or <bos>."""
    return cfg.vocab_size if extra_entry(cfg) else cfg.bos_id


def marian_config(cfg) -> dict:
    """``config.json``: the architecture, our special ids (the source's </s> is the
    tokenizer's: Marian's appends it, ours nothing)."""
    extra = int(extra_entry(cfg))  # the zero start's extra last entry
    return {
        "architectures": ["MarianMTModel"],
        "model_type": "marian",
        "vocab_size": cfg.src_vocab + extra,  # the encoder's (the decoder's too when shared)
        "decoder_vocab_size": cfg.vocab_size + extra,
        "d_model": cfg.d_model,
        "encoder_layers": cfg.N,
        "decoder_layers": cfg.N_dec,
        "encoder_attention_heads": cfg.h,
        "decoder_attention_heads": cfg.h,
        "encoder_ffn_dim": cfg.d_ff,
        "decoder_ffn_dim": cfg.d_ff,
        "activation_function": ACTIVATIONS[cfg.activation],
        "max_position_embeddings": cfg.max_len,
        "scale_embedding": cfg.scale_embedding,
        "share_encoder_decoder_embeddings": cfg.share_embeddings == "all",
        "tie_word_embeddings": cfg.share_embeddings != "none",
        "dropout": cfg.P_drop,
        "attention_dropout": cfg.P_drop_attn,
        "activation_dropout": cfg.P_drop_ffn,
        "pad_token_id": pad_token_id(cfg),
        "bos_token_id": None if cfg.bos_id == cfg.pad_id else cfg.bos_id,
        "eos_token_id": cfg.eos_id,
        "decoder_start_token_id": start_id(cfg),
        "forced_eos_token_id": cfg.eos_id,
        "is_encoder_decoder": True,
        "dtype": "float32",
    }


def generation_config(cfg) -> dict:
    """``generation_config.json``: greedy search under our token rules (module doc).
    ``max_length`` counts the start token: <bos> + ``max_len - 1`` tokens + <eos>."""
    never = list(dict.fromkeys(
        [cfg.pad_id, cfg.bos_id] + ([cfg.vocab_size] if extra_entry(cfg) else [])))
    return {
        "decoder_start_token_id": start_id(cfg),
        "bos_token_id": None if cfg.bos_id == cfg.pad_id else cfg.bos_id,
        "eos_token_id": cfg.eos_id,
        "pad_token_id": pad_token_id(cfg),
        "forced_eos_token_id": cfg.eos_id,
        "suppress_tokens": never,
        "min_new_tokens": 1,
        "max_length": cfg.max_len + 1,
        "num_beams": 1,
        "do_sample": False,
    }


def export_marian(checkpoint, out, overwrite: bool = False, echo=None) -> list:
    """Write ``checkpoint`` (a translation model's .npz) as a ``transformers`` Marian
    folder ``out`` (the module doc): the complete folder is built beside ``out`` and
    renamed into place (``writer.FileSet`` with ``folder``), so ``out`` holds all six
    files of one export or an earlier export, never a mix. Returns the paths written.

    Raises ExportError for a model that cannot be exported (the reason in one line), and
    the writer's WriteError for an output that is an input, a folder holding other files
    than an export's, a directory where a file goes, or files with other content
    (``overwrite`` replaces them). ``echo``: where notes about an interrupted export's
    leftovers go (default: standard error)."""
    save = _safetensors_save()
    ckpt, tokenizer = load_with_tokenizer(checkpoint)
    why = refusal(ckpt.model, tokenizer)
    if why:
        raise ExportError(f"{checkpoint} cannot be exported: {why}")
    cfg = ckpt.model.config
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ExportError(f"-o {out} is a file: export writes a folder")
    names = MARIAN_FILES if tokenizer.kind == "marian-spm" else FILES
    paths = {name: out / name for name in names}
    binary = {"model.safetensors", "tokenizer.model", "source.spm", "target.spm"}
    files = writer.FileSet(
        paths,
        owner=out,
        overwrite=overwrite,
        inputs=[("checkpoint", checkpoint)],
        binary=binary,
        folder=out,
        what="export",
        other="your edits, or another export",
        echo=echo,
    )
    contents = {
        "config.json": _json(marian_config(cfg)),
        "generation_config.json": _json(generation_config(cfg)),
        "model.safetensors": save(marian_tensors(ckpt.model), metadata={"format": "pt"}),
        **tokenizer_files(cfg, tokenizer),
    }
    with files as f:
        for name in names:
            f[name].write(contents[name])
    return [paths[n] for n in names]


__all__ = [
    "PADDING_NAME",
    "START_TOKEN",
    "ExportError",
    "FILES",
    "MARIAN_FILES",
    "extra_entry",
    "marian_tokenizer_config",
    "tokenizer_files",
    "bpe_merges",
    "export_marian",
    "generation_config",
    "marian_config",
    "marian_tensors",
    "pad_token_id",
    "permutation",
    "refusal",
    "start_id",
    "tokenizer_config",
    "tokenizer_json",
]
