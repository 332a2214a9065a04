"""An encoder-only sequence classifier (fairseq's RobertaClassificationHead on top).

    h      = Encoder(E[ids] * sqrt(D))             padding-masked, not causal
    f      = h[:, 0]                               the first token (<bos> acts as [CLS])
    logits = W_out tanh(W_dense dropout(f) + b_dense) ... as:
             dropout -> dense (D, D) -> tanh -> dropout -> linear (D, C)
    loss   = cross-entropy(logits, label), mean over the batch

Parameter names: ``embed.E`` (V, D); ``encoder...`` as in the Transformer's encoder
(``attention="relative"`` adds ``E_k|E_v``); ``head.dense.W|b`` (D, D), ``head.out.W|b``
(D, C).

Dimension key: ``B`` batch, ``S`` length, ``D`` d_model, ``V`` vocabulary, ``C`` classes.
"""

from __future__ import annotations

from typing import NamedTuple

from scratchformer.engine import backend, device
from scratchformer.engine.backend import xp
from scratchformer.engine.errors import ShapeError, check_ids, check_rank, check_token_ids
from scratchformer.engine.models.config import TransformerConfig, check_cache, check_config
from scratchformer.engine.models.transformer import padding_mask
from scratchformer.engine.nn.layers import Dropout, Embedding, Linear
from scratchformer.engine.nn.module import Module
from scratchformer.engine.nn.transformer import Encoder, StackCache
from scratchformer.engine.ops.loss import cross_entropy
from scratchformer.engine.ops.tanh import TanhCache, tanh


class HeadCache(NamedTuple):
    drop1: object  # dropout's: on the features (B, D)
    dense: object  # linear's: (B, D) @ W (D, D) + b
    tanh: TanhCache  # (B, D)
    drop2: object  # dropout's: (B, D)
    out: object  # linear's: (B, D) @ W (D, C) + b


class ClassificationHead(Module):
    """features (B, D) -> dropout -> dense -> tanh -> dropout -> linear -> logits (B, C)."""

    def __init__(self, d_model: int, num_classes: int, p_drop: float, rng=None):
        super().__init__()
        self.dense = Linear(d_model, d_model, rng=rng)
        self.out = Linear(d_model, num_classes, rng=rng)
        self.dropout = Dropout(p_drop)

    def forward(self, f, rng=None):
        x, c1 = self.dropout.forward(f, rng)
        x, c2 = self.dense.forward(x)
        x, c3 = tanh.forward(x)
        x, c4 = self.dropout.forward(x, rng)  # one module, two calls: two masks in caches
        logits, c5 = self.out.forward(x)
        return logits, HeadCache(c1, c2, c3, c4, c5)

    def backward(self, dlogits, cache: HeadCache):
        dx = self.out.backward(dlogits, cache.out)
        dx = self.dropout.backward(dx, cache.drop2)
        dx = tanh.backward(dx, cache.tanh)
        dx = self.dense.backward(dx, cache.dense)
        return self.dropout.backward(dx, cache.drop1)


class ClassifierCache(NamedTuple):
    embed: object  # embedding's: ids (B, S)
    encoder: StackCache  # h (B, S, D)
    shape: tuple  # (B, S, D) of h, to scatter the head's gradient back to token 0
    head: HeadCache
    owner: int = 0  # id() of the model that made it (backward takes no other's)


class ClassifierLossCache(NamedTuple):
    model: ClassifierCache
    loss: object  # cross_entropy's: P (B, C), labels


class EncoderClassifier(Module):
    """``EncoderClassifier(TransformerConfig(vocab_size=V, N=2, ...), num_classes=6)``.

    Inputs start with ``config.bos_id`` (the token whose features are classified) and
    are right-padded with ``pad_id``. ``N`` is the encoder depth; the head's dropout is
    ``P_drop``. Self-attention may be ``dense`` or ``relative`` (Shaw).
    """

    def __init__(self, config: TransformerConfig, num_classes: int):
        check_config(config, "EncoderClassifier")
        super().__init__()
        if num_classes < 2:
            raise ValueError(f"num_classes must be >= 2, got {num_classes}")
        self.config = cfg = config
        self.num_classes = int(num_classes)
        rng = backend.host_rng(cfg.seed)
        self.embed = Embedding(cfg.vocab_size, cfg.d_model, cfg.pad_id, cfg.embedding_scale, rng)
        self.encoder = Encoder(cfg, cfg.N, rng)
        self.head = ClassificationHead(cfg.d_model, num_classes, cfg.P_drop, rng)

    def forward(self, ids, rng=None):
        """ids (B, S) int  ->  logits (B, C), cache. ``rng`` turns dropout on."""
        ids = check_ids(ids, self.config.vocab_size, self.config.max_len, "ids", "(B, S)")
        device.check_generator(rng)
        x, c_emb = self.embed.forward(ids)  # (B, S, D)
        h, c_enc = self.encoder.forward(x, padding_mask(ids, self.config.pad_id), rng)
        logits, c_head = self.head.forward(h[:, 0], rng)  # (B, C)
        return logits, ClassifierCache(c_emb, c_enc, h.shape, c_head, id(self))

    def backward(self, dlogits, cache: ClassifierCache):
        check_cache(self, cache, ClassifierCache, "EncoderClassifier")
        df = self.head.backward(dlogits, cache.head)  # (B, D)
        dh = xp.zeros(cache.shape, dtype=df.dtype)  # only token 0 was read
        dh[:, 0] = df
        dx = self.encoder.backward(dh, cache.encoder)
        self.embed.backward(dx, cache.embed)

    def loss_forward(self, ids, labels, rng=None, eps_ls=0.0):
        """ids (B, S), labels (B,) int in [0, C)  ->  mean cross-entropy, cache."""
        check_rank(labels, 1, "labels", "(B,)")
        if labels.shape[0] != ids.shape[0]:
            raise ShapeError(f"{labels.shape[0]} labels for a batch of {ids.shape[0]}")
        labels = check_token_ids(labels, self.num_classes, "labels")
        logits, c_model = self.forward(ids, rng)
        loss, c_loss = cross_entropy.forward(logits, labels, eps_ls, None, donate=True)
        return loss, ClassifierLossCache(c_model, c_loss)

    def loss_backward(self, cache: ClassifierLossCache, dloss=1.0):
        check_cache(self, getattr(cache, "model", cache), ClassifierCache, "EncoderClassifier")
        self.backward(cross_entropy.backward(dloss, cache.loss), cache.model)

    def predict(self, ids):
        """ids (B, S)  ->  predicted class ids (B,), dropout off."""
        return self.forward(ids)[0].argmax(axis=-1)


__all__ = ["ClassificationHead", "ClassifierCache", "EncoderClassifier"]
