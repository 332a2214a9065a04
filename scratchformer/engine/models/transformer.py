"""The encoder-decoder Transformer of "Attention Is All You Need".

    memory = Encoder(E[src] * sqrt(D))
    h      = Decoder(E[tgt_in] * sqrt(D), memory)
    logits = h E^T (+ b)                (the output projection shares E, unscaled;
                                         b with ``output_bias``)
    loss   = label-smoothed cross-entropy(logits, tgt_out), mean over non-pad tokens

Decoding runs the training forwards with dropout off, dropping each backward cache as
soon as it is made: ``encode_infer`` once per batch, ``init_kv`` once (cross-attention
keys/values per sentence), then ``decode_step`` per generated position (see
scratchformer/engine/decode/ for greedy and beam search).

Dimension key: ``B`` batch, ``S`` source length, ``T`` target length, ``D`` d_model,
``V`` vocabulary, ``K`` beams per sentence, ``R = B * K`` decoding rows.
"""

from __future__ import annotations

from typing import NamedTuple

from scratchformer.engine import backend, device
from scratchformer.engine.errors import (
    ShapeError,
    check_ids,
    check_rank,
    check_same_batch,
    check_token_ids,
)
from scratchformer.engine.models.config import TransformerConfig, check_cache, check_config
from scratchformer.engine.nn.kv import DecodeStateError, KVCache
from scratchformer.engine.nn.layers import Embedding, Linear, OutputBias
from scratchformer.engine.nn.module import Module
from scratchformer.engine.nn.transformer import Decoder, Encoder, StackCache
from scratchformer.engine.ops.loss import cross_entropy


class TransformerCache(NamedTuple):
    src_embed: object  # embedding's: src (B, S) ids
    encoder: StackCache  # memory (B, S, D)
    tgt_embed: object  # embedding's: tgt_in (B, T) ids
    decoder: StackCache  # h (B, T, D)
    output: object  # linear's: h (B, T, D) @ E^T (or @ W)
    owner: int = 0  # id() of the model that made it (backward takes no other's)


class TransformerLossCache(NamedTuple):
    model: TransformerCache
    loss: object  # cross_entropy's: P (B, T, V), targets, padding mask, n_tokens


def padding_mask(ids, pad_id: int):
    """ids (B, L)  ->  bool (B, 1, 1, L), True at real tokens (keys that may be attended)."""
    return (ids != pad_id)[:, None, None, :]


class Transformer(Module):
    """Parameter names (``model.parameters()``), with ``share_embeddings="all"``:

    ``embed.E``                                   (V, D) tokens, source, target and output
    ``encoder.pos.P`` / ``decoder.pos.P``         (max_len, D) learned positions only
    ``encoder.layers.{i}.self_attn.W_q|W_k|W_v|W_o``
    ``encoder.layers.{i}.self_attn_norm.gamma|beta``
    ``encoder.layers.{i}.ffn.W_1|b_1|W_2|b_2``, ``...ffn_norm.gamma|beta``
    ``decoder.layers.{i}.self_attn...``, ``...cross_attn...``, ``...ffn...`` likewise
    ``encoder.norm.gamma|beta``, ``decoder.norm.gamma|beta``   pre-LN only
    ``share_embeddings="decoder"``: ``src_embed.E`` and ``embed.E`` (target and output);
    ``"none"``: ``src_embed.E``, ``embed.E`` (target) and ``out_proj.W`` (D, V).
    ``output_bias``: ``out_bias.b`` (V,), last.
    """

    def __init__(self, config: TransformerConfig):
        check_config(config, "Transformer")
        super().__init__()
        self.config = cfg = config
        rng = backend.host_rng(cfg.seed)
        scale = cfg.embedding_scale
        self.embed = Embedding(cfg.vocab_size, cfg.d_model, cfg.pad_id, scale, rng)
        if cfg.share_embeddings == "all":
            self.src_embed = self.embed
        else:
            self.src_embed = Embedding(cfg.src_vocab, cfg.d_model, cfg.pad_id, scale, rng)
        self.out_proj = (
            Linear(cfg.d_model, cfg.vocab_size, bias=False, rng=rng)
            if cfg.share_embeddings == "none"
            else None
        )
        self.encoder = Encoder(cfg, cfg.N, rng)
        self.decoder = Decoder(cfg, cfg.N_dec, rng)
        self.out_bias = OutputBias(cfg.vocab_size) if cfg.output_bias else None

    # -- input checks -------------------------------------------------------------------
    def check_inputs(self, src, tgt_in, tgt_out=None):
        """``(src, tgt_in, tgt_out)`` checked and on the active backend: where host
        inputs enter the model, whoever calls it (the trainer passes host batches)."""
        cfg = self.config
        src = check_ids(src, cfg.src_vocab, cfg.max_len, "src", "(B, S)")
        tgt_in = check_ids(tgt_in, cfg.vocab_size, cfg.max_len, "tgt_in", "(B, T)")
        check_same_batch(src, tgt_in, "src", "tgt_in")
        if tgt_out is not None:
            check_rank(tgt_out, 2, "tgt_out", "(B, T)")
            if tgt_out.shape != tgt_in.shape:
                raise ShapeError(
                    f"tgt_out {tuple(tgt_out.shape)} must have the shape of tgt_in "
                    f"{tuple(tgt_in.shape)}"
                )
            tgt_out = check_token_ids(tgt_out, self.config.vocab_size, "tgt_out")
        return src, tgt_in, tgt_out

    # -- forward / backward ---------------------------------------------------------------
    def encode(self, src, rng=None):
        """src (B, S) ids  ->  memory (B, S, D), the source mask, and the caches."""
        src_mask = padding_mask(src, self.config.pad_id)
        x, c_emb = self.src_embed.forward(src)
        memory, c_enc = self.encoder.forward(x, src_mask, rng)
        return memory, src_mask, c_emb, c_enc

    def forward(self, src, tgt_in, rng=None):
        """src (B, S), tgt_in (B, T) int ids  ->  logits (B, T, V), cache.

        ``rng`` turns dropout on (training); leave it out for evaluation.
        """
        src, tgt_in, _ = self.check_inputs(src, tgt_in)
        device.check_generator(rng)
        return self._forward(src, tgt_in, rng)

    def _forward(self, src, tgt_in, rng=None):
        """``forward`` without the input checks (the caller has made them)."""
        memory, src_mask, c_src, c_enc = self.encode(src, rng)
        y, c_tgt = self.embed.forward(tgt_in)
        self._start(y, 0)
        self_mask = self._target_mask(tgt_in)  # the attention adds causality
        h, c_dec = self.decoder.forward(y, memory, self_mask, src_mask, rng)
        logits, c_out = self._output(h)
        return logits, TransformerCache(c_src, c_enc, c_tgt, c_dec, c_out, id(self))

    def _target_mask(self, tgt_in):
        """The decoder's padding mask (B, 1, 1, T). A model that starts from its padding
        token (``bos_id == pad_id``, Marian's start) has that id at position 0 of every
        row as a real input: position 0 is always attended."""
        cfg = self.config
        mask = padding_mask(tgt_in, cfg.pad_id)
        if cfg.bos_id == cfg.pad_id:
            mask[..., 0] = True
        return mask

    @property
    def _pad_start(self) -> bool:
        """Whether the decoder starts from its padding token (``bos_id == pad_id``,
        Marian's start, with ``zero_start``)."""
        return self.config.bos_id == self.config.pad_id

    def _output(self, h):
        """h (B, T, D)  ->  logits (B, T, V) and the cache: ``h E^T`` (the embedding, tied,
        unscaled) or ``h W`` (the output projection's own), one product over B*T rows;
        with ``output_bias``, ``+ b`` in place (the logits are fresh). A model that starts
        from its padding token has no row for it (Marian's start is the zero vector): the
        padding's logit is 0 (+ its bias), whatever that row of E or W holds."""
        out, cache = self.embed.project(h) if self.out_proj is None else self.out_proj.forward(h)
        if self._pad_start:
            out[..., self.config.pad_id] = 0
        if self.out_bias is not None:
            out = self.out_bias.forward(out)
        return out, cache

    def _start(self, y, position: int) -> None:
        """With ``zero_start``, the decoder's first position reads the zero vector: ``y``
        (B, T, D), the embeddings of positions ``position ..`` (or their gradient), gets
        zeros at position 0 in place (``y`` is the caller's own, fresh array). The
        derivative of a constant is zero, so the backward zeroes the same rows."""
        if self.config.zero_start and position == 0:
            y[:, :1] = 0

    def backward(self, dlogits, cache: TransformerCache):
        """dlogits (B, T, V): adds into every parameter's gradient."""
        check_cache(self, cache, TransformerCache, "Transformer")
        if self.out_bias is not None:
            dlogits = self.out_bias.backward(dlogits)
        if self._pad_start:  # the padding's logit read neither h nor E (_output)
            dlogits = dlogits.copy()
            dlogits[..., self.config.pad_id] = 0
        if self.out_proj is None:
            dh = self.embed.project_backward(dlogits, cache.output)
        else:
            dh = self.out_proj.backward(dlogits, cache.output)
        dy, dmemory = self.decoder.backward(dh, cache.decoder)
        self._start(dy, 0)  # the zero start read no embedding: its row gets no gradient
        self.embed.backward(dy, cache.tgt_embed)
        dx = self.encoder.backward(dmemory, cache.encoder)
        self.src_embed.backward(dx, cache.src_embed)

    # -- inference: the same forwards, dropout off, caches dropped ------------------------
    def encode_infer(self, src):
        """src (B, S) ids, right-padded with pad_id  ->  memory (B, S, D), src_mask (B, 1, 1, S).

        Equal to ``encode(src)[0:2]``, keeping no caches. Checks ids and length first.
        """
        src = check_ids(src, self.config.src_vocab, self.config.max_len, "src", "(B, S)")
        src_mask = padding_mask(src, self.config.pad_id)
        x = self.src_embed.forward(src)[0]  # (B, S, D), already scaled
        return self.encoder.infer(x, src_mask), src_mask

    def init_kv(self, memory, src_mask, beams: int = 1, capacity: int | None = None,
                padded: bool = True) -> KVCache:
        """An empty decoding state for ``beams`` rows per sentence (``Decoder.init_kv``);
        the cross-attention keys/values of ``memory`` are computed here, once."""
        return self.decoder.init_kv(memory, src_mask, beams, capacity, padded)

    def decode_step(self, tokens, kv: KVCache):
        """tokens (R, T) int: the next T decoder inputs of every row  ->  logits (R, T, V).

        Incremental decoding: positions continue at ``kv.length``, the self-attention
        keys/values of the new positions are appended to ``kv``. Feeding a whole prefix
        at once into an empty kv (T > 1) gives the same logits as ``forward``.
        """
        check_rank(tokens, 2, "tokens", "(R, T)")
        tokens = check_token_ids(tokens, self.config.vocab_size, "tokens")
        if tokens.shape[0] != kv.rows:
            raise DecodeStateError(
                f"decode_step got {tokens.shape[0]} rows, the kv holds {kv.rows}"
            )
        y = self.embed.forward(tokens)[0]  # (R, T, D), already scaled
        self._start(y, kv.length)
        h = self.decoder.step(y, kv)  # (R, T, D)
        return self._output(h)[0]  # (R, T, V)

    def loss_forward(self, src, tgt_in, tgt_out, rng=None, eps_ls=None):
        """Label-smoothed cross-entropy, mean over non-pad target tokens.

        src (B, S), tgt_in (B, T) (bos + target), tgt_out (B, T) (target + eos, padded)
        -> loss (scalar array), cache. ``eps_ls`` defaults to the config's.
        """
        src, tgt_in, tgt_out = self.check_inputs(src, tgt_in, tgt_out)
        device.check_generator(rng)
        logits, c_model = self._forward(src, tgt_in, rng)
        eps = self.config.eps_ls if eps_ls is None else eps_ls
        # The logits are ours alone: the fused loss turns them into the probabilities.
        loss, c_loss = cross_entropy.forward(
            logits, tgt_out, eps, self.config.pad_id, donate=True
        )
        return loss, TransformerLossCache(c_model, c_loss)

    def loss_backward(self, cache: TransformerLossCache, dloss=1.0):
        """Back-propagates ``dloss * loss`` into every parameter's gradient.

        Writes dlogits over the cached probabilities (no second (B, T, V) array), so a
        cache serves one backward; a second call raises ValueError.
        """
        check_cache(self, getattr(cache, "model", cache), TransformerCache, "Transformer")
        self.backward(cross_entropy.backward(dloss, cache.loss), cache.model)


__all__ = [
    "KVCache",
    "Transformer",
    "TransformerConfig",
    "padding_mask",
]
