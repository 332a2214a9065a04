"""Basic modules: Linear, Embedding, OutputBias, PositionalEncoding, LayerNorm, AddNorm,
Dropout, PositionwiseFeedForward.

Dimension key: ``B`` batch, ``T`` length, ``D`` d_model, ``F`` d_ff, ``V`` vocabulary,
``L`` max_len.
"""

from __future__ import annotations

from typing import NamedTuple

from scratchformer.engine import backend
from scratchformer.engine.nn.module import Module, allocating, normal, ones, xavier_uniform, zeros
from scratchformer.engine.ops.activations import ACTIVATIONS
from scratchformer.engine.ops.dropout import dropout
from scratchformer.engine.ops.embedding import embedding
from scratchformer.engine.ops.layernorm import add_norm_exit, layernorm
from scratchformer.engine.ops.linear import linear
from scratchformer.engine.ops.positional import positional, sinusoidal_table


class Linear(Module):
    """``y = x W + b``; parameters ``W`` (D_in, D_out) and ``b`` (D_out,)."""

    def __init__(self, d_in: int, d_out: int, bias: bool = True, rng=None):
        super().__init__()
        rng = rng or backend.host_rng(0)
        self.add_parameter("W", xavier_uniform(rng, d_in, d_out))
        if bias:
            self.add_parameter("b", zeros(d_out))

    def forward(self, x):
        return linear.forward(x, self.params["W"], self.params.get("b"))

    def backward(self, dout, cache):
        dx, dW, db = linear.backward(dout, cache)
        self.grads["W"] += dW
        if db is not None:
            self.grads["b"] += db
        return dx


class PaddedLookupCache(NamedTuple):
    lookup: object  # embedding's cache of the ids with the padding read as row 0
    keep: object  # (B, T, 1) bool, False at padding: no gradient from there


class Embedding(Module):
    """Token embedding ``E`` (V, D), scaled by ``scale`` (the paper's sqrt(d_model)).

    The same matrix can serve as the pre-softmax projection (``project``), as the paper
    ties them: both uses add into ``grads["E"]``, each from its own cache.

    ``pad_id == vocab_size``: padding is no token of the vocabulary (a model without a
    padding token, GPT-2): a padded position embeds to zero (it reads row 0, times 0),
    so it gives no row a gradient, as the padding row gets none otherwise.
    """

    def __init__(self, vocab_size: int, d_model: int, pad_id=None, scale=1.0, rng=None):
        super().__init__()
        rng = rng or backend.host_rng(0)
        E = normal(rng, d_model**-0.5, (vocab_size, d_model))
        self.pad_outside = pad_id is not None and pad_id >= vocab_size
        if pad_id is not None and not self.pad_outside:
            E[pad_id] = 0.0
        self.add_parameter("E", E)
        self.vocab_size, self.d_model, self.pad_id, self.scale = vocab_size, d_model, pad_id, scale

    def forward(self, ids):
        """ids (B, T) int  ->  (B, T, D) = E[ids] * scale; under ``backend.autocast``
        (mixed precision) in the activations' dtype: where the float16 ones begin."""
        if self.pad_outside:
            keep = (ids != self.pad_id)[..., None]  # (B, T, 1)
            out, lookup = embedding.forward(ids * keep[..., 0], self.params["E"], None)
            out, cache = out * keep, PaddedLookupCache(lookup, keep)  # (B, T, D)
        else:
            out, cache = embedding.forward(ids, self.params["E"], self.pad_id)
        if self.scale != 1.0:
            out = out * self.scale
        compute = backend.compute_dtype()
        if compute is not None:
            out = out.astype(compute)
        return out, cache

    def backward(self, dout, cache):
        """``grads["E"] += embedding_backward(dout * scale)``: repeated ids accumulate,
        the pad row gets nothing (added into the gradient itself where the chosen
        implementation can: ``backward_into``); a float16 gradient in E's dtype."""
        dout = dout.astype(self.params["E"].dtype, copy=False)
        if self.scale != 1.0:
            dout = dout * self.scale
        if isinstance(cache, PaddedLookupCache):  # padding outside the vocabulary
            dout, cache = dout * cache.keep, cache.lookup
        embedding.backward_into(self.grads["E"], dout, cache)

    def project(self, h):
        """Tied output projection: h (B, T, D)  ->  logits (B, T, V) = h E^T (unscaled)."""
        return linear.forward(h, self.params["E"].T)

    def project_backward(self, dlogits, cache):
        """``dh = dlogits E``; ``dE += dlogits^T h`` (the transpose of linear's dW)."""
        dh, dET, _ = linear.backward(dlogits, cache)
        self.grads["E"] += dET.T
        return dh


class OutputBias(Module):
    """A bias ``b`` (V,) on the output logits: ``logits + b`` at every position
    (Marian's ``final_logits_bias``); zeros at initialisation."""

    def __init__(self, vocab_size: int):
        super().__init__()
        self.add_parameter("b", zeros(vocab_size))

    def forward(self, logits):
        """logits (B, T, V), given up (a fresh array)  ->  logits + b, in place."""
        logits += self.params["b"]
        return logits

    def backward(self, dlogits):
        """``db = sum over b, t of dlogits[b, t]`` (the bias is added at every position);
        ``dlogits`` passes through unchanged. Derivation: docs/derivations.md#output-bias."""
        g = self.grads["b"]
        g += dlogits.reshape(-1, dlogits.shape[-1]).sum(axis=0, dtype=g.dtype)
        return dlogits


class PositionalEncoding(Module):
    """Adds positions: the paper's sinusoids (a constant) or a learned table ``P`` (L, D)."""

    def __init__(self, max_len: int, d_model: int, kind: str = "sinusoidal", rng=None):
        super().__init__()
        self.max_len, self.kind = max_len, kind
        if kind == "sinusoidal":  # a constant: not made when only shapes are asked for
            self.table = (
                sinusoidal_table(max_len, d_model, backend.get_dtype()) if allocating() else None
            )
        elif kind == "learned":
            rng = rng or backend.host_rng(0)
            self.add_parameter("P", normal(rng, d_model**-0.5, (max_len, d_model)))
        else:
            raise ValueError(f"unknown positions {kind!r}: expected 'sinusoidal' or 'learned'")

    def _P(self):
        return self.params["P"] if self.kind == "learned" else self.table

    def forward(self, x, offset: int = 0):
        """x (B, T, D)  ->  x + P[offset : offset + T]."""
        return positional.forward(x, self._P(), offset)

    def backward(self, dout, cache):
        dx, dP = positional.backward(dout, cache)
        if self.kind == "learned":
            self.grads["P"] += dP
        return dx


class LayerNorm(Module):
    """``gamma * (x - mean) / sqrt(var + eps) + beta`` over the last axis."""

    def __init__(self, d_model: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.add_parameter("gamma", ones(d_model))
        self.add_parameter("beta", zeros(d_model))

    def forward(self, x):
        return layernorm.forward(x, self.params["gamma"], self.params["beta"], self.eps)

    def backward(self, dout, cache):
        dx, dgamma, dbeta = layernorm.backward(dout, cache)
        self.grads["gamma"] += dgamma
        self.grads["beta"] += dbeta
        return dx


class Dropout(Module):
    """Inverted dropout with rate ``p``; on only when the caller passes a generator."""

    def __init__(self, p: float):
        super().__init__()
        if not 0.0 <= p < 1.0:  # checked once, here: the op does not check it per call
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p = p

    def forward(self, x, rng=None):
        return dropout.forward(x, self.p, rng)

    def backward(self, dout, cache):
        return dropout.backward(dout, cache)


class AddNormCache(NamedTuple):
    norm: object  # enter: the layernorm's cache (pre-LN), else None
    exit: object  # exit: the add_norm_exit's cache (dropout, residual, LayerNorm if post)


class AddNorm(LayerNorm):
    """The paper's "Add & Norm" around a sub-layer, post-LN or pre-LN.

    post-LN (the paper):  y = LayerNorm(x + Dropout(Sublayer(x)))
    pre-LN:               y = x + Dropout(Sublayer(LayerNorm(x)))

    It is the LayerNorm of its Add & Norm (``gamma`` and ``beta`` (D,), its forward and
    backward inherited, here named ``_norm`` and ``_norm_backward``) with the dropout
    rate, the residual add and the side the variant puts the norm on: ``enter`` is the
    LayerNorm (pre-LN) or nothing; ``exit`` is the op ``add_norm_exit`` (dropout, the
    residual add, and the LayerNorm for post-LN: one fused kernel where there is one).
    Used in two steps around the sub-layer so that any sub-layer fits:

        s_in, c_in = addnorm.enter(x)               # LayerNorm(x) (pre) or x (post)
        s, c_s = sublayer(s_in)
        y, c_out = addnorm.exit(x, s, rng)          # x + Dropout(s), normed if post
        ...
        dx, ds = addnorm.exit_backward(dy, c_out)   # residual path and sub-layer path
        dx = dx + addnorm.enter_backward(sublayer_backward(ds, c_s), c_in)  # not +=: dx may be dy
    """

    def __init__(self, d_model: int, P_drop: float, norm_first: bool, eps: float = 1e-5):
        super().__init__(d_model, eps)
        self.norm_first = norm_first
        self.dropout = Dropout(P_drop)

    #: the LayerNorm's own passes, by the names the Add & Norm code (and exercise) uses
    _norm, _norm_backward = LayerNorm.forward, LayerNorm.backward

    def enter(self, x):
        if self.norm_first:
            s_in, c = self._norm(x)
            return s_in, AddNormCache(c, None)
        return x, AddNormCache(None, None)

    def enter_backward(self, ds_in, cache: AddNormCache):
        if self.norm_first:
            return self._norm_backward(ds_in, cache.norm)
        return ds_in

    def exit(self, x, s, rng=None):
        """``LayerNorm(x + Dropout(s))`` (post-LN) or ``x + Dropout(s)`` (pre-LN); the
        sub-layer's output ``s`` is given up."""
        p = self.params
        gamma, beta = (None, None) if self.norm_first else (p["gamma"], p["beta"])
        y, c = add_norm_exit.forward(
            x, s, gamma, beta, self.eps, self.dropout.p, rng, donate=True
        )
        return y, AddNormCache(None, c)

    def exit_backward(self, dy, cache: AddNormCache):
        """Returns ``(dx, ds)``: the residual path's gradient and the sub-layer output's."""
        dx, ds, dgamma, dbeta = add_norm_exit.backward(dy, cache.exit)
        if dgamma is not None:
            self.grads["gamma"] += dgamma
            self.grads["beta"] += dbeta
        return dx, ds


class FeedForwardCache(NamedTuple):
    lin1: object  # linear's: x (B, T, D)
    act: object  # the activation's (ReLU mask or GELU inputs)
    drop: object  # dropout's: activation dropout (off by default, as in the paper)
    lin2: object  # linear's: hidden (B, T, F)


class PositionwiseFeedForward(Module):
    """``FFN(x) = act(x W_1 + b_1) W_2 + b_2`` (section 3.3), applied at every position."""

    def __init__(self, d_model, d_ff, activation="relu", P_drop_ffn=0.0, rng=None):
        super().__init__()
        rng = rng or backend.host_rng(0)
        if activation not in ACTIVATIONS:
            raise ValueError(
                f"unknown activation {activation!r}: expected one of {list(ACTIVATIONS)}"
            )
        self.activation_name = activation
        self.dropout = Dropout(P_drop_ffn)
        self.add_parameter("W_1", xavier_uniform(rng, d_model, d_ff))
        self.add_parameter("b_1", zeros(d_ff))
        self.add_parameter("W_2", xavier_uniform(rng, d_ff, d_model))
        self.add_parameter("b_2", zeros(d_model))

    @property
    def activation(self):
        """The activation's op (its table) (looked up by name: a copy of the module
        calls the same table)."""
        return ACTIVATIONS[self.activation_name]

    def forward(self, x, rng=None):
        """x (B, T, D)  ->  (B, T, D)."""
        p = self.params
        u, c1 = linear.forward(x, p["W_1"], p["b_1"])  # (B, T, F)
        a, c_act = self.activation.forward(u, donate=True)  # u is ours alone
        a, c_drop = self.dropout.forward(a, rng)
        out, c2 = linear.forward(a, p["W_2"], p["b_2"])  # (B, T, D)
        return out, FeedForwardCache(c1, c_act, c_drop, c2)

    def backward(self, dout, cache: FeedForwardCache):
        g = self.grads
        da, dW_2, db_2 = linear.backward(dout, cache.lin2)
        da = self.dropout.backward(da, cache.drop)
        du = self.activation.backward(da, cache.act, donate=True)  # da is fresh
        dx, dW_1, db_1 = linear.backward(du, cache.lin1)
        g["W_2"] += dW_2
        g["b_2"] += db_2
        g["W_1"] += dW_1
        g["b_1"] += db_1
        return dx


__all__ = [
    "AddNorm",
    "OutputBias",
    "Dropout",
    "Embedding",
    "LayerNorm",
    "Linear",
    "PositionalEncoding",
    "PositionwiseFeedForward",
]
