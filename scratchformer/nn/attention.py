"""Multi-head attention (section 3.2.2): self-attention and encoder-decoder attention.

    head_i = Attention(x_q W_q^i, x_kv W_k^i, x_kv W_v^i)
    MultiHead(x_q, x_kv) = Concat(head_1, ..., head_h) W_o

The per-head matrices are stored side by side: ``W_q`` (D, H*Dh), ``W_k`` (D, H*Dh),
``W_v`` (D, H*Dv), ``W_o`` (H*Dv, D); a reshape splits the heads, so there is no Python
loop over heads. No biases, as in the paper's equations.

Dimension key: ``B`` batch, ``T`` queries, ``S`` keys, ``D`` d_model, ``H`` heads,
``Dh`` d_k, ``Dv`` d_v.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from scratchformer import backend
from scratchformer.backend import xp
from scratchformer.nn.module import Module, xavier_uniform
from scratchformer.ops.attention import (
    AttentionCache,
    attention_backward,
    attention_forward,
    causal_mask,
)
from scratchformer.ops.blockwise_attention import (
    BlockwiseAttentionCache,
    blockwise_attention_backward,
    blockwise_attention_forward,
)
from scratchformer.ops.linear import LinearCache, linear_backward, linear_forward
from scratchformer.ops.softmax import softmax_forward


class MultiHeadAttentionCache(NamedTuple):
    q_proj: LinearCache  # x_q (B, T, D) @ W_q; self-attention: x (B, T, D) @ W_qkv
    k_proj: LinearCache  # x_kv (B, S, D) @ [W_k | W_v]; None for self-attention
    v_proj: LinearCache  # None (kept for the field layout: K and V are one product)
    attn: AttentionCache  # per-head attention, Q (B, H, T, Dh) ...
    o_proj: LinearCache  # concatenated heads (B, T, H*Dv) @ W_o


def split_heads(x, h: int):
    """(B, T, H*Dh) -> (B, H, T, Dh)."""
    B, T, HD = x.shape
    return x.reshape(B, T, h, HD // h).transpose(0, 2, 1, 3)


def merge_heads(x):
    """(B, H, T, Dh) -> (B, T, H*Dh); the inverse of ``split_heads``."""
    B, H, T, Dh = x.shape
    return x.transpose(0, 2, 1, 3).reshape(B, T, H * Dh)


def _merge_heads_into(out, x):
    """Write (B, H, T, Dh) ``x`` into ``out`` (B, T, H*Dh), a slice of a wider buffer."""
    B, H, T, Dh = x.shape
    out.reshape(B, T, H, Dh)[...] = x.transpose(0, 2, 1, 3)


def set_attention_block(module, block) -> None:
    """Switch every plain ``MultiHeadAttention`` inside ``module`` to memory-efficient
    (blockwise) attention with query blocks of ``block`` (None: dense). Variants that
    replace ``attend`` (relative, local) keep their own core and are left as they are."""
    for _, m in module.named_modules():
        if isinstance(m, MultiHeadAttention) and type(m).attend is MultiHeadAttention.attend:
            m.attention_block = None if block is None else int(block)


def self_attention_input_grad(dx_q, dx_kv):
    """The gradient of x in self-attention ``MHA(x, x)``: the sum of both uses of x
    (``dx_kv`` is None when the fused path already summed them into ``dx_q``)."""
    return dx_q if dx_kv is None else dx_q + dx_kv


class MultiHeadAttention(Module):
    """Parameters ``W_q W_k W_v W_o``; d_k = d_v = d_model / h unless given (Table 3 A, B).

    Fused projections: ``W_q``, ``W_k`` and ``W_v`` are column blocks (views) of one
    (D, 2*H*Dh + H*Dv) buffer ``[W_q | W_k | W_v]``, and their gradients views of one
    gradient buffer, so self-attention does one (B*T, D) x (D, 3 H Dh) product forward
    and two backward (instead of three and six), and cross-attention fuses K and V.
    Parameters are only ever updated in place, which keeps the views valid; an array
    replaced from outside (``astype``, a deep copy, ``params[...] = new``) is detected
    and the product falls back to concatenating on the fly until ``_rebuild`` re-fuses.
    """

    #: query block size of memory-efficient attention (None: dense); see
    #: ``set_attention_block`` and ops/blockwise_attention.py.
    attention_block: int | None = None

    def __init__(self, d_model, h, d_k=None, d_v=None, P_drop_attn=0.0, rng=None):
        super().__init__()
        if d_k is None and d_model % h:
            raise ValueError(f"d_model={d_model} is not divisible by h={h}: give d_k explicitly")
        rng = rng or backend.host_rng(0)
        self.h = h
        self.d_k = d_model // h if d_k is None else d_k
        self.d_v = d_model // h if d_v is None else d_v
        self.P_drop_attn = P_drop_attn
        self.add_parameter("W_q", xavier_uniform(rng, d_model, h * self.d_k))
        self.add_parameter("W_k", xavier_uniform(rng, d_model, h * self.d_k))
        self.add_parameter("W_v", xavier_uniform(rng, d_model, h * self.d_v))
        self.add_parameter("W_o", xavier_uniform(rng, h * self.d_v, d_model))
        self._rebuild()

    # -- the fused [W_q | W_k | W_v] buffer ----------------------------------------------
    _QKV = ("W_q", "W_k", "W_v")

    def _rebuild(self) -> None:
        """(Re)fuse: copy W_q, W_k, W_v (and their gradients) into one buffer each and
        make the entries of ``params``/``grads`` views of it. Called at construction and
        after ``astype``/unpickling, when no one else holds the arrays being replaced."""
        p, g = self.params, self.grads
        W = xp.concatenate([p[k] for k in self._QKV], axis=1)  # (D, 2 H Dh + H Dv)
        G = xp.concatenate([g[k] for k in self._QKV], axis=1)
        a, b = self.h * self.d_k, 2 * self.h * self.d_k
        for store, buf in ((p, W), (g, G)):
            store["W_q"], store["W_k"], store["W_v"] = buf[:, :a], buf[:, a:b], buf[:, b:]
        self.__dict__["_fused"] = {"W": W, "G": G}

    def __setstate__(self, state):  # copy.deepcopy / pickle: views come back as copies
        self.__dict__.update(state)
        if "_fused" in state and not (self._is_fused("params") and self._is_fused("grads")):
            # Own dicts first: a shallow copy shares the original's, which must keep its views.
            self.__dict__["params"], self.__dict__["grads"] = dict(self.params), dict(self.grads)
            self._rebuild()

    def _is_fused(self, store: str) -> bool:
        f = self.__dict__.get("_fused")
        if f is None:
            return False
        buf = f["W" if store == "params" else "G"]
        d = getattr(self, store)
        return all(d[k].base is buf for k in self._QKV)

    def _weights(self, names):
        """The column-concatenation of the named projections, (D, width): a view of the
        fused buffer when fused, else concatenated now."""
        if self._is_fused("params"):
            W = self._fused["W"]
            a, b = self.h * self.d_k, 2 * self.h * self.d_k
            lo = {"W_q": 0, "W_k": a, "W_v": b}[names[0]]
            hi = {"W_q": a, "W_k": b, "W_v": W.shape[1]}[names[-1]]
            return W[:, lo:hi]
        p = self.params
        return p[names[0]] if len(names) == 1 else xp.concatenate([p[k] for k in names], 1)

    def _add_grads(self, names, dW) -> None:
        """``grads[names] += dW`` column block by column block (one add when fused)."""
        if self._is_fused("grads"):
            G = self._fused["G"]
            a, b = self.h * self.d_k, 2 * self.h * self.d_k
            lo = {"W_q": 0, "W_k": a, "W_v": b}[names[0]]
            G[:, lo : lo + dW.shape[1]] += dW
            return
        col = 0
        for k in names:
            w = self.grads[k].shape[1]
            self.grads[k] += dW[:, col : col + w]
            col += w

    def _split_kv(self, kv):
        """(B, S, H*Dh + H*Dv) -> K (B, H, S, Dh), V (B, H, S, Dv), views."""
        hk = self.h * self.d_k
        return split_heads(kv[..., :hk], self.h), split_heads(kv[..., hk:], self.h)

    def forward(self, x_q, x_kv, mask=None, rng=None):
        """x_q (B, T, D), x_kv (B, S, D), mask bool broadcastable to (B, H, T, S)  ->  (B, T, D).

        Self-attention passes the same array as ``x_q`` and ``x_kv`` (then Q, K and V
        come from one fused product).
        """
        p, hk = self.params, self.h * self.d_k
        if x_q is x_kv:
            qkv, c_q = linear_forward(x_q, self._weights(self._QKV))  # (B, T, 2HDh + HDv)
            c_k = None
            Q = split_heads(qkv[..., :hk], self.h)  # (B, H, T, Dh), a view
            K, V = self._split_kv(qkv[..., hk:])
        else:
            q, c_q = linear_forward(x_q, self._weights(("W_q",)))  # (B, T, H*Dh)
            kv, c_k = linear_forward(x_kv, self._weights(("W_k", "W_v")))  # (B, S, ...)
            Q = split_heads(q, self.h)
            K, V = self._split_kv(kv)
        O, c_attn = self.attend(Q, K, V, mask, rng)  # (B, H, T, Dv)
        out, c_o = linear_forward(merge_heads(O), p["W_o"])  # (B, T, D)
        return out, MultiHeadAttentionCache(c_q, c_k, None, c_attn, c_o)

    def backward(self, dout, cache: MultiHeadAttentionCache):
        """Returns ``(dx_q, dx_kv)``. For self-attention (``x_q is x_kv``, one fused
        product) the whole input gradient comes back as ``dx_q`` and ``dx_kv`` is None;
        ``self_attention_input_grad`` turns either form into the input's gradient."""
        dO_merged, dW_o, _ = linear_backward(dout, cache.o_proj)  # (B, T, H*Dv)
        dQ, dK, dV = self.attend_backward(split_heads(dO_merged, self.h), cache.attn)
        B, H, T, Dh = dQ.shape
        S, hk, hv = dK.shape[2], self.h * self.d_k, self.h * self.d_v
        self.grads["W_o"] += dW_o
        if cache.k_proj is None:  # self-attention: one (B, T, 2HDh + HDv) gradient
            dqkv = xp.empty((B, T, 2 * hk + hv), dtype=dQ.dtype)
            _merge_heads_into(dqkv[..., :hk], dQ)
            _merge_heads_into(dqkv[..., hk : 2 * hk], dK)
            _merge_heads_into(dqkv[..., 2 * hk :], dV)
            dx, dW, _ = linear_backward(dqkv, cache.q_proj)
            self._add_grads(self._QKV, dW)
            return dx, None
        dx_q, dW_q, _ = linear_backward(merge_heads(dQ), cache.q_proj)
        dkv = xp.empty((B, S, hk + hv), dtype=dK.dtype)
        _merge_heads_into(dkv[..., :hk], dK)
        _merge_heads_into(dkv[..., hk:], dV)
        dx_kv, dW_kv, _ = linear_backward(dkv, cache.k_proj)
        self._add_grads(("W_q",), dW_q)
        self._add_grads(("W_k", "W_v"), dW_kv)
        return dx_q, dx_kv

    # -- the attention core: what variants (relative, local) replace -------------------
    def attend(self, Q, K, V, mask=None, rng=None):
        """The per-head attention core between the projections: scaled dot-product
        attention here. Q (B, H, T, Dh), K (B, H, S, Dh), V (B, H, S, Dv) -> (B, H, T, Dv).

        With ``attention_block`` set, the memory-efficient blockwise form (the same
        function; only a (B, H, block, S) slice of the scores at a time).

        Subclasses (relative positions, local blocks) override ``attend`` and
        ``attend_backward`` and keep the projections, heads and ``W_o`` as they are.
        """
        if self.attention_block:
            return blockwise_attention_forward(
                Q, K, V, mask, self.attention_block, self.P_drop_attn, rng
            )
        return attention_forward(Q, K, V, mask, self.P_drop_attn, rng)

    def attend_backward(self, dO, cache):
        """Returns ``(dQ, dK, dV)``; a subclass with parameters of its own adds into
        ``self.grads`` here."""
        if isinstance(cache, BlockwiseAttentionCache):
            return blockwise_attention_backward(dO, cache)
        return attention_backward(dO, cache)

    # -- inference (decoding): no dropout, no backward caches ---------------------------
    def project_kv(self, x_kv):
        """The keys and values of ``x_kv``, split into heads, for ``infer``.

        x_kv (B, S, D)  ->  K (B, H, S, Dh), V (B, H, S, Dv).

        Decoding calls this once per new target position (self-attention, appended to
        the kv) and once per sentence for the encoder output (cross-attention).
        """
        return self._split_kv(x_kv @ self._weights(("W_k", "W_v")))  # one product

    def append_kv(self, x_new, lkv, length: int):
        """Decoding bookkeeping of self-attention: project the keys/values of the T new
        positions x_new (R, T, D), store them at ``length ..`` of the kv buffers, and
        return the filled K (R, H, length+T, Dh), V (R, H, length+T, Dv) and the causal
        mask of the new block (None for one query, which sees every stored key)."""
        T = x_new.shape[1]
        end = length + T
        k_new, v_new = self.project_kv(x_new)  # (R, H, T, Dh), (R, H, T, Dv)
        lkv.self_k[:, :, length:end] = k_new
        lkv.self_v[:, :, length:end] = v_new
        mask = None if T == 1 else causal_mask(T, end, offset=length)  # (T, end)
        return lkv.self_k[:, :, :end], lkv.self_v[:, :, :end], mask

    def infer(self, x_q, K, V, mask=None):
        """Attention of the queries of ``x_q`` over given keys and values, inference only.

        ``softmax(Q K^T / sqrt(Dh), mask) V W_o`` with ``Q = split(x_q W_q)``: the same
        math as ``forward`` with dropout off, but keys/values come from the caller (the
        decoding kv) and nothing is kept for a backward pass.

        x_q (B, T, D), K (B, H, S, Dh), V (B, H, S, Dv), mask bool broadcastable to
        (B, H, T, S)  ->  (B, T, D).
        """
        Q = split_heads(x_q @ self.params["W_q"], self.h)  # (B, H, T, Dh)
        if self.attention_block:  # long inputs: never the whole (B, H, T, S) scores
            O, _ = blockwise_attention_forward(Q, K, V, mask, self.attention_block)
            return merge_heads(O) @ self.params["W_o"]
        scores = (Q @ K.swapaxes(-1, -2)) * (1.0 / math.sqrt(self.d_k))  # (B, H, T, S)
        A, _ = softmax_forward(scores, mask)  # the SoftmaxCache is only A itself
        return merge_heads(A @ V) @ self.params["W_o"]  # (B, T, H*Dv) -> (B, T, D)
