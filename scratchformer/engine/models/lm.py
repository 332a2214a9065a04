"""A decoder-only causal language model with tied embeddings.

    h      = CausalStack(E[x] * sqrt(D))          N layers of causal self-attention + FFN
    logits = h E^T                                the output projection shares E, unscaled
    loss   = cross-entropy(logits, next tokens), mean over non-pad targets

Any self-attention variant of the config works (``attention``: dense, relative,
relative_skew, local); decoding (``init_kv`` / ``decode_step``, and ``generate`` in
scratchformer/engine/decode/sample.py) advances a ``KVCache`` one position at a time.

Parameter names: ``embed.E`` (V, D); ``decoder.pos.P`` (learned positions only);
``decoder.layers.{i}.self_attn.W_q|W_k|W_v|W_o`` (+ ``E_k|E_v`` or ``E_r``);
``decoder.layers.{i}.self_attn_norm.gamma|beta``, ``...ffn.W_1|b_1|W_2|b_2``,
``...ffn_norm.gamma|beta``; ``decoder.norm.gamma|beta`` (pre-LN only).

Dimension key: ``B`` batch, ``T`` length, ``D`` d_model, ``V`` vocabulary, ``R`` rows.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from scratchformer.engine import backend, device
from scratchformer.engine.errors import ShapeError, check_ids, check_rank, check_token_ids
from scratchformer.engine.models.config import TransformerConfig, check_cache, check_config
from scratchformer.engine.models.transformer import padding_mask
from scratchformer.engine.nn.kv import DecodeStateError, KVCache
from scratchformer.engine.nn.layers import Embedding
from scratchformer.engine.nn.module import Module
from scratchformer.engine.nn.transformer import CausalStack, StackCache
from scratchformer.engine.ops.loss import cross_entropy


class LMCache(NamedTuple):
    embed: object  # embedding's: ids (B, T)
    decoder: StackCache  # h (B, T, D)
    output: object  # linear's: h (B, T, D) @ E^T
    owner: int = 0  # id() of the model that made it (backward takes no other's)


class LMLossCache(NamedTuple):
    model: LMCache
    loss: object  # cross_entropy's: P (B, T, V), targets, padding


class LanguageModel(Module):
    """``LanguageModel(TransformerConfig(vocab_size=V, N=4, ...))``; ``N`` is the layer
    count (``N_dec`` and the source-side fields are unused)."""

    def __init__(self, config: TransformerConfig):
        check_config(config, "LanguageModel")
        super().__init__()
        self.config = cfg = config
        rng = backend.host_rng(cfg.seed)
        self.embed = Embedding(cfg.vocab_size, cfg.d_model, cfg.pad_id, math.sqrt(cfg.d_model), rng)
        self.decoder = CausalStack(cfg, cfg.N, rng)

    def mask(self, ids):
        """Self-attention mask: (B, 1, 1, T), True at real tokens; the stack's attention
        is causal and adds the causal part itself (local attention its band)."""
        return padding_mask(ids, self.config.pad_id)

    def forward(self, ids, rng=None):
        """ids (B, T) int  ->  logits (B, T, V), cache. ``rng`` turns dropout on."""
        ids = check_ids(ids, self.config.vocab_size, self.config.max_len, "ids", "(B, T)")
        device.check_generator(rng)
        x, c_emb = self.embed.forward(ids)  # (B, T, D), scaled
        h, c_dec = self.decoder.forward(x, self.mask(ids), rng)
        logits, c_out = self.embed.project(h)  # (B, T, V)
        return logits, LMCache(c_emb, c_dec, c_out, id(self))

    def backward(self, dlogits, cache: LMCache):
        """dlogits (B, T, V): adds into every parameter's gradient (E twice: tied)."""
        check_cache(self, cache, LMCache, "LanguageModel")
        dh = self.embed.project_backward(dlogits, cache.output)
        dx = self.decoder.backward(dh, cache.decoder)
        self.embed.backward(dx, cache.embed)

    def loss_forward(self, ids, targets, rng=None, eps_ls=None):
        """ids (B, T) inputs, targets (B, T) the next tokens (pad where none)  ->  mean
        cross-entropy over non-pad targets (label-smoothed with ``eps_ls``, default
        the config's), cache."""
        check_rank(targets, 2, "targets", "(B, T)")
        if targets.shape != ids.shape:
            raise ShapeError(f"targets {tuple(targets.shape)} must match ids {tuple(ids.shape)}")
        targets = check_token_ids(targets, self.config.vocab_size, "targets")
        logits, c_model = self.forward(ids, rng)
        eps = self.config.eps_ls if eps_ls is None else eps_ls
        # The logits are ours alone: the fused loss turns them into the probabilities.
        loss, c_loss = cross_entropy.forward(
            logits, targets, eps, self.config.pad_id, donate=True
        )
        return loss, LMLossCache(c_model, c_loss)

    def loss_backward(self, cache: LMLossCache, dloss=1.0):
        """Back-propagates ``dloss * loss``; writes dlogits over the cached probabilities,
        so a cache serves one backward (a second call raises ValueError)."""
        check_cache(self, getattr(cache, "model", cache), LMCache, "LanguageModel")
        self.backward(cross_entropy.backward(dloss, cache.loss), cache.model)

    # -- inference ----------------------------------------------------------------------
    def init_kv(self, rows: int, capacity: int | None = None) -> KVCache:
        """An empty decoding state for ``rows`` sequences (up to ``capacity`` positions)."""
        return self.decoder.init_kv(rows, capacity, self.embed.params["E"].dtype)

    def decode_step(self, tokens, kv: KVCache):
        """tokens (R, T) the next T inputs of every row  ->  logits (R, T, V); positions
        continue at ``kv.length``. A whole prefix at once equals ``forward``."""
        check_rank(tokens, 2, "tokens", "(R, T)")
        tokens = check_token_ids(tokens, self.config.vocab_size, "tokens")
        if tokens.shape[0] != kv.rows:
            raise DecodeStateError(
                f"decode_step got {tokens.shape[0]} rows, the kv holds {kv.rows}"
            )
        h = self.decoder.step(self.embed.forward(tokens)[0], kv)  # (R, T, D)
        return self.embed.project(h)[0]  # (R, T, V): the forward's product, its cache dropped


__all__ = ["LMCache", "LMLossCache", "LanguageModel"]
