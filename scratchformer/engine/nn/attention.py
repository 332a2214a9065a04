"""Multi-head attention (section 3.2.2): self-attention and encoder-decoder attention,
and the registry of attention variants.

    head_i = Attention(x_q W_q^i, x_kv W_k^i, x_kv W_v^i)
    MultiHead(x_q, x_kv) = Concat(head_1, ..., head_h) W_o

The per-head matrices are stored side by side: ``W_q`` (D, H*Dh), ``W_k`` (D, H*Dh),
``W_v`` (D, H*Dv), ``W_o`` (H*Dv, D); a reshape splits the heads, so there is no Python
loop over heads. No biases, as in the paper's equations; with ``bias=True`` (the config's
``attention_bias``: GPT-2, Marian) each projection has its own, ``b_q`` (H*Dh,), ``b_k``
(H*Dh,), ``b_v`` (H*Dv,), ``b_o`` (D,), added by the linear op (``x W + b``) whose
backward gives ``db = sum of dY over every position``.

The per-head attention between the projections (``attend``) is three steps, each a
call of an op's table:

    1. ``Z = logits(Q, K)``      the paper's ``Q K^T / sqrt(d_k)`` here
    2. ``O = core(Z, V)``        masked softmax, dropout, product with V: the one
                                 attention core (ops/attention.py)
    3. ``O = values(O, A')``     a term of the output that reads the weights again
                                 (none here)

A variant is a subclass registered under its config name (``TransformerConfig.attention``)
that writes only what differs: its ``logits`` / ``logits_backward`` (Shaw's, the skew's),
its ``values`` / ``values_backward`` (Shaw's), or the shape the core sees (local
attention's blocks); the core is never written again, so one implementation of it
(fused, in place, a learner's) serves every variant. A variant says what it needs:

    kind               its name in the config ("dense", "relative", ...)
    causal_only        it needs the causal mask (an encoder cannot use it)
    config_keys        the config fields its constructor reads besides the common ones
    decodes_at_offset  incremental decoding (queries at positions offset ..) works
    blockwise          memory-efficient attention (``attention_block``) applies

Memory-efficient attention (``attention_block`` M) runs the same three steps on blocks
of M queries (their logits at their positions: ``offset``), keeping none of a block's
(M, S) arrays: the backward computes each block's forward again (its dropout drawn
again from a copy of the generator) and back-propagates through it. Only one
(B, H, M, S) block of scores exists at a time, for every variant.

Causality is the module's: a module made with ``causal=True`` adds the causal mask of
its queries' positions to whatever mask it is given (padding), so models pass padding
masks only, and a causal-only variant builds its own band (local) or relies on it (skew).

Dimension key: ``B`` batch, ``T`` queries, ``S`` keys, ``D`` d_model, ``H`` heads,
``Dh`` d_k, ``Dv`` d_v.
"""

from __future__ import annotations

from typing import NamedTuple

from scratchformer.engine import backend, device
from scratchformer.engine.nn.module import Module, xavier_uniform, zeros
from scratchformer.engine.ops.attention import attention_core, causal_mask, dot_product_logits
from scratchformer.engine.ops.linear import linear


class MultiHeadAttentionCache(NamedTuple):
    q_proj: object  # linear's: x_q (B, T, D) @ W_q -> (B, T, H*Dh)
    k_proj: object  # linear's: x_kv (B, S, D) @ W_k -> (B, S, H*Dh)
    v_proj: object  # linear's: x_kv (B, S, D) @ W_v -> (B, S, H*Dv)
    attn: object  # the cache of ``attend`` (an AttendCache, or a variant's own)
    o_proj: object  # linear's: concatenated heads (B, T, H*Dv) @ W_o -> (B, T, D)


class AttendCache(NamedTuple):
    logits: object  # the logits' cache (the dot_product_logits table's, or a variant's)
    core: object  # the attention core's: softmax, dropout, V
    values: object  # the value term's cache (None without one)


class BlockwiseCache(NamedTuple):
    Q: object  # (B, H, T, Dh)
    K: object  # (B, H, S, Dh)
    V: object  # (B, H, S, Dv)
    mask: object  # bool broadcastable to (B, H, T, S), or None
    offset: int  # the position of the first query
    block: int  # M, queries per block
    replay: object  # the dropout generator as it was before block 0 (None: dropout off)


def split_heads(x, h: int):
    """(B, T, H*Dh) -> (B, H, T, Dh)."""
    B, T, HD = x.shape
    return x.reshape(B, T, h, HD // h).transpose(0, 2, 1, 3)


def merge_heads(x):
    """(B, H, T, Dh) -> (B, T, H*Dh); the inverse of ``split_heads``."""
    B, H, T, Dh = x.shape
    return x.transpose(0, 2, 1, 3).reshape(B, T, H * Dh)


#: the attention variants by config name (``register_attention`` adds one)
ATTENTION_VARIANTS: dict[str, type] = {}


def register_attention(cls):
    """Class decorator: make ``cls`` the variant named ``cls.kind`` in configs."""
    ATTENTION_VARIANTS[cls.kind] = cls
    return cls


def attention_variant(kind: str) -> type:
    """The class of the variant named ``kind``."""
    try:
        return ATTENTION_VARIANTS[kind]
    except KeyError:
        raise ValueError(
            f"unknown attention {kind!r}: expected one of {sorted(ATTENTION_VARIANTS)}"
        ) from None


def set_attention_block(module, block) -> None:
    """Switch every attention inside ``module`` whose variant allows it (``blockwise``)
    to memory-efficient attention with query blocks of ``block`` (None: dense)."""
    for _, m in module.named_modules():
        if isinstance(m, MultiHeadAttention) and m.blockwise:
            m.attention_block = None if block is None else int(block)


@register_attention
class MultiHeadAttention(Module):
    """Parameters ``W_q W_k W_v W_o`` (and ``b_q b_k b_v b_o`` with ``bias``); d_k = d_v =
    d_model / h unless given (Table 3 A, B).

    Three separate projections: self-attention passes the same ``x`` as ``x_q`` and
    ``x_kv``, and its gradient is the sum of the three paths through ``W_q``, ``W_k``
    and ``W_v`` (``backward`` returns ``dx_q`` and ``dx_kv``; the caller adds them).
    ``causal=True``: each query sees only the keys at or before its position.
    """

    kind = "dense"
    causal_only = False
    config_keys: tuple = ()
    decodes_at_offset = True
    blockwise = True

    #: query block size of memory-efficient attention (None: dense); see
    #: ``set_attention_block`` and the module doc.
    attention_block: int | None = None

    def __init__(
        self, d_model, h, d_k=None, d_v=None, P_drop_attn=0.0, rng=None, causal: bool = False,
        bias: bool = False,
    ):
        super().__init__()
        if d_k is None and d_model % h:
            raise ValueError(f"d_model={d_model} is not divisible by h={h}: give d_k explicitly")
        if self.causal_only and not causal:
            raise ValueError(
                f"attention={self.kind!r} is causal only (it needs the causal mask) and cannot "
                "serve an encoder: set encoder_attention to one that is not"
            )
        rng = rng or backend.host_rng(0)
        self.h = h
        self.d_k = d_model // h if d_k is None else d_k
        self.d_v = d_model // h if d_v is None else d_v
        self.P_drop_attn = P_drop_attn
        self.causal = bool(causal)
        self.add_parameter("W_q", xavier_uniform(rng, d_model, h * self.d_k))
        self.add_parameter("W_k", xavier_uniform(rng, d_model, h * self.d_k))
        self.add_parameter("W_v", xavier_uniform(rng, d_model, h * self.d_v))
        self.add_parameter("W_o", xavier_uniform(rng, h * self.d_v, d_model))
        if bias:  # zeros, as a Linear's: nothing drawn, the weights above stay as they were
            self.add_parameter("b_q", zeros(h * self.d_k))
            self.add_parameter("b_k", zeros(h * self.d_k))
            self.add_parameter("b_v", zeros(h * self.d_v))
            self.add_parameter("b_o", zeros(d_model))

    @classmethod
    def from_config(cls, cfg, rng, causal: bool = False):
        """The module a ``TransformerConfig`` asks for: its sizes, its attention dropout,
        its biases and the fields named in ``config_keys``."""
        own = {key: getattr(cfg, key) for key in cls.config_keys}
        if cfg.attention_bias:  # passed only when on: a variant's constructor passes it on
            own["bias"] = True
        return cls(
            cfg.d_model,
            cfg.h,
            d_k=cfg.d_k,
            d_v=cfg.d_v,
            P_drop_attn=cfg.P_drop_attn,
            rng=rng,
            causal=causal,
            **own,
        )

    def _project(self, x, name: str):
        """x (B, L, D) @ ``params[name]`` (+ its bias ``b_q|b_k|b_v`` when the module has
        biases), split into heads: (B, H, L, Dh) and its cache."""
        y, cache = linear.forward(x, self.params[name], self.params.get(_bias(name)))
        return split_heads(y, self.h), cache  # (B, H, L, Dh)

    def _project_backward(self, dY, cache, name: str):
        """The reverse of ``_project``: dY (B, H, L, Dh) -> dx (B, L, D); adds dW (and
        db, the sum of merge(dY) over every position)."""
        dx, dW, db = linear.backward(merge_heads(dY), cache)
        self.grads[name] += dW
        if db is not None:
            self.grads[_bias(name)] += db
        return dx

    def _output(self, O):
        """Concatenate the heads and project: O (B, H, T, Dv) -> (B, T, D) (+ ``b_o``)
        and its cache."""
        return linear.forward(merge_heads(O), self.params["W_o"], self.params.get("b_o"))

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

        3. ``dO = split(dout W_o^T)``, ``dW_o += merge(O)^T dout`` (``db_o += sum dout``)
        2. ``dQ, dK, dV = attend_backward(dO)``
        1. ``dx_q = merge(dQ) W_q^T``, ``dx_kv = merge(dK) W_k^T + merge(dV) W_v^T``,
           ``dW_q += x_q^T merge(dQ)`` (likewise ``dW_k``, ``dW_v``; with biases
           ``db_q += sum merge(dQ)`` over positions, likewise ``db_k``, ``db_v``)
        """
        dO_merged, dW_o, db_o = linear.backward(dout, cache.o_proj)  # (B, T, H*Dv)
        self.grads["W_o"] += dW_o
        if db_o is not None:
            self.grads["b_o"] += db_o
        dQ, dK, dV = self.attend_backward(split_heads(dO_merged, self.h), cache.attn)
        dx_q = self._project_backward(dQ, cache.q_proj, "W_q")  # (B, T, D)
        dx_kv = self._project_backward(dK, cache.k_proj, "W_k")  # (B, S, D)
        dx_kv += self._project_backward(dV, cache.v_proj, "W_v")
        return dx_q, dx_kv

    # -- the per-head attention: what variants replace ----------------------------------
    def attention_mask(self, mask, T: int, S: int, offset: int = 0):
        """The mask ``attend`` applies: the caller's (padding, or any bool broadcastable
        to (B, H, T, S)) and, for causal attention, the causal mask of queries at
        positions ``offset ..`` over keys ``0 .. S-1``. One query after every stored key
        (a decoding step) sees them all: nothing to add."""
        if not self.causal or (T == 1 and offset == S - 1):
            return mask
        c = causal_mask(T, S, offset)  # (T, S)
        return c if mask is None else mask & c

    def logits(self, Q, K, offset: int = 0):
        """Step 1: ``Z = Q K^T / sqrt(d_k)`` (B, H, T, S), fresh (the core may work in
        its buffer), and its cache. A variant with other logits replaces this (queries
        at positions ``offset ..``; the paper's logits do not depend on it)."""
        return dot_product_logits.forward(Q, K)

    def logits_backward(self, dZ, cache):
        """``(dQ, dK)``; a variant with parameters of its own adds into ``self.grads``."""
        return dot_product_logits.backward(dZ, cache, donate=True)

    def values(self, O, core, logits_cache):
        """Step 3: ``O`` (B, H, T, Dv) = the core's ``A' V``  ->  the output and a cache
        (a variant's term reads ``attention_core.read(core, "dropped_weights")``)."""
        return O, None

    def values_backward(self, dO, cache):
        """The extra gradient of the post-dropout weights ``A'`` (None: no value term)."""
        return None

    def attend(self, Q, K, V, mask=None, rng=None, offset: int = 0):
        """The per-head attention between the projections. Q (B, H, T, Dh) at positions
        ``offset ..``, K (B, H, S, Dh), V (B, H, S, Dv), mask bool broadcastable to
        (B, H, T, S)  ->  (B, H, T, Dv). With ``attention_block`` set (and more queries
        than a block), the same function computed a block of queries at a time."""
        mask = self.attention_mask(mask, Q.shape[-2], K.shape[-2], offset)
        if self.attention_block and Q.shape[-2] > self.attention_block:
            return self._attend_blockwise(Q, K, V, mask, rng, offset)
        return self.attend_masked(Q, K, V, mask, rng, offset)

    def attend_masked(self, Q, K, V, mask=None, rng=None, offset: int = 0):
        """The three steps with the mask as given (causality already in it):
        1. ``Z = logits(Q, K)``  2. ``O = core(Z, V)``  3. ``O = values(O, A')``."""
        Z, c_logits = self.logits(Q, K, offset)  # (B, H, T, S)
        O, c_core = attention_core.forward(
            Z, V, mask, self.P_drop_attn, rng, donate=True
        )  # (B, H, T, Dv)
        O, c_values = self.values(O, c_core, c_logits)
        return O, AttendCache(c_logits, c_core, c_values)

    def attend_backward(self, dO, cache):
        """Returns ``(dQ, dK, dV)``: 3. ``dA'`` of the value term  2. ``dZ, dV`` of the
        core  1. ``dQ, dK`` of the logits."""
        if isinstance(cache, BlockwiseCache):
            return self._attend_blockwise_backward(dO, cache)
        dA_drop = self.values_backward(dO, cache.values)
        dZ, dV = attention_core.backward(dO, cache.core, dA_drop)
        dQ, dK = self.logits_backward(dZ, cache.logits)
        return dQ, dK, dV

    def weights(self, cache: MultiHeadAttentionCache):
        """The attention weights ``A`` (B, H, T, S) before dropout, of a forward's cache
        (for plots); None where the variant keeps no (T, S) weights (blocks)."""
        if not isinstance(cache.attn, AttendCache) or cache.attn.core is None:
            return None
        return attention_core.read(cache.attn.core, "weights")

    # -- memory-efficient: blocks of queries, each computed again in the backward -------
    def _attend_blockwise(self, Q, K, V, mask, rng, offset: int):
        """``attend_masked`` on blocks of ``attention_block`` queries; nothing of a
        block is kept (see the module doc)."""
        M, T = int(self.attention_block), Q.shape[-2]
        on = rng is not None and self.P_drop_attn > 0.0
        replay = device.fork(rng) if on else None
        O = backend.xp.empty(Q.shape[:-1] + V.shape[-1:], dtype=V.dtype)  # (B, H, T, Dv)
        for i0 in range(0, T, M):
            i1 = min(i0 + M, T)
            O_b, _ = self.attend_masked(
                Q[..., i0:i1, :], K, V, _mask_rows(mask, i0, i1), rng if on else None, offset + i0
            )
            O[..., i0:i1, :] = O_b
        return O, BlockwiseCache(Q, K, V, mask, offset, M, replay)

    def _attend_blockwise_backward(self, dO, cache: BlockwiseCache):
        """Per block, in the forward's order: its forward again (the same dropout masks,
        from the copy of the generator), then its backward; dK and dV add up."""
        Q, K, V, M = cache.Q, cache.K, cache.V, cache.block
        rng = None if cache.replay is None else device.fork(cache.replay)
        xp = backend.xp
        dQ = xp.empty(Q.shape, dtype=dO.dtype)
        dK = xp.zeros(K.shape, dtype=dO.dtype)
        dV = xp.zeros(V.shape, dtype=dO.dtype)
        for i0 in range(0, Q.shape[-2], M):
            i1 = min(i0 + M, Q.shape[-2])
            mask = _mask_rows(cache.mask, i0, i1)
            _, c = self.attend_masked(Q[..., i0:i1, :], K, V, mask, rng, cache.offset + i0)
            dO_b = dO[..., i0:i1, :]
            # attend_backward's steps, each block's weights let go before its logits'
            dA_drop = self.values_backward(dO_b, c.values)
            dZ, dV_b = attention_core.backward(dO_b, c.core, dA_drop)
            dV += dV_b
            c_logits = c.logits
            del c, dV_b, dA_drop  # the block's weights: one (B, H, M, S) array less held
            dQ[..., i0:i1, :], dK_b = self.logits_backward(dZ, c_logits)
            dK += dK_b
            del dZ, dK_b  # not held while the next block is made
        return dQ, dK, dV

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

    def step(self, x_new, lkv, length: int):
        """Incremental self-attention of x_new (R, T, D) at positions ``length ..``:
        project the new positions' keys/values, store them at ``length ..`` of the kv
        buffers (R, H, C, Dh|Dv), attend over positions ``0 .. length + T - 1``."""
        end = length + x_new.shape[1]
        k_new, v_new = self.project_kv(x_new)  # (R, H, T, Dh), (R, H, T, Dv)
        lkv.self_k[:, :, length:end] = k_new
        lkv.self_v[:, :, length:end] = v_new
        K, V = lkv.self_k[:, :, :end], lkv.self_v[:, :, :end]
        return self.infer(x_new, K, V, offset=length)


def _bias(weight: str) -> str:
    """The bias beside a projection's weight: ``W_q`` -> ``b_q``."""
    return "b_" + weight[2:]


def _mask_rows(mask, i0: int, i1: int):
    """The rows ``i0:i1`` of a mask broadcastable to (..., T, S) (a row axis of 1 stays)."""
    if mask is None or mask.ndim < 2 or mask.shape[-2] == 1:
        return mask
    return mask[..., i0:i1, :]


__all__ = [
    "ATTENTION_VARIANTS",
    "AttendCache",
    "BlockwiseCache",
    "MultiHeadAttention",
    "MultiHeadAttentionCache",
    "attention_variant",
    "merge_heads",
    "register_attention",
    "set_attention_block",
    "split_heads",
]
