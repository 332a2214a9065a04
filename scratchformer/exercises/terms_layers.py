"""The layer exercises' backward passes as the derivation's named paths (terms.py): each
sum-rule path of a module (the values' path of dx_kv, a block's residual path, the
sub-layer's path) behind a knob. A layer's backward is linear in each path, so a path
dropped, counted twice or scaled shows in every gradient the same way a term does.
With no knob each equals the engine's to rounding (tests/exercises/test_terms.py).
"""

from __future__ import annotations

from scratchformer.engine.nn.attention import merge_heads, split_heads
from scratchformer.engine.ops.linear import linear
from scratchformer.exercises.terms import Swap, Term, TermSet


# -- multi-head attention ----------------------------------------------------------------
def _mha(k):
    def multi_head_attention_backward(self, dout, cache):
        dO_m, dW_o, _ = linear.backward(dout, cache.o_proj)  # (B, T, H*Dv)
        self.grads["W_o"] += dW_o
        if k.swap("reshape"):
            B, T, HD = dO_m.shape
            dO = dO_m.reshape(B, self.h, T, HD // self.h)
        else:
            dO = split_heads(dO_m, self.h)  # (B, H, T, Dv)
        dQ, dK, dV = self.attend_backward(dO, cache.attn)
        dx_q, dW_q, _ = linear.backward(merge_heads(dQ), cache.q_proj)
        dx_k, dW_k, _ = linear.backward(merge_heads(dK), cache.k_proj)
        dx_v, dW_v, _ = linear.backward(merge_heads(dV), cache.v_proj)
        self.grads["W_q"] += dW_q
        self.grads["W_k"] += dW_k
        self.grads["W_v"] += dW_v
        return k("queries") * dx_q, k("keys") * dx_k + k("values") * dx_v

    return {"multi_head_attention_backward": multi_head_attention_backward}


MULTI_HEAD_ATTENTION = TermSet(
    _mha,
    terms=(Term("values", "dx_kv's path through the values, merge(dV) W_v^T"),
           Term("keys", "dx_kv's path through the keys, merge(dK) W_k^T"),
           Term("queries", "dx_q = merge(dQ) W_q^T")),
    swaps=(Swap("reshape", "dO split into heads by a plain reshape (B, H, T, Dv), without "
                "moving the head axis: positions mixed with heads (split_heads reshapes to "
                "(B, T, H, Dv), then transposes)"),),
    sums={"dx_kv": ("values", "keys"), "dx_q": ("queries",)},
)


# -- the feed-forward network ------------------------------------------------------------
def _ffn(k):
    def ffn_backward(self, dout, cache):
        da, dW_2, db_2 = linear.backward(dout, cache.lin2)  # (B, T, F)
        if not k.swap("no-dropout"):
            da = self.dropout.backward(da, cache.drop)
        du = da if k.swap("no-activation") else self.activation.backward(da, cache.act)
        dx, dW_1, db_1 = linear.backward(du, cache.lin1)
        self.grads["W_1"] += dW_1
        self.grads["b_1"] += db_1
        self.grads["W_2"] += dW_2
        self.grads["b_2"] += db_2
        return k("dx") * dx

    return {"ffn_backward": ffn_backward}


FFN = TermSet(
    _ffn,
    terms=(Term("dx", "dx = du W_1^T"),),
    swaps=(Swap("no-dropout", "the hidden layer's dropout left out of the backward: da' used "
                "as da"),
           Swap("no-activation", "the activation's backward left out: da used as du")),
    sums={"dx": ("dx",)},
)


# -- Add & Norm --------------------------------------------------------------------------
def _add_norm(k):
    def add_norm_exit_backward(self, dy, cache):
        if self.norm_first:
            dr = dy
        else:
            dr = self._norm_backward(dy, cache.norm)
        ds = dr if k.swap("ds-no-dropout") else self.dropout.backward(dr, cache.dropout)
        if k.swap("residual-dy") and not self.norm_first:
            return dy, ds
        if k.swap("residual-dropout"):
            return ds, ds
        return k("residual") * dr, ds

    def add_norm_enter_backward(self, ds_in, cache):
        if self.norm_first and not k.swap("enter-identity"):
            return self._norm_backward(ds_in, cache.norm)
        return ds_in

    return {"add_norm_exit_backward": add_norm_exit_backward,
            "add_norm_enter_backward": add_norm_enter_backward}


ADD_NORM = TermSet(
    _add_norm,
    terms=(Term("residual", "the residual path's dx (dr, the LayerNorm's backward of dy in "
                "post-LN, dy itself in pre-LN)"),),
    swaps=(Swap("ds-no-dropout", "ds = dr: the residual dropout's backward left out of the "
                "sub-layer's path (s reached the sum through Dropout(s))"),
           Swap("residual-dy", "post-LN: the residual path given dy, where it is the "
                "LayerNorm's backward dr"),
           Swap("residual-dropout", "the residual dropout's mask applied to the residual path "
                "too: only s went through the dropout"),
           Swap("enter-identity", "pre-LN: enter's backward skips the LayerNorm (it is the "
                "identity in post-LN only)")),
)


# -- the encoder and decoder layers ------------------------------------------------------
def _encoder(k):
    def encoder_layer_backward(self, dout, cache):
        c = cache.ffn
        dx, df = self.ffn_norm.exit_backward(dout, c.exit)
        sub = self.ffn_norm.enter_backward(k("ffn-sub") * self.ffn.backward(df, c.sublayer),
                                           c.enter)
        dx = k("ffn-residual") * dx + sub
        c = cache.self_attn
        dx_res, da = self.self_attn_norm.exit_backward(dx, c.exit)
        da_q, da_kv = self.self_attn.backward(da, c.sublayer)
        sub = self.self_attn_norm.enter_backward(
            k("attn-sub") * (k("queries") * da_q + k("kv") * da_kv), c.enter)
        return k("attn-residual") * dx_res + sub

    return {"encoder_layer_backward": encoder_layer_backward}


_KV = ("self-attention's da_kv (its keys' and values' path: the layer's input fed x_q and "
       "x_kv both)")
ENCODER_LAYER = TermSet(
    _encoder,
    terms=(Term("kv", _KV), Term("queries", "self-attention's da_q (its queries' path)"),
           Term("ffn-residual", "the FFN block's residual path"),
           Term("ffn-sub", "the FFN sub-layer's path (enter_backward(ffn.backward(df)))"),
           Term("attn-residual", "the self-attention block's residual path"),
           Term("attn-sub", "the self-attention sub-layer's path (enter_backward(da_q + "
                "da_kv))")),
    sums={"dx": ("attn-residual", "attn-sub")},
)


def _decoder(k):
    def decoder_layer_backward(self, dout, cache):
        c = cache.ffn
        dy, df = self.ffn_norm.exit_backward(dout, c.exit)
        sub = self.ffn_norm.enter_backward(k("ffn-sub") * self.ffn.backward(df, c.sublayer),
                                           c.enter)
        dy = k("ffn-residual") * dy + sub
        c = cache.cross_attn
        dy_res, dx = self.cross_attn_norm.exit_backward(dy, c.exit)
        dx_q, dmemory = self.cross_attn.backward(dx, c.sublayer)
        sub = self.cross_attn_norm.enter_backward(k("cross-sub") * dx_q, c.enter)
        dy = k("cross-residual") * dy_res + sub
        c = cache.self_attn
        dy_res, da = self.self_attn_norm.exit_backward(dy, c.exit)
        da_q, da_kv = self.self_attn.backward(da, c.sublayer)
        sub = self.self_attn_norm.enter_backward(
            k("self-sub") * (k("queries") * da_q + k("kv") * da_kv), c.enter)
        return k("self-residual") * dy_res + sub, k("dmemory") * dmemory

    return {"decoder_layer_backward": decoder_layer_backward}


DECODER_LAYER = TermSet(
    _decoder,
    terms=(Term("kv", _KV), Term("queries", "self-attention's da_q (its queries' path)"),
           Term("dmemory", "dmemory, cross-attention's dx_kv"),
           Term("ffn-residual", "the FFN block's residual path"),
           Term("ffn-sub", "the FFN sub-layer's path"),
           Term("cross-residual", "the cross-attention block's residual path"),
           Term("cross-sub", "the cross-attention sub-layer's path (enter_backward(dx_q))"),
           Term("self-residual", "the self-attention block's residual path"),
           Term("self-sub", "the self-attention sub-layer's path (enter_backward(da_q + "
                "da_kv))")),
    sums={"dy": ("self-residual", "self-sub"), "dmemory": ("dmemory",)},
)

__all__ = ["ADD_NORM", "DECODER_LAYER", "ENCODER_LAYER", "FFN", "MULTI_HEAD_ATTENTION"]
