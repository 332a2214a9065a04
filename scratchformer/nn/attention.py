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

from typing import NamedTuple

from scratchformer import backend
from scratchformer.nn.module import Module, xavier_uniform
from scratchformer.ops.attention import (
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


class MultiHeadAttentionCache(NamedTuple):
    q_proj: LinearCache  # x_q (B, T, D) @ W_q -> (B, T, H*Dh)
    k_proj: LinearCache  # x_kv (B, S, D) @ W_k -> (B, S, H*Dh)
    v_proj: LinearCache  # x_kv (B, S, D) @ W_v -> (B, S, H*Dv)
    attn: object  # the attention core's cache (AttentionCache for dense attention)
    o_proj: LinearCache  # concatenated heads (B, T, H*Dv) @ W_o -> (B, T, D)


def split_heads(x, h: int):
    """(B, T, H*Dh) -> (B, H, T, Dh)."""
    B, T, HD = x.shape
    return x.reshape(B, T, h, HD // h).transpose(0, 2, 1, 3)


def merge_heads(x):
    """(B, H, T, Dh) -> (B, T, H*Dh); the inverse of ``split_heads``."""
    B, H, T, Dh = x.shape
    return x.transpose(0, 2, 1, 3).reshape(B, T, H * Dh)


def set_attention_block(module, block) -> None:
    """Switch every plain ``MultiHeadAttention`` inside ``module`` to memory-efficient
    (blockwise) attention with query blocks of ``block`` (None: dense). Variants that
    replace ``attend`` (relative, local) keep their own core and are left as they are."""
    for _, m in module.named_modules():
        if isinstance(m, MultiHeadAttention) and type(m).attend is MultiHeadAttention.attend:
            m.attention_block = None if block is None else int(block)


class MultiHeadAttention(Module):
    """Parameters ``W_q W_k W_v W_o``; d_k = d_v = d_model / h unless given (Table 3 A, B).

    Three separate projections: self-attention passes the same ``x`` as ``x_q`` and
    ``x_kv``, and its gradient is the sum of the three paths through ``W_q``, ``W_k``
    and ``W_v`` (``backward`` returns ``dx_q`` and ``dx_kv``; the caller adds them).
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

    def _project(self, x, name: str):
        """x (B, L, D) @ ``params[name]``, split into heads: (B, H, L, Dh) and its cache."""
        y, cache = linear_forward(x, self.params[name])  # (B, L, H*Dh)
        return split_heads(y, self.h), cache

    def _project_backward(self, dY, cache: LinearCache, name: str):
        """The reverse of ``_project``: dY (B, H, L, Dh) -> dx (B, L, D); adds dW."""
        dx, dW, _ = linear_backward(merge_heads(dY), cache)
        self.grads[name] += dW
        return dx

    def _output(self, O):
        """Concatenate the heads and project: O (B, H, T, Dv) -> (B, T, D) and its cache."""
        return linear_forward(merge_heads(O), self.params["W_o"])

    def forward(self, x_q, x_kv, mask=None, rng=None):
        """x_q (B, T, D), x_kv (B, S, D), mask bool broadcastable to (B, H, T, S)  ->  (B, T, D).

        1. ``Q = split(x_q W_q)``, ``K = split(x_kv W_k)``, ``V = split(x_kv W_v)``
        2. ``O = attend(Q, K, V)``: scaled dot-product attention per head
        3. ``out = merge(O) W_o``
        """
        Q, c_q = self._project(x_q, "W_q")  # (B, H, T, Dh)
        K, c_k = self._project(x_kv, "W_k")  # (B, H, S, Dh)
        V, c_v = self._project(x_kv, "W_v")  # (B, H, S, Dv)
        O, c_attn = self.attend(Q, K, V, mask, rng)  # (B, H, T, Dv)
        out, c_o = self._output(O)  # (B, T, D)
        return out, MultiHeadAttentionCache(c_q, c_k, c_v, c_attn, c_o)

    def backward(self, dout, cache: MultiHeadAttentionCache):
        """Returns ``(dx_q, dx_kv)``; for self-attention the input's gradient is their sum.

        3. ``dO = split(dout W_o^T)``, ``dW_o += merge(O)^T dout``
        2. ``dQ, dK, dV = attend_backward(dO)``
        1. ``dx_q = merge(dQ) W_q^T``, ``dx_kv = merge(dK) W_k^T + merge(dV) W_v^T``,
           ``dW_q += x_q^T merge(dQ)`` (likewise ``dW_k``, ``dW_v``)
        """
        dO_merged, dW_o, _ = linear_backward(dout, cache.o_proj)  # (B, T, H*Dv)
        self.grads["W_o"] += dW_o
        dQ, dK, dV = self.attend_backward(split_heads(dO_merged, self.h), cache.attn)
        dx_q = self._project_backward(dQ, cache.q_proj, "W_q")  # (B, T, D)
        dx_kv = self._project_backward(dK, cache.k_proj, "W_k")  # (B, S, D)
        dx_kv += self._project_backward(dV, cache.v_proj, "W_v")
        return dx_q, dx_kv

    # -- the attention core: what variants (relative, local) replace -------------------
    def attend(self, Q, K, V, mask=None, rng=None, offset: int = 0):
        """The per-head attention core between the projections: scaled dot-product
        attention here. Q (B, H, T, Dh), K (B, H, S, Dh), V (B, H, S, Dv) -> (B, H, T, Dv).

        ``offset`` is the position of the first query (incremental decoding); dense
        attention does not depend on positions. With ``attention_block`` set, the
        memory-efficient blockwise form (the same function; only a (B, H, block, S)
        slice of the scores at a time).

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

    # -- inference (decoding): the same forward pieces, dropout off, caches dropped -----
    def project_kv(self, x_kv):
        """The keys and values of ``x_kv``, split into heads, for ``infer``.

        x_kv (B, S, D)  ->  K (B, H, S, Dh), V (B, H, S, Dv).

        Decoding calls this once per new target position (self-attention, appended to
        the kv) and once per sentence for the encoder output (cross-attention).
        """
        return self._project(x_kv, "W_k")[0], self._project(x_kv, "W_v")[0]

    def infer(self, x_q, K, V, mask=None, offset: int = 0):
        """Attention of the queries of ``x_q`` over given keys and values, inference only:
        ``forward``'s steps 1 (queries only), 2 and 3 with dropout off, keys/values from
        the caller (the decoding kv) and every backward cache dropped.

        x_q (B, T, D) at positions ``offset ..``, K (B, H, S, Dh), V (B, H, S, Dv), mask
        bool broadcastable to (B, H, T, S)  ->  (B, T, D).
        """
        Q, _ = self._project(x_q, "W_q")  # (B, H, T, Dh)
        O, _ = self.attend(Q, K, V, mask, offset=offset)  # (B, H, T, Dv)
        return self._output(O)[0]

    def kv_slots(self, capacity: int) -> int:
        """Key/value slots a decoding row needs for ``capacity`` positions (all of them;
        local attention keeps a ring of fewer)."""
        return capacity

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

    def step(self, x_new, lkv, length: int):
        """Incremental self-attention of x_new (R, T, D) at positions ``length ..``:
        store their keys/values, attend over positions ``0 .. length + T - 1``."""
        K, V, mask = self.append_kv(x_new, lkv, length)
        return self.infer(x_new, K, V, mask, offset=length)
