# ruff: noqa: E501
"""Write the set of wrong backward passes: each a learner's exercise file.

Every pass here was derived from docs/exercises.md and docs/derivations.md alone (the
formulas a learner reads), as a learner might get one term, one factor or one input
wrong. Each file is the stub ``scratchformer exercise start NAME`` writes, with the body
to fill in written (the other functions of a two-function exercise written right).

    python benchmarks/results/2026-11-28/exercises-names/make_wrong_passes.py

writes wrong_passes/NN_<exercise>_<what>.py and wrong_passes/manifest.json (each pass's
intended mistake in words, and the words that name it or point at it, used by
run_wrong_passes.py to classify what ``exercise check`` says).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "wrong_passes"
ROOT = HERE.parents[3]

# -- right bodies, written from the derivations -------------------------------------------
RIGHT = {
    ("linear", "linear_backward"): """
        x, W = cache.x, cache.W
        d_in, d_out = W.shape
        x2 = x.reshape(-1, d_in)
        dout2 = dout.reshape(-1, d_out)
        dx = (dout2 @ W.T).reshape(x.shape)
        dW = x2.T @ dout2
        db = dout2.sum(axis=0) if cache.has_bias else None
        return dx, dW, db
    """,
    ("relu", "relu_backward"): """
        return dout * cache.positive
    """,
    ("gelu", "gelu_backward"): """
        x, t = cache.x, cache.tanh_u
        du_dx = _GELU_C * (1.0 + 3.0 * _GELU_A * x * x)
        return dout * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du_dx)
    """,
    ("embedding", "embedding_backward"): """
        d = dout.shape[-1]
        dE = xp.zeros((cache.vocab_size, d), dtype=dout.dtype)
        xp.add.at(dE, cache.ids.reshape(-1), dout.reshape(-1, d))
        if cache.pad_id is not None:
            dE[cache.pad_id] = 0
        return dE
    """,
    ("softmax", "softmax_backward"): """
        P = cache.P
        return P * (dout - (dout * P).sum(axis=-1, keepdims=True))
    """,
    ("layernorm", "layernorm_backward"): """
        xhat, rstd, gamma = cache.xhat, cache.rstd, cache.gamma
        dxhat = dout * gamma
        mean_dxhat = dxhat.mean(axis=-1, keepdims=True)
        mean_dxhat_xhat = (dxhat * xhat).mean(axis=-1, keepdims=True)
        dx = rstd * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat)
        lead = tuple(range(dout.ndim - 1))
        dgamma = (dout * xhat).sum(axis=lead)
        dbeta = dout.sum(axis=lead)
        return dx, dgamma, dbeta
    """,
    ("dropout", "dropout_backward"): """
        if cache.mask is None:
            return dout
        return dout * cache.mask * cache.scale
    """,
    ("cross_entropy", "cross_entropy_backward"): """
        V = cache.V
        P = cache.P.reshape(-1, V)
        tgt = cache.target.reshape(-1)
        keep = cache.keep.reshape(-1)
        off = cache.eps / (V - 1) if cache.eps else 0.0
        q = xp.full_like(P, off)
        q[xp.arange(tgt.shape[0]), tgt] = 1.0 - cache.eps
        r = keep * dout / max(int(cache.n_tokens), 1)
        d = (P - q) * r[:, None]
        return d.reshape(cache.P.shape)
    """,
    ("attention", "attention_core_backward"): """
        P = cache.softmax.P
        dA = dO @ cache.V.swapaxes(-1, -2)  # (B, H, T, S)
        if dA_drop is not None:
            dA = dA + dA_drop
        dV = cache.A_drop.swapaxes(-1, -2) @ dO  # (B, H, S, Dv)
        if cache.dropout.mask is not None:
            dA = dA * cache.dropout.mask * cache.dropout.scale
        dZ = P * (dA - (dA * P).sum(axis=-1, keepdims=True))
        return dZ, dV
    """,
    ("attention", "dot_product_logits_backward"): """
        dZs = dZ * cache.scale
        dQ = dZs @ cache.K
        dK = dZs.swapaxes(-1, -2) @ cache.Q
        return dQ, dK
    """,
    ("multi_head_attention", "multi_head_attention_backward"): """
        dO_m, dW_o, _ = linear.backward(dout, cache.o_proj)
        self.grads["W_o"] += dW_o
        dQ, dK, dV = self.attend_backward(split_heads(dO_m, self.h), cache.attn)
        dx_q, dW_q, _ = linear.backward(merge_heads(dQ), cache.q_proj)
        dx_k, dW_k, _ = linear.backward(merge_heads(dK), cache.k_proj)
        dx_v, dW_v, _ = linear.backward(merge_heads(dV), cache.v_proj)
        self.grads["W_q"] += dW_q
        self.grads["W_k"] += dW_k
        self.grads["W_v"] += dW_v
        return dx_q, dx_k + dx_v
    """,
    ("ffn", "ffn_backward"): """
        da, dW_2, db_2 = linear.backward(dout, cache.lin2)
        da = self.dropout.backward(da, cache.drop)
        du = self.activation.backward(da, cache.act)
        dx, dW_1, db_1 = linear.backward(du, cache.lin1)
        self.grads["W_1"] += dW_1
        self.grads["b_1"] += db_1
        self.grads["W_2"] += dW_2
        self.grads["b_2"] += db_2
        return dx
    """,
    ("add_norm", "add_norm_exit_backward"): """
        if self.norm_first:
            dr = dy
        else:
            dr = self._norm_backward(dy, cache.norm)
        ds = self.dropout.backward(dr, cache.dropout)
        return dr, ds
    """,
    ("add_norm", "add_norm_enter_backward"): """
        if self.norm_first:
            return self._norm_backward(ds_in, cache.norm)
        return ds_in
    """,
    ("encoder_layer", "encoder_layer_backward"): """
        ca, cf = cache.self_attn, cache.ffn
        dx, df = self.ffn_norm.exit_backward(dout, cf.exit)
        dx = dx + self.ffn_norm.enter_backward(self.ffn.backward(df, cf.sublayer), cf.enter)
        dx, da = self.self_attn_norm.exit_backward(dx, ca.exit)
        da_q, da_kv = self.self_attn.backward(da, ca.sublayer)
        return dx + self.self_attn_norm.enter_backward(da_q + da_kv, ca.enter)
    """,
    ("decoder_layer", "decoder_layer_backward"): """
        cs, cx, cf = cache.self_attn, cache.cross_attn, cache.ffn
        dy, df = self.ffn_norm.exit_backward(dout, cf.exit)
        dy = dy + self.ffn_norm.enter_backward(self.ffn.backward(df, cf.sublayer), cf.enter)
        dy, dxs = self.cross_attn_norm.exit_backward(dy, cx.exit)
        dx_q, dmemory = self.cross_attn.backward(dxs, cx.sublayer)
        dy = dy + self.cross_attn_norm.enter_backward(dx_q, cx.enter)
        dy, da = self.self_attn_norm.exit_backward(dy, cs.exit)
        da_q, da_kv = self.self_attn.backward(da, cs.sublayer)
        dy = dy + self.self_attn_norm.enter_backward(da_q + da_kv, cs.enter)
        return dy, dmemory
    """,
    ("shaw", "shaw_logits_backward"): """
        Q, K, E_k, idx = cache.Q, cache.K, cache.E_k, cache.idx
        R = E_k.shape[0]
        dZs = dZ * cache.scale
        dQ = dZs @ K
        dK = dZs.swapaxes(-1, -2) @ Q
        onehot = (idx[..., None] == xp.arange(R)).astype(dZ.dtype)  # (T, S, R)
        dR = xp.einsum("...ts,tsr->...tr", dZs, onehot)  # scatter: buckets add up
        dQ = dQ + dR @ E_k
        dE_k = dR.reshape(-1, R).T @ Q.reshape(-1, Q.shape[-1])
        return dQ, dK, dE_k
    """,
    ("skew", "skew_logits_backward"): """
        Q, K, E_r = cache.Q, cache.K, cache.E_r
        n_rows = E_r.shape[-2]
        dZs = dZ * cache.scale
        dQ = dZs @ K
        dK = dZs.swapaxes(-1, -2) @ Q
        Q4 = Q.reshape(-1, *Q.shape[-3:])  # (B, H, T, Dh)
        if cache.Er_L is not None:
            *lead, L, _ = dZs.shape
            d_padded = xp.zeros((*lead, L + 1, L), dtype=dZs.dtype)
            d_padded[..., 1:, :] = dZs
            drel = d_padded.reshape(*lead, L, L + 1)[..., 1:]  # (B, H, L, L)
            dQ = dQ + drel @ cache.Er_L
            dEr_L = xp.einsum("bhtc,bhtd->hcd", drel.reshape(-1, *drel.shape[-3:]), Q4)
            onehot = (cache.rows[:, None] == xp.arange(n_rows)).astype(dZ.dtype)  # (L, k+1)
            dE_r = xp.einsum("hcd,cr->hrd", dEr_L, onehot)
        else:
            idx = cache.idx
            onehot = (idx[..., None] == xp.arange(n_rows)).astype(dZ.dtype)  # (T, S, k+1)
            dR = xp.einsum("...ts,tsr->...tr", dZs, onehot)  # (B, H, T, k+1)
            dQ = dQ + dR @ E_r
            dE_r = xp.einsum("bhtr,bhtd->hrd", dR.reshape(-1, *dR.shape[-3:]), Q4)
        return dQ, dK, dE_r
    """,
    ("adam", "adam_update"): """
        m *= beta1
        m += (1 - beta1) * g
        v *= beta2
        v += (1 - beta2) * g * g
        m_hat = m / (1 - beta1**t)
        v_hat = v / (1 - beta2**t)
        theta -= lr * m_hat / (xp.sqrt(v_hat) + eps)
    """,
}

# -- the wrong passes ----------------------------------------------------------------------
# (exercise, short name, {function: body}, the mistake in words,
#  regexes that name the mistake, regexes that point at the term / input / line)
P = []


def wrong(ex, short, bodies, words, named, pointed):
    P.append((ex, short, bodies, words, named, pointed))


# linear
wrong("linear", "dW_mean_over_rows", {"linear_backward": """
        x, W = cache.x, cache.W
        d_in, d_out = W.shape
        x2 = x.reshape(-1, d_in)
        dout2 = dout.reshape(-1, d_out)
        dx = (dout2 @ W.T).reshape(x.shape)
        dW = x2.T @ dout2 / x2.shape[0]
        db = dout2.sum(axis=0) if cache.has_bias else None
        return dx, dW, db
    """}, "dW averaged over the N positions (divided by N = B*T) instead of summed",
    [r"\b1/N\b|1 ?/ ?\(?B ?\* ?T|number of (rows|positions)|averag|mean over (the )?(rows|positions)"],
    [r"\bdW\b"])
wrong("linear", "db_mean", {"linear_backward": """
        x, W = cache.x, cache.W
        d_in, d_out = W.shape
        x2 = x.reshape(-1, d_in)
        dout2 = dout.reshape(-1, d_out)
        dx = (dout2 @ W.T).reshape(x.shape)
        dW = x2.T @ dout2
        db = dout2.mean(axis=0) if cache.has_bias else None
        return dx, dW, db
    """}, "db is the mean of dout over positions, not the sum (a factor 1/N)",
    [r"\b1/N\b|1 ?/ ?\(?B ?\* ?T|number of (rows|positions)|averag|mean over (the )?(rows|positions)|mean,? not the sum"],
    [r"\bdb\b"])
wrong("linear", "dx_sign", {"linear_backward": """
        x, W = cache.x, cache.W
        d_in, d_out = W.shape
        x2 = x.reshape(-1, d_in)
        dout2 = dout.reshape(-1, d_out)
        dx = -(dout2 @ W.T).reshape(x.shape)
        dW = x2.T @ dout2
        db = dout2.sum(axis=0) if cache.has_bias else None
        return dx, dW, db
    """}, "dx with its sign flipped",
    [r"sign"], [r"\bdx\b"])
wrong("linear", "dx_W_not_transposed", {"linear_backward": """
        x, W = cache.x, cache.W
        d_in, d_out = W.shape
        x2 = x.reshape(-1, d_in)
        dout2 = dout.reshape(-1, d_out)
        dx = (dout2 @ W).reshape(x.shape)
        dW = x2.T @ dout2
        db = dout2.sum(axis=0) if cache.has_bias else None
        return dx, dW, db
    """}, "dx = dout @ W, W not transposed (a shape error where D_in != D_out)",
    [r"transpos|W\.T|W\^T"], [r"line \d+"])
wrong("linear", "dW_transposed", {"linear_backward": """
        x, W = cache.x, cache.W
        d_in, d_out = W.shape
        x2 = x.reshape(-1, d_in)
        dout2 = dout.reshape(-1, d_out)
        dx = (dout2 @ W.T).reshape(x.shape)
        dW = (dout2.T @ x2).reshape(d_in, d_out)
        db = dout2.sum(axis=0) if cache.has_bias else None
        return dx, dW, db
    """}, "dW = dout^T x reshaped to W's shape: the transpose of the right matrix",
    [r"transpos"], [r"\bdW\b"])

# relu
wrong("relu", "identity", {"relu_backward": """
        return dout
    """}, "the mask dropped: dx = dout, as if ReLU were the identity",
    [r"mask|x ?> ?0|positive|identity|negative (inputs|entries)"], [r"\bdx\b"])
wrong("relu", "no_dout", {"relu_backward": """
        return cache.positive.astype(dout.dtype)
    """}, "dout dropped: dx = [x > 0], the derivative without the incoming gradient",
    [r"\bdout\b.*(missing|not multipl|without|dropped|left out|ignor)|without (multiplying by )?dout|(forgot|missing) (the )?(incoming|dout)"],
    [r"\bdx\b"])

# gelu
wrong("gelu", "second_half_missing", {"gelu_backward": """
        x, t = cache.x, cache.tanh_u
        du_dx = _GELU_C * (1.0 + 3.0 * _GELU_A * x * x)
        return dout * (0.5 * (1.0 + t) + x * (1.0 - t * t) * du_dx)
    """}, "the 1/2 of the second term (0.5 x (1 - t^2) du/dx) left out: that term doubled",
    [r"second (term|factor).*(doubl|twice|2|half|1/2)|(doubl|twice|factor 2).*second (term|factor)"],
    [r"second (term|factor)|product rule"])
wrong("gelu", "tanh_derivative_1_minus_t", {"gelu_backward": """
        x, t = cache.x, cache.tanh_u
        du_dx = _GELU_C * (1.0 + 3.0 * _GELU_A * x * x)
        return dout * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t) * du_dx)
    """}, "tanh's derivative written 1 - t instead of 1 - t^2",
    [r"1 ?- ?t\b|1 ?- ?tanh|tanh'?s derivative|derivative of tanh"],
    [r"second (term|factor)|tanh"])
wrong("gelu", "du_dx_no_3", {"gelu_backward": """
        x, t = cache.x, cache.tanh_u
        du_dx = _GELU_C * (1.0 + _GELU_A * x * x)
        return dout * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du_dx)
    """}, "du/dx = c (1 + a x^2): the 3 of the derivative of x^3 left out",
    [r"du/dx|\b3 ?a ?x|derivative of (a )?x\^?3|\b3ax"], [r"second (term|factor)"])
wrong("gelu", "du_dx_no_c", {"gelu_backward": """
        x, t = cache.x, cache.tanh_u
        du_dx = 1.0 + 3.0 * _GELU_A * x * x
        return dout * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du_dx)
    """}, "du/dx without the constant c = sqrt(2/pi)",
    [r"sqrt\(2/pi\)|sqrt\(2 ?/ ?π\)|\bc = |the constant c|_GELU_C|√\(2/π\)"],
    [r"second (term|factor)|du/dx"])
wrong("gelu", "first_term_dropped", {"gelu_backward": """
        x, t = cache.x, cache.tanh_u
        du_dx = _GELU_C * (1.0 + 3.0 * _GELU_A * x * x)
        return dout * (0.5 * x * (1.0 - t * t) * du_dx)
    """}, "the first term of the product rule, 0.5 (1 + t), dropped",
    [r"first (term|factor).*(drop|missing|without|left out)|(without|missing|dropped).*first (term|factor)|1 ?\+ ?t"],
    [r"first (term|factor)|product rule"])
wrong("gelu", "second_term_sign", {"gelu_backward": """
        x, t = cache.x, cache.tanh_u
        du_dx = _GELU_C * (1.0 + 3.0 * _GELU_A * x * x)
        return dout * (0.5 * (1.0 + t) - 0.5 * x * (1.0 - t * t) * du_dx)
    """}, "the second term subtracted instead of added (its sign flipped)",
    [r"second (term|factor).*sign|sign.*second (term|factor)"], [r"second (term|factor)"])
wrong("gelu", "one_plus_t_squared", {"gelu_backward": """
        x, t = cache.x, cache.tanh_u
        du_dx = _GELU_C * (1.0 + 3.0 * _GELU_A * x * x)
        return dout * (0.5 * (1.0 + t) + 0.5 * x * (1.0 + t * t) * du_dx)
    """}, "tanh's derivative written 1 + t^2",
    [r"1 ?\+ ?t\^?2|1 ?- ?t\^?2|1 ?- ?tanh|tanh'?s derivative|derivative of tanh"],
    [r"second (term|factor)|tanh"])

# embedding
wrong("embedding", "fancy_index_add", {"embedding_backward": """
        d = dout.shape[-1]
        dE = xp.zeros((cache.vocab_size, d), dtype=dout.dtype)
        dE[cache.ids.reshape(-1)] += dout.reshape(-1, d)
        if cache.pad_id is not None:
            dE[cache.pad_id] = 0
        return dE
    """}, "dE[ids] += dout: a repeated id keeps one of its contributions",
    [r"repeat"], [r"line \d+"])
wrong("embedding", "pad_row_kept", {"embedding_backward": """
        d = dout.shape[-1]
        dE = xp.zeros((cache.vocab_size, d), dtype=dout.dtype)
        xp.add.at(dE, cache.ids.reshape(-1), dout.reshape(-1, d))
        return dE
    """}, "the padding row not zeroed",
    [r"pad"], [r"row"])
wrong("embedding", "scaled_sqrt_D", {"embedding_backward": """
        d = dout.shape[-1]
        dE = xp.zeros((cache.vocab_size, d), dtype=dout.dtype)
        xp.add.at(dE, cache.ids.reshape(-1), dout.reshape(-1, d) * d**0.5)
        if cache.pad_id is not None:
            dE[cache.pad_id] = 0
        return dE
    """}, "scaled by sqrt(D), the module's embedding scale, inside the op's backward",
    [r"sqrt\(D\)|sqrt\(d_model\)|√D|embedding scale|\bscale\b"], [r"\bdE\b"])
wrong("embedding", "mean_over_occurrences", {"embedding_backward": """
        d = dout.shape[-1]
        ids = cache.ids.reshape(-1)
        dE = xp.zeros((cache.vocab_size, d), dtype=dout.dtype)
        xp.add.at(dE, ids, dout.reshape(-1, d))
        count = xp.bincount(ids, minlength=cache.vocab_size)
        dE /= xp.maximum(count, 1)[:, None]
        if cache.pad_id is not None:
            dE[cache.pad_id] = 0
        return dE
    """}, "each row divided by how often its id occurs (a mean, not a sum)",
    [r"repeat|occurr|mean,? not (a|the) sum|averag"], [r"\bdE\b"])
wrong("embedding", "divided_by_batch", {"embedding_backward": """
        d = dout.shape[-1]
        dE = xp.zeros((cache.vocab_size, d), dtype=dout.dtype)
        xp.add.at(dE, cache.ids.reshape(-1), dout.reshape(-1, d))
        if cache.pad_id is not None:
            dE[cache.pad_id] = 0
        return dE / cache.ids.shape[0]
    """}, "dE divided by the batch size B",
    [r"\b1/B\b|batch size|number of (sequences|examples)"], [r"\bdE\b"])

# softmax
wrong("softmax", "row_sum_dropped", {"softmax_backward": """
        return cache.P * dout
    """}, "the row-sum term sum(dP * P) dropped: dx = P * dP",
    [r"row.?sum"], [r"\bdx\b"])
wrong("softmax", "row_sum_without_P", {"softmax_backward": """
        P = cache.P
        return P * (dout - dout.sum(axis=-1, keepdims=True))
    """}, "the row-sum term taken of dP alone, sum(dP), not sum(dP * P)",
    [r"row.?sum.*(dP|dout|P)|sum\(dP\)|sum of dout"], [r"row.?sum"])
wrong("softmax", "outer_P_dropped", {"softmax_backward": """
        P = cache.P
        return dout - (dout * P).sum(axis=-1, keepdims=True)
    """}, "the outer factor P dropped: dx = dP - sum(dP * P)",
    [r"outer (factor )?P|times P|\* ?P\b|diag\(P\)|not multiplied by P|factor P"],
    [r"masked"])
wrong("softmax", "divided_by_batch", {"softmax_backward": """
        P = cache.P
        return P * (dout - (dout * P).sum(axis=-1, keepdims=True)) / dout.shape[0]
    """}, "divided by the batch size (the first axis)",
    [r"\b1/B\b|batch size|first axis"], [r"\bdx\b"])
wrong("softmax", "row_sum_wrong_axis", {"softmax_backward": """
        P = cache.P
        return P * (dout - (dout * P).sum(axis=0, keepdims=True))
    """}, "the row sum taken over the first axis instead of the last",
    [r"axis|row.?sum.*(column|wrong)"], [r"row.?sum"])
wrong("softmax", "row_sum_sign", {"softmax_backward": """
        P = cache.P
        return P * (dout + (dout * P).sum(axis=-1, keepdims=True))
    """}, "the row-sum term added instead of subtracted",
    [r"row.?sum.*sign|sign.*row.?sum"], [r"row.?sum"])
wrong("softmax", "log_softmax_backward", {"softmax_backward": """
        P = cache.P
        return dout - P * dout.sum(axis=-1, keepdims=True)
    """}, "log-softmax's backward (dP - P sum(dP)) written for softmax",
    [r"log.?softmax"], [r"row.?sum"])

# layernorm
LN_HEAD = """
        xhat, rstd, gamma = cache.xhat, cache.rstd, cache.gamma
        lead = tuple(range(dout.ndim - 1))
        dgamma = (dout * xhat).sum(axis=lead)
        dbeta = dout.sum(axis=lead)
"""


def ln(dx_lines, head=LN_HEAD):
    return textwrap.dedent(head) + textwrap.dedent(dx_lines) + "return dx, dgamma, dbeta\n"


wrong("layernorm", "variance_term_dropped", {"layernorm_backward": ln("""
        dxhat = dout * gamma
        dx = rstd * (dxhat - dxhat.mean(axis=-1, keepdims=True))
    """)}, "the variance term (xhat * mean(dxhat * xhat)) dropped",
    [r"variance term"], [r"xhat|variance"])
wrong("layernorm", "mean_term_dropped", {"layernorm_backward": ln("""
        dxhat = dout * gamma
        dx = rstd * (dxhat - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True))
    """)}, "the mean term (mean(dxhat), through mu) dropped",
    [r"mean term|mean\(dxhat\)|through mu|\bmu\b"], [r"mean"])
wrong("layernorm", "dout_for_dxhat", {"layernorm_backward": ln("""
        dxhat = dout
        dx = rstd * (dxhat - dxhat.mean(axis=-1, keepdims=True)
                     - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True))
    """)}, "dout used for dxhat = dout * gamma (gamma left out of dx)",
    [r"gamma"], [r"dxhat"])
wrong("layernorm", "variance_unbiased", {"layernorm_backward": ln("""
        dxhat = dout * gamma
        D = dout.shape[-1]
        dx = rstd * (dxhat - dxhat.mean(axis=-1, keepdims=True)
                     - xhat * (dxhat * xhat).sum(axis=-1, keepdims=True) / (D - 1))
    """)}, "the variance term with 1/(D-1) (unbiased) where the forward's variance is 1/D",
    [r"D ?- ?1|unbiased"], [r"variance"])
wrong("layernorm", "dgamma_dxhat", {"layernorm_backward": """
        xhat, rstd, gamma = cache.xhat, cache.rstd, cache.gamma
        lead = tuple(range(dout.ndim - 1))
        dxhat = dout * gamma
        dgamma = (dxhat * xhat).sum(axis=lead)
        dbeta = dout.sum(axis=lead)
        dx = rstd * (dxhat - dxhat.mean(axis=-1, keepdims=True)
                     - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True))
        return dx, dgamma, dbeta
    """}, "dgamma from dxhat (dout * gamma) instead of dout: a factor gamma",
    [r"gamma.*(dxhat|dout \* gamma|factor)|dxhat.*dgamma|per.?column"], [r"\bdgamma\b"])
wrong("layernorm", "variance_term_sign", {"layernorm_backward": ln("""
        dxhat = dout * gamma
        dx = rstd * (dxhat - dxhat.mean(axis=-1, keepdims=True)
                     + xhat * (dxhat * xhat).mean(axis=-1, keepdims=True))
    """)}, "the variance term added instead of subtracted",
    [r"variance term.*sign|sign.*variance term"], [r"variance"])
wrong("layernorm", "rstd_dropped", {"layernorm_backward": ln("""
        dxhat = dout * gamma
        dx = dxhat - dxhat.mean(axis=-1, keepdims=True) - xhat * (dxhat * xhat).mean(
            axis=-1, keepdims=True)
    """)}, "dx not multiplied by rstd",
    [r"rstd|1/sqrt\(var"], [r"per row|row"])
wrong("layernorm", "variance_term_dout", {"layernorm_backward": ln("""
        dxhat = dout * gamma
        dx = rstd * (dxhat - dxhat.mean(axis=-1, keepdims=True)
                     - xhat * (dout * xhat).mean(axis=-1, keepdims=True))
    """)}, "the variance term computed on dout instead of dxhat (dout for dxhat)",
    [r"variance term.*(dout|gamma)|(dout|gamma).*variance term"], [r"variance"])
wrong("layernorm", "params_mean_over_rows", {"layernorm_backward": """
        xhat, rstd, gamma = cache.xhat, cache.rstd, cache.gamma
        lead = tuple(range(dout.ndim - 1))
        dxhat = dout * gamma
        dgamma = (dout * xhat).mean(axis=lead)
        dbeta = dout.mean(axis=lead)
        dx = rstd * (dxhat - dxhat.mean(axis=-1, keepdims=True)
                     - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True))
        return dx, dgamma, dbeta
    """}, "dgamma and dbeta averaged over the rows instead of summed",
    [r"\b1/N\b|number of rows|averag|mean over (the )?rows|mean,? not the sum"],
    [r"\bdgamma\b|\bdbeta\b"])

# dropout
wrong("dropout", "scale_dropped", {"dropout_backward": """
        if cache.mask is None:
            return dout
        return dout * cache.mask
    """}, "the survivors' factor 1/(1-p) left out",
    [r"1 ?/ ?\(1 ?- ?p\)|1 ?- ?p|scale"], [r"\bdx\b"])
wrong("dropout", "divided_by_scale", {"dropout_backward": """
        if cache.mask is None:
            return dout
        return dout * cache.mask / cache.scale
    """}, "divided by 1/(1-p) instead of multiplied (a factor (1-p))",
    [r"1 ?- ?p|scale"], [r"\bdx\b"])
wrong("dropout", "off_gives_zeros", {"dropout_backward": """
        if cache.mask is None:
            return xp.zeros_like(dout)
        return dout * cache.mask * cache.scale
    """}, "with dropout off (no mask) returns zeros instead of dout",
    [r"\boff\b|no mask|mask (is )?None|identity"], [r"zero"])
wrong("dropout", "scale_twice", {"dropout_backward": """
        if cache.mask is None:
            return dout
        return dout * cache.mask * cache.scale * cache.scale
    """}, "the factor 1/(1-p) applied twice",
    [r"1 ?/ ?\(1 ?- ?p\)|1 ?- ?p|scale"], [r"\bdx\b"])
wrong("dropout", "mask_inverted", {"dropout_backward": """
        if cache.mask is None:
            return dout
        return dout * ~cache.mask * cache.scale
    """}, "the mask inverted: gradient given to the dropped entries",
    [r"invert|dropped entries|~ ?mask|not mask|opposite"], [r"mask"])

# cross_entropy
CE_HEAD = """
        V = cache.V
        P = cache.P.reshape(-1, V)
        tgt = cache.target.reshape(-1)
        keep = cache.keep.reshape(-1)
"""


def ce(lines):
    return textwrap.dedent(CE_HEAD) + textwrap.dedent(lines) + "return d.reshape(cache.P.shape)\n"


wrong("cross_entropy", "smoothing_ignored", {"cross_entropy_backward": ce("""
        q = xp.zeros_like(P)
        q[xp.arange(tgt.shape[0]), tgt] = 1.0
        r = keep * dout / max(int(cache.n_tokens), 1)
        d = (P - q) * r[:, None]
    """)}, "label smoothing ignored: q is the one-hot target",
    [r"smooth|one.?hot|\beps\b"], [r"\bq\b"])
wrong("cross_entropy", "no_n_tokens", {"cross_entropy_backward": ce("""
        off = cache.eps / (V - 1) if cache.eps else 0.0
        q = xp.full_like(P, off)
        q[xp.arange(tgt.shape[0]), tgt] = 1.0 - cache.eps
        d = (P - q) * (keep * dout)[:, None]
    """)}, "not divided by n_tokens (the gradient of the sum, not of the mean)",
    [r"n_tokens|number of (targets|tokens)"], [r"constant factor|factor"])
wrong("cross_entropy", "divided_by_all_rows", {"cross_entropy_backward": ce("""
        off = cache.eps / (V - 1) if cache.eps else 0.0
        q = xp.full_like(P, off)
        q[xp.arange(tgt.shape[0]), tgt] = 1.0 - cache.eps
        d = (P - q) * (keep * dout / tgt.shape[0])[:, None]
    """)}, "divided by the number of rows, padding included, instead of n_tokens",
    [r"pad.*(count|rows|n_tokens)|n_tokens.*pad|all (the )?rows|rows,? padding included|number of rows"],
    [r"n_tokens|factor"])
wrong("cross_entropy", "pad_rows_kept", {"cross_entropy_backward": ce("""
        off = cache.eps / (V - 1) if cache.eps else 0.0
        q = xp.full_like(P, off)
        q[xp.arange(tgt.shape[0]), tgt] = 1.0 - cache.eps
        d = (P - q) * (dout / max(int(cache.n_tokens), 1))
    """)}, "padded rows not zeroed (keep left out)",
    [r"pad"], [r"rows?"])
wrong("cross_entropy", "eps_over_V", {"cross_entropy_backward": ce("""
        off = cache.eps / V
        q = xp.full_like(P, off)
        q[xp.arange(tgt.shape[0]), tgt] = 1.0 - cache.eps
        r = keep * dout / max(int(cache.n_tokens), 1)
        d = (P - q) * r[:, None]
    """)}, "the off-target weight eps/V instead of eps/(V-1)",
    [r"eps ?/ ?V\b|ε ?/ ?V\b|V ?- ?1"], [r"\bq\b|smooth"])
wrong("cross_entropy", "sign_flipped", {"cross_entropy_backward": ce("""
        off = cache.eps / (V - 1) if cache.eps else 0.0
        q = xp.full_like(P, off)
        q[xp.arange(tgt.shape[0]), tgt] = 1.0 - cache.eps
        r = keep * dout / max(int(cache.n_tokens), 1)
        d = (q - P) * r[:, None]
    """)}, "q - P instead of P - q (sign flipped)",
    [r"sign"], [r"dlogits"])
wrong("cross_entropy", "dout_ignored", {"cross_entropy_backward": ce("""
        off = cache.eps / (V - 1) if cache.eps else 0.0
        q = xp.full_like(P, off)
        q[xp.arange(tgt.shape[0]), tgt] = 1.0 - cache.eps
        r = keep / max(int(cache.n_tokens), 1)
        d = (P - q) * r[:, None]
    """)}, "the incoming dout not multiplied in",
    [r"\bdout\b"], [r"factor"])
wrong("cross_entropy", "divided_by_batch", {"cross_entropy_backward": ce("""
        off = cache.eps / (V - 1) if cache.eps else 0.0
        q = xp.full_like(P, off)
        q[xp.arange(tgt.shape[0]), tgt] = 1.0 - cache.eps
        B = cache.target.shape[0]
        r = keep * dout / max(int(cache.n_tokens), 1) / B
        d = (P - q) * r[:, None]
    """)}, "divided by the batch size B as well as n_tokens",
    [r"\b1/B\b|batch size|number of (sequences|examples)"], [r"factor"])
wrong("cross_entropy", "target_weight_off_added", {"cross_entropy_backward": ce("""
        off = cache.eps / (V - 1) if cache.eps else 0.0
        q = xp.full_like(P, off)
        q[xp.arange(tgt.shape[0]), tgt] += 1.0 - cache.eps
        r = keep * dout / max(int(cache.n_tokens), 1)
        d = (P - q) * r[:, None]
    """)}, "the target's weight 1 - eps + eps/(V-1): 'off' left on the target too",
    [r"target('s)? (weight|entry|column).*(off|eps ?/ ?\(V ?- ?1\))|q_?y|1 ?- ?eps ?\+"],
    [r"target"])

# attention
wrong("attention", "dV_pre_dropout", {"attention_core_backward": """
        P = cache.softmax.P
        dA = dO @ cache.V.swapaxes(-1, -2)
        if dA_drop is not None:
            dA = dA + dA_drop
        dV = P.swapaxes(-1, -2) @ dO
        if cache.dropout.mask is not None:
            dA = dA * cache.dropout.mask * cache.dropout.scale
        dZ = P * (dA - (dA * P).sum(axis=-1, keepdims=True))
        return dZ, dV
    """}, "dV from A (before dropout) instead of A'",
    [r"before dropout|pre.?dropout|A instead of A'|\bA\b.*\bA'"], [r"\bdV\b"])
wrong("attention", "softmax_uses_A_drop", {"attention_core_backward": """
        P = cache.A_drop
        dA = dO @ cache.V.swapaxes(-1, -2)
        if dA_drop is not None:
            dA = dA + dA_drop
        dV = cache.A_drop.swapaxes(-1, -2) @ dO
        if cache.dropout.mask is not None:
            dA = dA * cache.dropout.mask * cache.dropout.scale
        dZ = P * (dA - (dA * P).sum(axis=-1, keepdims=True))
        return dZ, dV
    """}, "the softmax's backward with A' (after dropout) for P",
    [r"A' (for|instead of|in place of) (P|A)|after dropout|post.?dropout"], [r"\bdZ\b|softmax"])
wrong("attention", "no_dropout_in_backward", {"attention_core_backward": """
        P = cache.softmax.P
        dA = dO @ cache.V.swapaxes(-1, -2)
        if dA_drop is not None:
            dA = dA + dA_drop
        dV = cache.A_drop.swapaxes(-1, -2) @ dO
        dZ = P * (dA - (dA * P).sum(axis=-1, keepdims=True))
        return dZ, dV
    """}, "dropout's backward left out of the core (dA' taken for dA)",
    [r"dropout"], [r"\bdZ\b"])
wrong("attention", "dA_drop_ignored", {"attention_core_backward": """
        P = cache.softmax.P
        dA = dO @ cache.V.swapaxes(-1, -2)
        dV = cache.A_drop.swapaxes(-1, -2) @ dO
        if cache.dropout.mask is not None:
            dA = dA * cache.dropout.mask * cache.dropout.scale
        dZ = P * (dA - (dA * P).sum(axis=-1, keepdims=True))
        return dZ, dV
    """}, "dA_drop (the value term's gradient of A') not added",
    [r"dA_drop"], [r"value term"])
wrong("attention", "dA_drop_after_dropout", {"attention_core_backward": """
        P = cache.softmax.P
        dA = dO @ cache.V.swapaxes(-1, -2)
        if cache.dropout.mask is not None:
            dA = dA * cache.dropout.mask * cache.dropout.scale
        if dA_drop is not None:
            dA = dA + dA_drop
        dV = cache.A_drop.swapaxes(-1, -2) @ dO
        dZ = P * (dA - (dA * P).sum(axis=-1, keepdims=True))
        return dZ, dV
    """}, "dA_drop added after dropout's backward instead of before",
    [r"dA_drop.*(dropout|mask|before|after)"], [r"dA_drop|value term"])
wrong("attention", "core_row_sum_dropped", {"attention_core_backward": """
        P = cache.softmax.P
        dA = dO @ cache.V.swapaxes(-1, -2)
        if dA_drop is not None:
            dA = dA + dA_drop
        dV = cache.A_drop.swapaxes(-1, -2) @ dO
        if cache.dropout.mask is not None:
            dA = dA * cache.dropout.mask * cache.dropout.scale
        dZ = P * dA
        return dZ, dV
    """}, "the softmax's row-sum term dropped in the core",
    [r"row.?sum"], [r"\bdZ\b|softmax"])
wrong("attention", "dK_no_scale", {"dot_product_logits_backward": """
        dQ = dZ @ cache.K * cache.scale
        dK = dZ.swapaxes(-1, -2) @ cache.Q
        return dQ, dK
    """}, "dK without the scale 1/sqrt(d_k)",
    [r"sqrt\(d_k\)|√d_k|scale"], [r"\bdK\b"])
wrong("attention", "scale_squared", {"dot_product_logits_backward": """
        dZs = dZ / cache.Q.shape[-1]
        dQ = dZs @ cache.K
        dK = dZs.swapaxes(-1, -2) @ cache.Q
        return dQ, dK
    """}, "scaled by 1/d_k instead of 1/sqrt(d_k)",
    [r"1/d_k|sqrt\(d_k\)|√d_k|d_k"], [r"\bdQ\b|\bdK\b"])
wrong("attention", "scale_inverted", {"dot_product_logits_backward": """
        dZs = dZ * cache.Q.shape[-1] ** 0.5
        dQ = dZs @ cache.K
        dK = dZs.swapaxes(-1, -2) @ cache.Q
        return dQ, dK
    """}, "multiplied by sqrt(d_k) instead of divided",
    [r"sqrt\(d_k\)|√d_k|d_k"], [r"\bdQ\b|\bdK\b"])
wrong("attention", "dK_transposed", {"dot_product_logits_backward": """
        dZs = dZ * cache.scale
        dQ = dZs @ cache.K
        dK = cache.Q.swapaxes(-1, -2) @ dZs
        return dQ, dK
    """}, "dK = s Q^T dZ, the transpose of the right shape (a shape error)",
    [r"transpos|Q\^T|dZ\^T"], [r"\bdK\b|line \d+"])
wrong("attention", "dK_from_K", {"dot_product_logits_backward": """
        dZs = dZ * cache.scale
        dQ = dZs @ cache.K
        dK = dZs.swapaxes(-1, -2) @ cache.K
        return dQ, dK
    """}, "dK computed from K instead of Q (wrong input)",
    [r"\bK\b.*(instead of|for|in place of) Q|wrong input"], [r"\bdK\b"])

# multi_head_attention
wrong("multi_head_attention", "values_path_dropped", {"multi_head_attention_backward": """
        dO_m, dW_o, _ = linear.backward(dout, cache.o_proj)
        self.grads["W_o"] += dW_o
        dQ, dK, dV = self.attend_backward(split_heads(dO_m, self.h), cache.attn)
        dx_q, dW_q, _ = linear.backward(merge_heads(dQ), cache.q_proj)
        dx_k, dW_k, _ = linear.backward(merge_heads(dK), cache.k_proj)
        dx_v, dW_v, _ = linear.backward(merge_heads(dV), cache.v_proj)
        self.grads["W_q"] += dW_q
        self.grads["W_k"] += dW_k
        self.grads["W_v"] += dW_v
        return dx_q, dx_k
    """}, "dx_kv from the keys only: the values' path dropped",
    [r"values?'? path|through the values|dx_v"], [r"dx_kv"])
wrong("multi_head_attention", "W_o_assigned", {"multi_head_attention_backward": """
        dO_m, dW_o, _ = linear.backward(dout, cache.o_proj)
        self.grads["W_o"] = dW_o
        dQ, dK, dV = self.attend_backward(split_heads(dO_m, self.h), cache.attn)
        dx_q, dW_q, _ = linear.backward(merge_heads(dQ), cache.q_proj)
        dx_k, dW_k, _ = linear.backward(merge_heads(dK), cache.k_proj)
        dx_v, dW_v, _ = linear.backward(merge_heads(dV), cache.v_proj)
        self.grads["W_q"] += dW_q
        self.grads["W_k"] += dW_k
        self.grads["W_v"] += dW_v
        return dx_q, dx_k + dx_v
    """}, "grads['W_o'] assigned (=) instead of added (+=)",
    [r"W_o.*(lost|accumulat|\+=|replac|assign|in place of)|(accumulat|\+=|lost|assign).*W_o"], [r"W_o"])
wrong("multi_head_attention", "split_by_reshape", {"multi_head_attention_backward": """
        dO_m, dW_o, _ = linear.backward(dout, cache.o_proj)
        self.grads["W_o"] += dW_o
        B, T, HD = dO_m.shape
        dO = dO_m.reshape(B, self.h, T, HD // self.h)
        dQ, dK, dV = self.attend_backward(dO, cache.attn)
        dx_q, dW_q, _ = linear.backward(merge_heads(dQ), cache.q_proj)
        dx_k, dW_k, _ = linear.backward(merge_heads(dK), cache.k_proj)
        dx_v, dW_v, _ = linear.backward(merge_heads(dV), cache.v_proj)
        self.grads["W_q"] += dW_q
        self.grads["W_k"] += dW_k
        self.grads["W_v"] += dW_v
        return dx_q, dx_k + dx_v
    """}, "dO split into heads by a plain reshape (no transpose): positions mixed with heads",
    [r"reshape|split_heads|transpose|mix(es|ed)? (positions|heads)"], [r"\bheads?\b"])
wrong("multi_head_attention", "outputs_swapped", {"multi_head_attention_backward": """
        dO_m, dW_o, _ = linear.backward(dout, cache.o_proj)
        self.grads["W_o"] += dW_o
        dQ, dK, dV = self.attend_backward(split_heads(dO_m, self.h), cache.attn)
        dx_q, dW_q, _ = linear.backward(merge_heads(dQ), cache.q_proj)
        dx_k, dW_k, _ = linear.backward(merge_heads(dK), cache.k_proj)
        dx_v, dW_v, _ = linear.backward(merge_heads(dV), cache.v_proj)
        self.grads["W_q"] += dW_q
        self.grads["W_k"] += dW_k
        self.grads["W_v"] += dW_v
        return dx_k + dx_v, dx_q
    """}, "(dx_kv, dx_q) returned in the wrong order",
    [r"swap|order|the other way"], [r"dx_q|dx_kv|shape"])

# ffn
wrong("ffn", "dropout_skipped", {"ffn_backward": """
        da, dW_2, db_2 = linear.backward(dout, cache.lin2)
        du = self.activation.backward(da, cache.act)
        dx, dW_1, db_1 = linear.backward(du, cache.lin1)
        self.grads["W_1"] += dW_1
        self.grads["b_1"] += db_1
        self.grads["W_2"] += dW_2
        self.grads["b_2"] += db_2
        return dx
    """}, "the hidden layer's dropout left out of the backward",
    [r"dropout"], [r"W_1|b_1|dx"])
wrong("ffn", "activation_skipped", {"ffn_backward": """
        da, dW_2, db_2 = linear.backward(dout, cache.lin2)
        da = self.dropout.backward(da, cache.drop)
        dx, dW_1, db_1 = linear.backward(da, cache.lin1)
        self.grads["W_1"] += dW_1
        self.grads["b_1"] += db_1
        self.grads["W_2"] += dW_2
        self.grads["b_2"] += db_2
        return dx
    """}, "the activation's backward left out (da used as du)",
    [r"activation|relu|gelu"], [r"W_1|b_1|dx"])
wrong("ffn", "b_1_not_added", {"ffn_backward": """
        da, dW_2, db_2 = linear.backward(dout, cache.lin2)
        da = self.dropout.backward(da, cache.drop)
        du = self.activation.backward(da, cache.act)
        dx, dW_1, db_1 = linear.backward(du, cache.lin1)
        self.grads["W_1"] += dW_1
        self.grads["W_2"] += dW_2
        self.grads["b_2"] += db_2
        return dx
    """}, "db_1 never added into grads['b_1']",
    [r"b_1.*(zero|never|not added|missing)|(zero|never|not added|missing).*b_1"], [r"b_1"])
wrong("ffn", "W_2_assigned", {"ffn_backward": """
        da, dW_2, db_2 = linear.backward(dout, cache.lin2)
        da = self.dropout.backward(da, cache.drop)
        du = self.activation.backward(da, cache.act)
        dx, dW_1, db_1 = linear.backward(du, cache.lin1)
        self.grads["W_1"] += dW_1
        self.grads["b_1"] += db_1
        self.grads["W_2"] = dW_2
        self.grads["b_2"] += db_2
        return dx
    """}, "grads['W_2'] assigned (=) instead of added (+=)",
    [r"W_2.*(lost|accumulat|\+=|replac|assign|in place of)|(accumulat|\+=|lost|assign).*W_2"], [r"W_2"])

# add_norm
wrong("add_norm", "ds_without_dropout", {"add_norm_exit_backward": """
        if self.norm_first:
            dr = dy
        else:
            dr = self._norm_backward(dy, cache.norm)
        return dr, dr
    """}, "ds = dr: the residual dropout's backward left out of the sub-layer's path",
    [r"dropout"], [r"\bds\b|sub.?layer"])
wrong("add_norm", "residual_skips_norm", {"add_norm_exit_backward": """
        if self.norm_first:
            dr = dy
        else:
            dr = self._norm_backward(dy, cache.norm)
        ds = self.dropout.backward(dr, cache.dropout)
        return dy, ds
    """}, "post-LN: the residual path returns dy, not the LayerNorm's backward dr",
    [r"residual.*(norm|LN|dy)|(norm|LN).*residual"], [r"residual|post.?LN"])
wrong("add_norm", "pre_ln_enter_identity", {"add_norm_enter_backward": """
        return ds_in
    """}, "pre-LN: enter's backward skips the LayerNorm (identity)",
    [r"enter.*(norm|LN|identity)|(norm|LN).*enter"], [r"pre.?LN|enter"])
wrong("add_norm", "dropout_on_residual", {"add_norm_exit_backward": """
        if self.norm_first:
            dr = dy
        else:
            dr = self._norm_backward(dy, cache.norm)
        ds = self.dropout.backward(dr, cache.dropout)
        return ds, ds
    """}, "the residual path also multiplied by the dropout mask",
    [r"residual.*dropout|dropout.*residual"], [r"residual"])
wrong("add_norm", "post_ln_enter_norms", {"add_norm_enter_backward": """
        return self._norm_backward(ds_in, cache.norm)
    """}, "post-LN: enter's backward calls the LayerNorm's backward too (there is none; crash)",
    [r"post.?LN.*enter|enter.*post.?LN|identity"], [r"line \d+"])

# encoder_layer
wrong("encoder_layer", "kv_path_dropped", {"encoder_layer_backward": """
        ca, cf = cache.self_attn, cache.ffn
        dx, df = self.ffn_norm.exit_backward(dout, cf.exit)
        dx = dx + self.ffn_norm.enter_backward(self.ffn.backward(df, cf.sublayer), cf.enter)
        dx, da = self.self_attn_norm.exit_backward(dx, ca.exit)
        da_q, da_kv = self.self_attn.backward(da, ca.sublayer)
        return dx + self.self_attn_norm.enter_backward(da_q, ca.enter)
    """}, "self-attention's da_kv not added: the queries' path only",
    [r"da_kv|dx_kv|queries only|keys and values"], [r"self.?attention"])
wrong("encoder_layer", "ffn_residual_dropped", {"encoder_layer_backward": """
        ca, cf = cache.self_attn, cache.ffn
        dx, df = self.ffn_norm.exit_backward(dout, cf.exit)
        dx = self.ffn_norm.enter_backward(self.ffn.backward(df, cf.sublayer), cf.enter)
        dx, da = self.self_attn_norm.exit_backward(dx, ca.exit)
        da_q, da_kv = self.self_attn.backward(da, ca.sublayer)
        return dx + self.self_attn_norm.enter_backward(da_q + da_kv, ca.enter)
    """}, "the FFN block's residual path dropped (only the sub-layer's path kept)",
    [r"residual"], [r"ffn|feed.?forward"])
wrong("encoder_layer", "attn_sublayer_dropped", {"encoder_layer_backward": """
        ca, cf = cache.self_attn, cache.ffn
        dx, df = self.ffn_norm.exit_backward(dout, cf.exit)
        dx = dx + self.ffn_norm.enter_backward(self.ffn.backward(df, cf.sublayer), cf.enter)
        dx, da = self.self_attn_norm.exit_backward(dx, ca.exit)
        da_q, da_kv = self.self_attn.backward(da, ca.sublayer)
        return dx
    """}, "the self-attention sub-layer's path not added to dx (residual only)",
    [r"self.?attention.*(path|not added|dropped|missing)|sub.?layer'?s? path"], [r"self.?attention"])

# decoder_layer
wrong("decoder_layer", "self_kv_dropped", {"decoder_layer_backward": """
        cs, cx, cf = cache.self_attn, cache.cross_attn, cache.ffn
        dy, df = self.ffn_norm.exit_backward(dout, cf.exit)
        dy = dy + self.ffn_norm.enter_backward(self.ffn.backward(df, cf.sublayer), cf.enter)
        dy, dxs = self.cross_attn_norm.exit_backward(dy, cx.exit)
        dx_q, dmemory = self.cross_attn.backward(dxs, cx.sublayer)
        dy = dy + self.cross_attn_norm.enter_backward(dx_q, cx.enter)
        dy, da = self.self_attn_norm.exit_backward(dy, cs.exit)
        da_q, da_kv = self.self_attn.backward(da, cs.sublayer)
        dy = dy + self.self_attn_norm.enter_backward(da_q, cs.enter)
        return dy, dmemory
    """}, "self-attention's da_kv not added: the queries' path only",
    [r"da_kv|dx_kv|queries only|keys and values"], [r"self.?attention"])
wrong("decoder_layer", "cross_residual_dropped", {"decoder_layer_backward": """
        cs, cx, cf = cache.self_attn, cache.cross_attn, cache.ffn
        dy, df = self.ffn_norm.exit_backward(dout, cf.exit)
        dy = dy + self.ffn_norm.enter_backward(self.ffn.backward(df, cf.sublayer), cf.enter)
        dy, dxs = self.cross_attn_norm.exit_backward(dy, cx.exit)
        dx_q, dmemory = self.cross_attn.backward(dxs, cx.sublayer)
        dy = self.cross_attn_norm.enter_backward(dx_q, cx.enter)
        dy, da = self.self_attn_norm.exit_backward(dy, cs.exit)
        da_q, da_kv = self.self_attn.backward(da, cs.sublayer)
        dy = dy + self.self_attn_norm.enter_backward(da_q + da_kv, cs.enter)
        return dy, dmemory
    """}, "the cross-attention block's residual path dropped",
    [r"residual"], [r"cross.?attention"])
wrong("decoder_layer", "dmemory_into_dy", {"decoder_layer_backward": """
        cs, cx, cf = cache.self_attn, cache.cross_attn, cache.ffn
        dy, df = self.ffn_norm.exit_backward(dout, cf.exit)
        dy = dy + self.ffn_norm.enter_backward(self.ffn.backward(df, cf.sublayer), cf.enter)
        dy, dxs = self.cross_attn_norm.exit_backward(dy, cx.exit)
        dmemory, dx_q = self.cross_attn.backward(dxs, cx.sublayer)
        dy = dy + self.cross_attn_norm.enter_backward(dx_q, cx.enter)
        dy, da = self.self_attn_norm.exit_backward(dy, cs.exit)
        da_q, da_kv = self.self_attn.backward(da, cs.sublayer)
        dy = dy + self.self_attn_norm.enter_backward(da_q + da_kv, cs.enter)
        return dy, dmemory
    """}, "cross-attention's results unpacked the wrong way round (dmemory, dx_q)",
    [r"swap|order|the other way|wrong way"], [r"cross.?attention|line \d+"])

# shaw
SHAW_HEAD = """
        Q, K, E_k, idx = cache.Q, cache.K, cache.E_k, cache.idx
        R = E_k.shape[0]
        dZs = dZ * cache.scale
        dQ = dZs @ K
        dK = dZs.swapaxes(-1, -2) @ Q
        onehot = (idx[..., None] == xp.arange(R)).astype(dZ.dtype)  # (T, S, R)
"""


def shaw(lines):
    return textwrap.dedent(SHAW_HEAD) + textwrap.dedent(lines) + "return dQ, dK, dE_k\n"


wrong("shaw", "rel_term_unscaled", {"shaw_logits_backward": shaw("""
        dR = xp.einsum("...ts,tsr->...tr", dZ, onehot)
        dQ = dQ + dR @ E_k
        dE_k = dR.reshape(-1, R).T @ Q.reshape(-1, Q.shape[-1])
    """)}, "the relative term's dR from dZ without the scale s",
    [r"scale|sqrt\(d_k\)|√d_k|d_k"], [r"dE_k|relative"])
wrong("shaw", "fancy_index_scatter", {"shaw_logits_backward": shaw("""
        T, S = idx.shape
        dR = xp.zeros((*dZ.shape[:-1], R), dtype=dZ.dtype)
        rows = xp.arange(T)[:, None]
        dR[..., rows, idx] += dZs
        dQ = dQ + dR @ E_k
        dE_k = dR.reshape(-1, R).T @ Q.reshape(-1, Q.shape[-1])
    """)}, "the scatter as a fancy-index add: repeated (edge) buckets keep one contribution",
    [r"repeat|bucket|scatter"], [r"dE_k|line \d+"])
wrong("shaw", "dQ_rel_dropped", {"shaw_logits_backward": shaw("""
        dR = xp.einsum("...ts,tsr->...tr", dZs, onehot)
        dE_k = dR.reshape(-1, R).T @ Q.reshape(-1, Q.shape[-1])
    """)}, "dQ without the relative term dR E_k",
    [r"dR ?E_k|relative term|through (R|the relative)"], [r"\bdQ\b"])
wrong("shaw", "dE_k_mean_heads", {"shaw_logits_backward": shaw("""
        dR = xp.einsum("...ts,tsr->...tr", dZs, onehot)
        dQ = dQ + dR @ E_k
        H = Q.shape[-3] if Q.ndim >= 3 else 1
        dE_k = dR.reshape(-1, R).T @ Q.reshape(-1, Q.shape[-1]) / H
    """)}, "dE_k averaged over the heads (divided by H) instead of summed",
    [r"\b1/H\b|number of heads|heads"], [r"dE_k"])

# skew
SKEW_HEAD = """
        Q, K, E_r = cache.Q, cache.K, cache.E_r
        n_rows = E_r.shape[-2]
        dZs = dZ * cache.scale
        dQ = dZs @ K
        dK = dZs.swapaxes(-1, -2) @ Q
        Q4 = Q.reshape(-1, *Q.shape[-3:])  # (B, H, T, Dh)
"""


def skew(skew_lines, gather_lines):
    return (textwrap.dedent(SKEW_HEAD) + "if cache.Er_L is not None:\n"
            + textwrap.indent(textwrap.dedent(skew_lines), "    ") + "else:\n"
            + textwrap.indent(textwrap.dedent(gather_lines), "    ") + "return dQ, dK, dE_r\n")


SKEW_OK = """
    *lead, L, _ = dZs.shape
    d_padded = xp.zeros((*lead, L + 1, L), dtype=dZs.dtype)
    d_padded[..., 1:, :] = dZs
    drel = d_padded.reshape(*lead, L, L + 1)[..., 1:]
    dQ = dQ + drel @ cache.Er_L
    dEr_L = xp.einsum("bhtc,bhtd->hcd", drel.reshape(-1, *drel.shape[-3:]), Q4)
    onehot = (cache.rows[:, None] == xp.arange(n_rows)).astype(dZ.dtype)
    dE_r = xp.einsum("hcd,cr->hrd", dEr_L, onehot)
"""
GATHER_OK = """
    onehot = (cache.idx[..., None] == xp.arange(n_rows)).astype(dZ.dtype)
    dR = xp.einsum("...ts,tsr->...tr", dZs, onehot)
    dQ = dQ + dR @ E_r
    dE_r = xp.einsum("bhtr,bhtd->hrd", dR.reshape(-1, *dR.shape[-3:]), Q4)
"""
wrong("skew", "dQ_rel_dropped", {"skew_logits_backward": skew(
    SKEW_OK.replace("    dQ = dQ + drel @ cache.Er_L\n", ""), GATHER_OK)},
    "skew form: dQ without the relative term drel Er_L",
    [r"relative term|drel|Er_L|through rel"], [r"\bdQ\b"])
wrong("skew", "fancy_index_rows", {"skew_logits_backward": skew(SKEW_OK.replace(
    """    onehot = (cache.rows[:, None] == xp.arange(n_rows)).astype(dZ.dtype)
    dE_r = xp.einsum("hcd,cr->hrd", dEr_L, onehot)
""", """    dE_r = xp.zeros_like(E_r)
    dE_r[:, cache.rows] += dEr_L
"""), GATHER_OK)},
    "skew form: dE_r[:, rows] += dEr_L, the clipped distances' repeated row k keeps one",
    [r"repeat|clipped|row k|scatter"], [r"dE_r|line \d+"])
wrong("skew", "dK_unscaled", {"skew_logits_backward": skew(SKEW_OK, GATHER_OK).replace(
    "dK = dZs.swapaxes(-1, -2) @ Q", "dK = dZ.swapaxes(-1, -2) @ Q")},
    "dK without the scale 1/sqrt(d_k)",
    [r"scale|sqrt\(d_k\)|√d_k|d_k"], [r"\bdK\b"])
wrong("skew", "gather_dE_r_mean_batch", {"skew_logits_backward": skew(SKEW_OK, GATHER_OK.replace(
    'dE_r = xp.einsum("bhtr,bhtd->hrd", dR.reshape(-1, *dR.shape[-3:]), Q4)',
    'dE_r = xp.einsum("bhtr,bhtd->hrd", dR.reshape(-1, *dR.shape[-3:]), Q4) / Q4.shape[0]'))},
    "gather form: dE_r averaged over the batch (divided by B)",
    [r"\b1/B\b|batch size|number of (sequences|examples)"], [r"dE_r|gather"])

# adam
ADAM_MOMENTS = """
        m *= beta1
        m += (1 - beta1) * g
        v *= beta2
        v += (1 - beta2) * g * g
"""


def adam(lines, moments=ADAM_MOMENTS):
    return textwrap.dedent(moments) + textwrap.dedent(lines)


wrong("adam", "m_uncorrected", {"adam_update": adam("""
        v_hat = v / (1 - beta2**t)
        theta -= lr * m / (xp.sqrt(v_hat) + eps)
    """)}, "m-hat without its bias correction (m used for m-hat)",
    [r"m.?hat.*(uncorrected|bias correction|without)|(bias correction|uncorrected).*\bm\b"],
    [r"\btheta\b"])
wrong("adam", "v_uncorrected", {"adam_update": adam("""
        m_hat = m / (1 - beta1**t)
        theta -= lr * m_hat / (xp.sqrt(v) + eps)
    """)}, "v-hat without its bias correction (v used for v-hat)",
    [r"v.?hat.*(uncorrected|bias correction|without)|(bias correction|uncorrected).*\bv\b"],
    [r"\btheta\b"])
wrong("adam", "t_plus_1", {"adam_update": adam("""
        m_hat = m / (1 - beta1 ** (t + 1))
        v_hat = v / (1 - beta2 ** (t + 1))
        theta -= lr * m_hat / (xp.sqrt(v_hat) + eps)
    """)}, "the bias corrections with t + 1 (off by one)",
    [r"t ?\+ ?1|off by one|step t\+1"], [r"bias correction"])
wrong("adam", "eps_inside_sqrt", {"adam_update": adam("""
        m_hat = m / (1 - beta1**t)
        v_hat = v / (1 - beta2**t)
        theta -= lr * m_hat / xp.sqrt(v_hat + eps)
    """)}, "eps inside the square root",
    [r"eps.*(inside|under|in) the (square )?root|sqrt\(v.?hat ?\+ ?eps\)"], [r"\btheta\b|eps"])
wrong("adam", "no_sqrt", {"adam_update": adam("""
        m_hat = m / (1 - beta1**t)
        v_hat = v / (1 - beta2**t)
        theta -= lr * m_hat / (v_hat + eps)
    """)}, "v-hat used without its square root",
    [r"square root|sqrt"], [r"\btheta\b"])
wrong("adam", "v_with_g_not_g2", {"adam_update": adam("""
        m_hat = m / (1 - beta1**t)
        v_hat = v / (1 - beta2**t)
        theta -= lr * m_hat / (xp.sqrt(v_hat) + eps)
    """, moments="""
        m *= beta1
        m += (1 - beta1) * g
        v *= beta2
        v += (1 - beta2) * g
    """)}, "v updated with g instead of g^2",
    [r"g\^?2|g \* g|g squared|square of g"], [r"\bv\b"])
wrong("adam", "m_without_1_minus_beta1", {"adam_update": adam("""
        m_hat = m / (1 - beta1**t)
        v_hat = v / (1 - beta2**t)
        theta -= lr * m_hat / (xp.sqrt(v_hat) + eps)
    """, moments="""
        m *= beta1
        m += g
        v *= beta2
        v += (1 - beta2) * g * g
    """)}, "m updated with g instead of (1 - beta1) g",
    [r"1 ?- ?beta1|1 ?- ?β1|\(1-b1\)"], [r"\bm\b"])
wrong("adam", "corrected_moments_stored", {"adam_update": """
        m *= beta1
        m += (1 - beta1) * g
        v *= beta2
        v += (1 - beta2) * g * g
        m /= 1 - beta1**t
        v /= 1 - beta2**t
        theta -= lr * m / (xp.sqrt(v) + eps)
    """}, "the bias-corrected m-hat and v-hat written into m and v (the correction compounds)",
    [r"(m|v).?hat.*(stored|written|kept|in place of|into) (m|v)|corrected moments"],
    [r"\bm\b|\bv\b"])

# -- writing the files ---------------------------------------------------------------------


def stubs(folder: Path) -> dict:
    names = sorted({ex for ex, *_ in P})
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for n in names:
        subprocess.run(
            [sys.executable, "-m", "scratchformer", "exercise", "start", n, "--dir", str(folder)],
            check=True, env=env, capture_output=True,
        )
    return {n: (folder / f"{n}.py").read_text() for n in names}


def fill(stub: str, ex: str, bodies: dict) -> str:
    """The stub with every body to write filled: ``bodies``' own, the rest right."""
    lines = stub.splitlines(keepends=True)
    out = []
    current = None
    for line in lines:
        if line.startswith("def "):
            current = line[4:].split("(")[0]
        if line.strip().startswith("raise NotImplementedError("):
            body = bodies.get(current, RIGHT.get((ex, current)))
            out.append(textwrap.indent(textwrap.dedent(body).strip("\n") + "\n", "    "))
            continue
        out.append(line)
    return "# ruff: noqa\n" + "".join(out)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        stub = stubs(Path(tmp))
    OUT.mkdir(exist_ok=True)
    manifest = []
    for i, (ex, short, bodies, words, named, pointed) in enumerate(P, 1):
        name = f"{i:02d}_{ex}_{short}.py"
        (OUT / name).write_text(fill(stub[ex], ex, bodies))
        manifest.append(
            {"file": name, "exercise": ex, "mistake": words, "named": named, "pointed": pointed}
        )
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    if "--right" in sys.argv:
        for ex in sorted(stub):
            (OUT.parent / "right").mkdir(exist_ok=True)
            (OUT.parent / "right" / f"{ex}.py").write_text(fill(stub[ex], ex, {}))
    print(f"{len(P)} wrong passes written to {OUT}")


if __name__ == "__main__":
    main()
