"""Helpers for the decoding tests: small random models whose outputs vary (different
lengths, diverse tokens, beams that disagree with greedy), a wrapper that checks every
incremental step against full recomputation, and teacher-forced log-probabilities."""

import numpy as np

from scratchformer.engine import backend as B
from scratchformer.engine.models import Transformer, TransformerConfig


def lively_model(V=13, norm="pre", positions="learned", share="none", seed=0, eos_gain=1.5, **kw):
    """A ``tiny`` model (float64 when built under ``precision("float64")``) re-initialised
    with larger weights: a fresh Xavier init decodes one token over and over, which
    exercises little of a search. ``eos_gain`` scales how much the <eos> logit varies,
    so that sentences end at different steps."""
    cfg = TransformerConfig.preset(
        "tiny",
        vocab_size=V,
        norm=norm,
        positions=positions,
        share_embeddings=share,
        seed=seed,
        **kw,
    )
    m = Transformer(cfg)
    rng = np.random.default_rng(seed + 100)
    for name, p in m.parameters().items():
        if name.endswith("pos.P"):
            value = rng.normal(0, 3.0, p.shape)
        elif p.ndim == 2:
            fan = p.shape[1] if name.endswith("embed.E") else p.shape[0]
            value = rng.normal(0, 1.0 / np.sqrt(fan), p.shape)
            if name == "out_proj.W":
                value[:, cfg.eos_id] *= eos_gain
        elif name.endswith("gamma"):
            value = 1 + 0.3 * rng.standard_normal(p.shape)
        else:
            value = 0.3 * rng.standard_normal(p.shape)
        if name.endswith("embed.E"):
            value[cfg.pad_id] = 0.0
        p[...] = B.asarray(value, dtype=p.dtype)
    return m


def random_src(V, lengths, seed=0, pad_id=0):
    """(B, max(lengths)) host int64, right-padded, ids in [3, V)."""
    rng = np.random.default_rng(seed)
    src = np.full((len(lengths), max(lengths)), pad_id, dtype=np.int64)
    for b, n in enumerate(lengths):
        src[b, :n] = rng.integers(3, V, n)
    return src


def teacher_forced_logprob(model, src_row, tokens):
    """log P(tokens + <eos> | src) by one full ``model.forward`` (the training path)."""
    cfg = model.config
    src = B.asarray(np.asarray(src_row, dtype=np.int64)[None, :])
    tgt_in = B.asarray(np.array([[cfg.bos_id, *tokens]], dtype=np.int64))
    tgt_out = np.array([*tokens, cfg.eos_id])
    logits, _ = model.forward(src, tgt_in)
    lg = B.asnumpy(logits[0]).astype(np.float64)
    lse = np.log(np.exp(lg - lg.max(-1, keepdims=True)).sum(-1)) + lg.max(-1)
    return float((lg[np.arange(len(tgt_out)), tgt_out] - lse).sum())


class CheckingKV:
    """Wraps a real ``KVCache`` and follows the token history of every row through
    ``reorder``, so each step can be recomputed from scratch."""

    def __init__(self, kv, sentence_of_row):
        self.kv = kv
        self.sent = np.asarray(sentence_of_row)  # (R,) original sentence of each row
        self.history = np.zeros((len(self.sent), 0), dtype=np.int64)  # decoder inputs
        self.reorders = 0  # reorders that were not the identity

    def reorder(self, rows, sentences=None):
        rows = np.asarray(rows)
        if not np.array_equal(rows, np.arange(len(self.sent))):
            self.reorders += 1
        self.kv.reorder(rows, sentences)
        self.sent, self.history = self.sent[rows], self.history[rows]


class CheckingModel:
    """Duck-types the decoding interface of ``Transformer`` (config, encode_infer,
    init_kv, decode_step); at every step compares the incremental logits with a full
    ``forward`` over each row's whole history. ``max_err`` holds the worst difference."""

    def __init__(self, model, src):
        self.model, self.config = model, model.config
        self.src = np.asarray(src)
        self.max_err, self.steps, self.kvs = 0.0, 0, []

    def encode_infer(self, src):
        return self.model.encode_infer(src)

    def init_kv(self, memory, src_mask, beams=1, capacity=None, padded=True):
        kv = self.model.init_kv(memory, src_mask, beams, capacity, padded)
        ckv = CheckingKV(kv, np.repeat(np.arange(memory.shape[0]), beams))
        self.kvs.append(ckv)
        return ckv

    def decode_step(self, tokens, ckv):
        logits = self.model.decode_step(tokens, ckv.kv)
        ckv.history = np.concatenate([ckv.history, B.asnumpy(tokens)], axis=1)
        full, _ = self.model.forward(B.asarray(self.src[ckv.sent]), B.asarray(ckv.history))
        err = float(np.abs(B.asnumpy(full[:, -1]) - B.asnumpy(logits[:, -1])).max())
        self.max_err = max(self.max_err, err)
        self.steps += 1
        return logits


def add_logit_bias(model, biases: dict):
    """Give tokens a constant logit offset: ``{token_id: bias}``.

    The model has no output bias, so one is made: feature 0 of the decoder's final
    LayerNorm is pinned to 1 (gamma 0, beta 1) and row 0 of the untied output
    projection carries the biases. Returns the model.
    """
    dec = model.decoder
    final = dec.norm if dec.norm is not None else dec.layers[-1].ffn_norm
    final.params["gamma"][0] = 0.0
    final.params["beta"][0] = 1.0
    W = model.out_proj.params["W"]
    W[0, :] = 0.0
    for token, bias in biases.items():
        W[0, token] = bias
    return model
