"""How ``scratchformer exercise check`` answers wrong backward passes written fresh for
this measurement (none is a catalogued mistake's code): rejected, named, pointed at.

    PYTHONPATH=<tree> python benchmarks/exercise_wrong_passes.py run > rows.json
    python benchmarks/exercise_wrong_passes.py table before.json after.json
    PYTHONPATH=<tree> python benchmarks/exercise_wrong_passes.py run --set fresh > fresh.json
    python benchmarks/exercise_wrong_passes.py table --set fresh fresh.json [after.json]

``run`` writes each wrong pass into a learner's file of a temporary folder (the file
``exercise start`` writes, with the pass in place of the body to fill in; in a tree
without ``scratchformer.kernels``, ``kernels.linear.backward`` is written as that tree
calls it, ``linear.backward``) and grades it
as ``check`` does, with the package found on PYTHONPATH: so one script measures two
trees (the code before a change and after it). Per pass: the status, and whether the
report names what is wrong (a catalogued mistake "recognised", a diagnosis "found:", or
a one-line reason: an input changed, a shortcut, a drawn shape), points at it (the
wrong entries, or a line of the learner's file), or says "not a mistake we know".
``table`` prints the counts of two runs side by side, and a row per pass.

``--set fresh`` grades exercise_wrong_passes_fresh.py's passes instead, each of which
declares its mistake (kind, term, factor, keywords). Per pass: "passed"; "named" when the
report, its title line and the names of its inputs left out, holds one of the pass's
keywords, or when a diagnosis of its own (above) gives the pass's factor (or a sign, for
a sign-flipped term); "pointed" when it points at the wrong entries, a line or a shape
without naming the mistake; "unnamed" otherwise.

A benchmark, not a test: nothing here asserts.
"""

# ruff: noqa: E501 -- the wrong passes are data, one per row
from __future__ import annotations

import inspect
import json
import re
import sys
import tempfile
import textwrap
from pathlib import Path

# -- right bodies, for the functions a pass leaves alone ------------------------------------
CORE = """\
    dA = dO @ cache.V.swapaxes(-1, -2)
    if dA_drop is not None:
        dA = dA + dA_drop
    dV = cache.A_drop.swapaxes(-1, -2) @ dO
    if cache.dropout.mask is not None:
        dA = dA * cache.dropout.mask * cache.dropout.scale
    P = cache.softmax.P
    return P * (dA - (dA * P).sum(axis=-1, keepdims=True)), dV
"""
LOGITS = """\
    Q, K, s = cache
    return s * (dZ @ K), s * (dZ.swapaxes(-1, -2) @ Q)
"""
EXIT = """\
    dr = dy if self.norm_first else self._norm_backward(dy, cache.norm)
    return dr, self.dropout.backward(dr, cache.dropout)
"""
ENTER = """\
    return self._norm_backward(ds_in, cache.norm) if self.norm_first else ds_in
"""
RIGHT = {
    "attention_core_backward": CORE,
    "dot_product_logits_backward": LOGITS,
    "add_norm_exit_backward": EXIT,
    "add_norm_enter_backward": ENTER,
}

LN = """\
    xhat, rstd, gamma = cache
    D = xhat.shape[-1]
    dxhat = dout * gamma
    dx = rstd * (dxhat - dxhat.mean(axis=-1, keepdims=True)
                 - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True))
    dgamma = (dout * xhat).reshape(-1, D).sum(0)
    dbeta = dout.reshape(-1, D).sum(0)
"""
CE = """\
    P, target, V = cache.P, cache.target, cache.V
    eps = cache.eps
    off = eps / (V - 1) if eps else 0.0
    q = off + (xp.arange(V) == target[..., None]) * (1.0 - eps - off)
    keep = cache.keep[..., None]
    n = float(max(int(cache.n_tokens), 1))
"""
MHA_HEAD = """\
    dO_m, dW_o, _ = kernels.linear.backward(dout, cache.o_proj)
    dQ, dK, dV = self.attend_backward(split_heads(dO_m, self.h), cache.attn)
    dx_q, dW_q, _ = kernels.linear.backward(merge_heads(dQ), cache.q_proj)
    dx_k, dW_k, _ = kernels.linear.backward(merge_heads(dK), cache.k_proj)
    dx_v, dW_v, _ = kernels.linear.backward(merge_heads(dV), cache.v_proj)
"""
MHA_ADD = """\
    self.grads["W_o"] += dW_o
    self.grads["W_q"] += dW_q
    self.grads["W_k"] += dW_k
    self.grads["W_v"] += dW_v
"""
FFN_HEAD = """\
    g = self.grads
    da, dW_2, db_2 = kernels.linear.backward(dout, cache.lin2)
    da = self.dropout.backward(da, cache.drop)
    du = self.activation.backward(da, cache.act)
    dx, dW_1, db_1 = kernels.linear.backward(du, cache.lin1)
"""
FFN_ADD = """\
    g["W_2"] += dW_2
    g["b_2"] += db_2
    g["W_1"] += dW_1
    g["b_1"] += db_1
"""
ENC = """\
    c = cache.ffn
    dx, df = self.ffn_norm.exit_backward(dout, c.exit)
    dsub = self.ffn_norm.enter_backward(self.ffn.backward(df, c.sublayer), c.enter)
"""
DEC = """\
    c = cache.ffn
    dy, df = self.ffn_norm.exit_backward(dout, c.exit)
    dy = dy + self.ffn_norm.enter_backward(self.ffn.backward(df, c.sublayer), c.enter)
    c = cache.cross_attn
    dy_res, dx = self.cross_attn_norm.exit_backward(dy, c.exit)
    dx_q, dmemory = self.cross_attn.backward(dx, c.sublayer)
"""
ADAM = """\
    m *= beta1
    m += (1 - beta1) * g
    v *= beta2
    v += (1 - beta2) * g * g
"""

# (exercise, label, generic class or "", {function: body})
WRONG = [
    # -- one per generic class ------------------------------------------------------------
    (
        "linear",
        "dx with its sign flipped",
        "sign",
        {
            "linear_backward": """\
    x, W, has_bias = cache
    D, E = W.shape
    dx = -(dout @ W.T)
    dW = x.reshape(-1, D).T @ dout.reshape(-1, E)
    return dx, dW, dout.reshape(-1, E).sum(0) if has_bias else None
"""
        },
    ),
    (
        "attention",
        "dQ scaled by s twice",
        "factor 1/sqrt(d_k)",
        {
            "dot_product_logits_backward": """\
    Q, K, s = cache
    return s * s * (dZ @ K), s * (dZ.swapaxes(-1, -2) @ Q)
"""
        },
    ),
    (
        "dropout",
        "the survivors' scale applied twice",
        "factor 1/(1-p)",
        {
            "dropout_backward": """\
    if cache.mask is None:
        return dout.copy()
    return dout * cache.mask * (cache.scale * cache.scale)
"""
        },
    ),
    (
        "cross_entropy",
        "the mean's 1/n left out",
        "factor n targets",
        {
            "cross_entropy_backward": CE
            + """\
    return ((P - q) * keep * dout).astype(P.dtype)
"""
        },
    ),
    (
        "layernorm",
        "dbeta added twice",
        "factor 2",
        {
            "layernorm_backward": LN
            + """\
    return dx, dgamma, dbeta + dbeta
"""
        },
    ),
    (
        "layernorm",
        "dgamma and dbeta swapped",
        "swap",
        {
            "layernorm_backward": LN
            + """\
    return dx, dbeta, dgamma
"""
        },
    ),
    (
        "relu",
        "a gradient of zeros",
        "all-zero",
        {
            "relu_backward": """\
    return xp.zeros_like(dout)
"""
        },
    ),
    (
        "softmax",
        "masked entries given dout",
        "masked-only",
        {
            "softmax_backward": """\
    P = cache.P
    dx = (dout - (dout * P).sum(axis=-1, keepdims=True)) * P
    return xp.where(P == 0, dout, dx)
"""
        },
    ),
    (
        "embedding",
        "dE[ids] = dout: repeats overwrite",
        "repeated-ids-only",
        {
            "embedding_backward": """\
    ids, V, pad_id = cache
    d = dout.shape[-1]
    dE = xp.zeros((V, d), dtype=dout.dtype)
    dE[ids.reshape(-1)] = dout.reshape(-1, d)
    if pad_id is not None:
        dE[pad_id] = 0
    return dE
"""
        },
    ),
    # -- the blind spots ------------------------------------------------------------------
    (
        "dropout",
        "in place: dout *= mask",
        "",
        {
            "dropout_backward": """\
    if cache.mask is None:
        return dout
    dout *= cache.mask
    dout *= cache.scale
    return dout
"""
        },
    ),
    (
        "linear",
        "zeroes cache.x after use",
        "",
        {
            "linear_backward": """\
    x, W, has_bias = cache
    D, E = W.shape
    dW = x.reshape(-1, D).T @ dout.reshape(-1, E)
    x[...] = 0.0
    return dout @ W.T, dW, dout.reshape(-1, E).sum(0) if has_bias else None
"""
        },
    ),
    (
        "linear",
        "a shape written in: reshape(6, ...)",
        "",
        {
            "linear_backward": """\
    x, W, has_bias = cache
    D, E = W.shape
    dW = x.reshape(6, D).T @ dout.reshape(6, E)
    return dout @ W.T, dW, dout.reshape(6, E).sum(0) if has_bias else None
"""
        },
    ),
    (
        "relu",
        "in place: dout[~positive] = 0",
        "",
        {
            "relu_backward": """\
    dout[~cache.positive] = 0.0
    return dout
"""
        },
    ),
    (
        "encoder_layer",
        "dx += into exit_backward's result",
        "",
        {
            "encoder_layer_backward": ENC
            + """\
    dx += dsub
    c = cache.self_attn
    dx_res, da = self.self_attn_norm.exit_backward(dx, c.exit)
    da_q, da_kv = self.self_attn.backward(da, c.sublayer)
    return dx_res + self.self_attn_norm.enter_backward(da_q + da_kv, c.enter)
"""
        },
    ),
    # -- more: linear ---------------------------------------------------------------------
    (
        "linear",
        "dW = dout^T x, transposed",
        "",
        {
            "linear_backward": """\
    x, W, has_bias = cache
    D, E = W.shape
    dW = dout.reshape(-1, E).T @ x.reshape(-1, D)
    return dout @ W.T, dW, dout.reshape(-1, E).sum(0) if has_bias else None
"""
        },
    ),
    (
        "linear",
        "db = dout.sum(0) over the batch axis only",
        "",
        {
            "linear_backward": """\
    x, W, has_bias = cache
    D, E = W.shape
    dW = x.reshape(-1, D).T @ dout.reshape(-1, E)
    db = dout.sum(axis=0) if has_bias else None
    return dout @ W.T, dW, db
"""
        },
    ),
    (
        "linear",
        "dW from x's first position only",
        "",
        {
            "linear_backward": """\
    x, W, has_bias = cache
    D, E = W.shape
    dW = x[..., :1, :].reshape(-1, D).T @ dout[..., :1, :].reshape(-1, E)
    return dout @ W.T, dW, dout.reshape(-1, E).sum(0) if has_bias else None
"""
        },
    ),
    (
        "linear",
        "db returned without a bias",
        "",
        {
            "linear_backward": """\
    x, W, has_bias = cache
    D, E = W.shape
    dW = x.reshape(-1, D).T @ dout.reshape(-1, E)
    return dout @ W.T, dW, dout.reshape(-1, E).sum(0)
"""
        },
    ),
    (
        "linear",
        "dW averaged over rows",
        "",
        {
            "linear_backward": """\
    x, W, has_bias = cache
    D, E = W.shape
    dW = x.reshape(-1, D).T @ dout.reshape(-1, E) / x.reshape(-1, D).shape[0]
    return dout @ W.T, dW, dout.reshape(-1, E).sum(0) if has_bias else None
"""
        },
    ),
    # -- relu, gelu -----------------------------------------------------------------------
    (
        "relu",
        "mask of x >= 0 read as x < 0 plus one",
        "",
        {
            "relu_backward": """\
    return dout * (1.0 - cache.positive) + 0.0 * dout
"""
        },
    ),
    (
        "relu",
        "dout squared",
        "",
        {
            "relu_backward": """\
    return dout * dout * cache.positive
"""
        },
    ),
    (
        "gelu",
        "without the 0.5 of the second term",
        "",
        {
            "gelu_backward": """\
    x, t = cache
    du = _GELU_C * (1.0 + 3.0 * _GELU_A * x * x)
    return dout * (0.5 * (1.0 + t) + x * (1.0 - t * t) * du)
"""
        },
    ),
    (
        "gelu",
        "du/dx with a instead of 3a",
        "",
        {
            "gelu_backward": """\
    x, t = cache
    du = _GELU_C * (1.0 + _GELU_A * x * x)
    return dout * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du)
"""
        },
    ),
    (
        "gelu",
        "the derivative of x Phi(x) for the exact GELU",
        "",
        {
            "gelu_backward": """\
    x, t = cache
    phi = xp.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    return dout * (0.5 * (1.0 + t) + x * phi)
"""
        },
    ),
    (
        "gelu",
        "returns the forward's value",
        "",
        {
            "gelu_backward": """\
    x, t = cache
    return dout * 0.5 * x * (1.0 + t)
"""
        },
    ),
    (
        "gelu",
        "float64 result on float32 inputs",
        "",
        {
            "gelu_backward": """\
    x, t = cache
    du = _GELU_C * (1.0 + 3.0 * _GELU_A * x * x)
    out = dout * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du)
    return out.astype("float64")
"""
        },
    ),
    # -- embedding ------------------------------------------------------------------------
    (
        "embedding",
        "the padding row not zeroed, and mean over repeats",
        "",
        {
            "embedding_backward": """\
    ids, V, pad_id = cache
    d = dout.shape[-1]
    dE = device.segment_sum(ids.reshape(-1), dout.reshape(-1, d), V)
    counts = xp.bincount(ids.reshape(-1), minlength=V)[:, None]
    return dE / xp.maximum(counts, 1)
"""
        },
    ),
    (
        "embedding",
        "dE of shape (B*T, D)",
        "",
        {
            "embedding_backward": """\
    return dout.reshape(-1, dout.shape[-1]).copy()
"""
        },
    ),
    (
        "embedding",
        "padding zeroed at position 0 instead of row pad_id",
        "",
        {
            "embedding_backward": """\
    ids, V, pad_id = cache
    d = dout.shape[-1]
    dE = device.segment_sum(ids.reshape(-1), dout.reshape(-1, d), V)
    if pad_id is not None:
        dE[ids.reshape(-1)[0]] = 0
    return dE
"""
        },
    ),
    # -- softmax --------------------------------------------------------------------------
    (
        "softmax",
        "the row sum without P",
        "",
        {
            "softmax_backward": """\
    P = cache.P
    return (dout - dout.sum(axis=-1, keepdims=True)) * P
"""
        },
    ),
    (
        "softmax",
        "the row sum of dout * P, not multiplied back by P",
        "",
        {
            "softmax_backward": """\
    P = cache.P
    return dout * P - (dout * P).sum(axis=-1, keepdims=True)
"""
        },
    ),
    (
        "softmax",
        "(dout - mean(dout)) * P",
        "",
        {
            "softmax_backward": """\
    P = cache.P
    return (dout - dout.mean(axis=-1, keepdims=True)) * P
"""
        },
    ),
    (
        "softmax",
        "the Jacobian's transpose applied on the wrong side",
        "",
        {
            "softmax_backward": """\
    P = cache.P
    return dout * P - P * (P * P).sum(axis=-1, keepdims=True) * dout
"""
        },
    ),
    # -- layer norm -----------------------------------------------------------------------
    (
        "layernorm",
        "rstd squared in dx",
        "",
        {
            "layernorm_backward": LN
            + """\
    return dx * rstd, dgamma, dbeta
"""
        },
    ),
    (
        "layernorm",
        "the variance term's sign",
        "",
        {
            "layernorm_backward": """\
    xhat, rstd, gamma = cache
    D = xhat.shape[-1]
    dxhat = dout * gamma
    dx = rstd * (dxhat - dxhat.mean(axis=-1, keepdims=True)
                 + xhat * (dxhat * xhat).mean(axis=-1, keepdims=True))
    return dx, (dout * xhat).reshape(-1, D).sum(0), dout.reshape(-1, D).sum(0)
"""
        },
    ),
    (
        "layernorm",
        "dgamma without xhat",
        "",
        {
            "layernorm_backward": LN
            + """\
    return dx, dbeta.copy(), dbeta
"""
        },
    ),
    (
        "layernorm",
        "dgamma, dbeta not summed over rows",
        "",
        {
            "layernorm_backward": LN
            + """\
    return dx, dout * xhat, dout
"""
        },
    ),
    (
        "layernorm",
        "mean over all entries, not each row",
        "",
        {
            "layernorm_backward": """\
    xhat, rstd, gamma = cache
    D = xhat.shape[-1]
    dxhat = dout * gamma
    dx = rstd * (dxhat - dxhat.mean() - xhat * (dxhat * xhat).mean())
    return dx, (dout * xhat).reshape(-1, D).sum(0), dout.reshape(-1, D).sum(0)
"""
        },
    ),
    # -- dropout --------------------------------------------------------------------------
    (
        "dropout",
        "the mask inverted",
        "",
        {
            "dropout_backward": """\
    if cache.mask is None:
        return dout.copy()
    return dout * (~cache.mask) * cache.scale
"""
        },
    ),
    (
        "dropout",
        "divided by the scale",
        "",
        {
            "dropout_backward": """\
    if cache.mask is None:
        return dout.copy()
    return dout * cache.mask / cache.scale
"""
        },
    ),
    (
        "dropout",
        "a fresh mask drawn",
        "",
        {
            "dropout_backward": """\
    if cache.mask is None:
        return dout.copy()
    keep = xp.asarray(__import__("numpy").random.default_rng(0).random(dout.shape) < 0.7)
    return dout * keep * cache.scale
"""
        },
    ),
    # -- cross-entropy --------------------------------------------------------------------
    (
        "cross_entropy",
        "P - q without dout",
        "",
        {
            "cross_entropy_backward": CE
            + """\
    return ((P - q) * keep / n).astype(P.dtype)
"""
        },
    ),
    (
        "cross_entropy",
        "q - P",
        "",
        {
            "cross_entropy_backward": CE
            + """\
    return ((q - P) * keep * (dout / n)).astype(P.dtype)
"""
        },
    ),
    (
        "cross_entropy",
        "eps/(V-2) smoothing",
        "",
        {
            "cross_entropy_backward": """\
    P, target, V, eps = cache.P, cache.target, cache.V, cache.eps
    off = eps / (V - 2) if eps else 0.0
    q = off + (xp.arange(V) == target[..., None]) * (1.0 - eps - off)
    n = float(max(int(cache.n_tokens), 1))
    return ((P - q) * cache.keep[..., None] * (dout / n)).astype(P.dtype)
"""
        },
    ),
    (
        "cross_entropy",
        "padding rows given P - q",
        "",
        {
            "cross_entropy_backward": CE
            + """\
    return ((P - q) * (dout / n)).astype(P.dtype)
"""
        },
    ),
    (
        "cross_entropy",
        "the target's weight 1 - eps, no smoothing elsewhere",
        "",
        {
            "cross_entropy_backward": CE
            + """\
    q1 = (xp.arange(V) == target[..., None]) * (1.0 - eps)
    return ((P - q1) * keep * (dout / n)).astype(P.dtype)
"""
        },
    ),
    # -- attention ------------------------------------------------------------------------
    (
        "attention",
        "dK without the scale",
        "factor 1/sqrt(d_k)",
        {
            "dot_product_logits_backward": """\
    Q, K, s = cache
    return s * (dZ @ K), dZ.swapaxes(-1, -2) @ Q
"""
        },
    ),
    (
        "attention",
        "dQ's queries in reverse order",
        "",
        {
            "dot_product_logits_backward": """\
    Q, K, s = cache
    return s * (dZ @ K)[..., ::-1, :], s * (dZ.swapaxes(-1, -2) @ Q)
"""
        },
    ),
    (
        "attention",
        "dV with A before dropout",
        "",
        {
            "attention_core_backward": CORE.replace(
                "dV = cache.A_drop.swapaxes", "dV = cache.softmax.P.swapaxes"
            )
        },
    ),
    (
        "attention",
        "dropout's scale left out",
        "",
        {"attention_core_backward": CORE.replace(" * cache.dropout.scale", "")},
    ),
    (
        "attention",
        "dA_drop added after the softmax",
        "",
        {
            "attention_core_backward": """\
    dA = dO @ cache.V.swapaxes(-1, -2)
    dV = cache.A_drop.swapaxes(-1, -2) @ dO
    if cache.dropout.mask is not None:
        dA = dA * cache.dropout.mask * cache.dropout.scale
    P = cache.softmax.P
    dZ = P * (dA - (dA * P).sum(axis=-1, keepdims=True))
    return (dZ if dA_drop is None else dZ + dA_drop), dV
"""
        },
    ),
    (
        "attention",
        "softmax row sum over the queries",
        "",
        {
            "attention_core_backward": CORE.replace(
                "(dA * P).sum(axis=-1, keepdims=True)", "(dA * P).sum(axis=-2, keepdims=True)"
            )
        },
    ),
    (
        "attention",
        "dV summed over the heads",
        "",
        {
            "attention_core_backward": CORE.replace(
                "return P * (dA - (dA * P).sum(axis=-1, keepdims=True)), dV",
                "return P * (dA - (dA * P).sum(axis=-1, keepdims=True)), "
                "xp.broadcast_to(dV.sum(axis=1, keepdims=True), dV.shape).copy()",
            )
        },
    ),
    # -- multi-head attention -------------------------------------------------------------
    (
        "multi_head_attention",
        "the value path left out of dx_kv",
        "",
        {"multi_head_attention_backward": MHA_HEAD + MHA_ADD + "    return dx_q, dx_k\n"},
    ),
    (
        "multi_head_attention",
        "W_o's gradient not added",
        "",
        {
            "multi_head_attention_backward": MHA_HEAD
            + MHA_ADD.replace('    self.grads["W_o"] += dW_o\n', "")
            + "    return dx_q, dx_k + dx_v\n"
        },
    ),
    (
        "multi_head_attention",
        "dW_q and dW_k swapped",
        "",
        {
            "multi_head_attention_backward": MHA_HEAD
            + """\
    self.grads["W_o"] += dW_o
    self.grads["W_q"] += dW_k
    self.grads["W_k"] += dW_q
    self.grads["W_v"] += dW_v
    return dx_q, dx_k + dx_v
"""
        },
    ),
    (
        "multi_head_attention",
        "dx_q and dx_kv swapped",
        "swap",
        {"multi_head_attention_backward": MHA_HEAD + MHA_ADD + "    return dx_k + dx_v, dx_q\n"},
    ),
    (
        "multi_head_attention",
        "dx_kv halved (mean of the two paths)",
        "",
        {
            "multi_head_attention_backward": MHA_HEAD
            + MHA_ADD
            + "    return dx_q, (dx_k + dx_v) / 2\n"
        },
    ),
    # -- ffn ------------------------------------------------------------------------------
    (
        "ffn",
        "b_1's gradient assigned",
        "",
        {
            "ffn_backward": FFN_HEAD
            + FFN_ADD.replace('g["b_1"] += db_1', 'g["b_1"] = db_1')
            + "    return dx\n"
        },
    ),
    (
        "ffn",
        "the hidden dropout's backward applied twice",
        "",
        {
            "ffn_backward": """\
    g = self.grads
    da, dW_2, db_2 = kernels.linear.backward(dout, cache.lin2)
    da = self.dropout.backward(self.dropout.backward(da, cache.drop), cache.drop)
    du = self.activation.backward(da, cache.act)
    dx, dW_1, db_1 = kernels.linear.backward(du, cache.lin1)
"""
            + FFN_ADD
            + "    return dx\n"
        },
    ),
    (
        "ffn",
        "W_2's gradient added twice",
        "",
        {"ffn_backward": FFN_HEAD + FFN_ADD + '    g["W_2"] += dW_2\n    return dx\n'},
    ),
    (
        "ffn",
        "dx returned as dx * 2",
        "",
        {"ffn_backward": FFN_HEAD + FFN_ADD + "    return 2 * dx\n"},
    ),
    # -- add & norm -----------------------------------------------------------------------
    (
        "add_norm",
        "ds without the residual dropout's backward",
        "",
        {
            "add_norm_exit_backward": """\
    dr = dy if self.norm_first else self._norm_backward(dy, cache.norm)
    return dr, dr * 1.0
"""
        },
    ),
    (
        "add_norm",
        "pre-LN enter returns zeros",
        "",
        {
            "add_norm_enter_backward": """\
    return self._norm_backward(ds_in, cache.norm) * 0.0 if self.norm_first else ds_in
"""
        },
    ),
    (
        "add_norm",
        "the LayerNorm's backward run twice",
        "",
        {
            "add_norm_exit_backward": """\
    dr = dy if self.norm_first else self._norm_backward(dy, cache.norm)
    ds = self.dropout.backward(dr, cache.dropout)
    if not self.norm_first:
        self._norm_backward(dy, cache.norm)
    return dr, ds
"""
        },
    ),
    # -- encoder, decoder -----------------------------------------------------------------
    (
        "encoder_layer",
        "the FFN's residual left out",
        "",
        {
            "encoder_layer_backward": ENC
            + """\
    c = cache.self_attn
    dx_res, da = self.self_attn_norm.exit_backward(dsub, c.exit)
    da_q, da_kv = self.self_attn.backward(da, c.sublayer)
    return dx_res + self.self_attn_norm.enter_backward(da_q + da_kv, c.enter)
"""
        },
    ),
    (
        "encoder_layer",
        "self-attention's key/value path left out",
        "",
        {
            "encoder_layer_backward": ENC
            + """\
    dx = dx + dsub
    c = cache.self_attn
    dx_res, da = self.self_attn_norm.exit_backward(dx, c.exit)
    da_q, da_kv = self.self_attn.backward(da, c.sublayer)
    return dx_res + self.self_attn_norm.enter_backward(da_q, c.enter)
"""
        },
    ),
    (
        "encoder_layer",
        "the sub-layers in forward order",
        "",
        {
            "encoder_layer_backward": """\
    c = cache.self_attn
    dx_res, da = self.self_attn_norm.exit_backward(dout, c.exit)
    da_q, da_kv = self.self_attn.backward(da, c.sublayer)
    dx = dx_res + self.self_attn_norm.enter_backward(da_q + da_kv, c.enter)
    c = cache.ffn
    dx2, df = self.ffn_norm.exit_backward(dx, c.exit)
    return dx2 + self.ffn_norm.enter_backward(self.ffn.backward(df, c.sublayer), c.enter)
"""
        },
    ),
    (
        "decoder_layer",
        "dmemory not returned: zeros",
        "all-zero",
        {
            "decoder_layer_backward": DEC
            + """\
    dy = dy_res + self.cross_attn_norm.enter_backward(dx_q, c.enter)
    c = cache.self_attn
    dy_res, da = self.self_attn_norm.exit_backward(dy, c.exit)
    da_q, da_kv = self.self_attn.backward(da, c.sublayer)
    return dy_res + self.self_attn_norm.enter_backward(da_q + da_kv, c.enter), 0 * dmemory
"""
        },
    ),
    (
        "decoder_layer",
        "the cross-attention's residual left out",
        "",
        {
            "decoder_layer_backward": DEC
            + """\
    dy = self.cross_attn_norm.enter_backward(dx_q, c.enter)
    c = cache.self_attn
    dy_res, da = self.self_attn_norm.exit_backward(dy, c.exit)
    da_q, da_kv = self.self_attn.backward(da, c.sublayer)
    return dy_res + self.self_attn_norm.enter_backward(da_q + da_kv, c.enter), dmemory
"""
        },
    ),
    (
        "decoder_layer",
        "dmemory's sign",
        "sign",
        {
            "decoder_layer_backward": DEC
            + """\
    dy = dy_res + self.cross_attn_norm.enter_backward(dx_q, c.enter)
    c = cache.self_attn
    dy_res, da = self.self_attn_norm.exit_backward(dy, c.exit)
    da_q, da_kv = self.self_attn.backward(da, c.sublayer)
    return dy_res + self.self_attn_norm.enter_backward(da_q + da_kv, c.enter), -dmemory
"""
        },
    ),
    # -- shaw -----------------------------------------------------------------------------
    (
        "shaw",
        "dE_k left at zero",
        "all-zero",
        {
            "shaw_logits_backward": """\
    Q, K, E_k, idx, scale = cache
    R = E_k.shape[0]
    dZ = dZ * scale
    onehot = (idx[..., None] == xp.arange(R)).astype(dZ.dtype)  # (T, S, R)
    dRel = xp.einsum("bhts,tsr->bhtr", dZ, onehot)
    dQ = dZ @ K + dRel @ E_k
    dK = dZ.swapaxes(-1, -2) @ Q
    return dQ, dK, xp.zeros_like(E_k)
"""
        },
    ),
    (
        "shaw",
        "dK without the scale",
        "factor 1/sqrt(d_k)",
        {
            "shaw_logits_backward": """\
    Q, K, E_k, idx, scale = cache
    R = E_k.shape[0]
    dK = dZ.swapaxes(-1, -2) @ Q
    dZ = dZ * scale
    onehot = (idx[..., None] == xp.arange(R)).astype(dZ.dtype)
    dRel = xp.einsum("bhts,tsr->bhtr", dZ, onehot)
    dQ = dZ @ K + dRel @ E_k
    dE_k = dRel.reshape(-1, R).T @ Q.reshape(-1, Q.shape[-1])
    return dQ, dK, dE_k
"""
        },
    ),
    # -- adam -----------------------------------------------------------------------------
    (
        "adam",
        "m and v swapped in the update",
        "swap",
        {
            "adam_update": """\
    m_new = beta2 * m + (1 - beta2) * g * g
    v_new = beta1 * v + (1 - beta1) * g
    m_hat = v_new / (1 - beta1**t)
    v_hat = m_new / (1 - beta2**t)
    theta -= lr * m_hat / (xp.sqrt(v_hat) + eps)
    m[...], v[...] = m_new, v_new
"""
        },
    ),
    (
        "adam",
        "theta += instead of -=",
        "sign",
        {
            "adam_update": ADAM
            + """\
    theta += lr * (m / (1 - beta1**t)) / (xp.sqrt(v / (1 - beta2**t)) + eps)
"""
        },
    ),
    (
        "adam",
        "v from |g|, not g^2",
        "",
        {
            "adam_update": """\
    m *= beta1
    m += (1 - beta1) * g
    v *= beta2
    v += (1 - beta2) * abs(g)
    theta -= lr * (m / (1 - beta1**t)) / (xp.sqrt(v / (1 - beta2**t)) + eps)
"""
        },
    ),
    (
        "adam",
        "lr applied twice",
        "",
        {
            "adam_update": ADAM
            + """\
    theta -= lr * lr * (m / (1 - beta1**t)) / (xp.sqrt(v / (1 - beta2**t)) + eps)
"""
        },
    ),
    (
        "adam",
        "bias correction with beta1 for both",
        "",
        {
            "adam_update": ADAM
            + """\
    theta -= lr * (m / (1 - beta1**t)) / (xp.sqrt(v / (1 - beta1**t)) + eps)
"""
        },
    ),
    (
        "adam",
        "the update before the moments",
        "",
        {
            "adam_update": """\
    theta -= lr * (m / (1 - beta1**t)) / (xp.sqrt(v / (1 - beta2**t)) + eps)
"""
            + ADAM
        },
    ),
    # -- shortcuts and crashes ------------------------------------------------------------
    ("relu", "calls exit()", "", {"relu_backward": "    exit()\n"}),
    ("gelu", "an endless loop", "", {"gelu_backward": "    while True:\n        pass\n"}),
    (
        "linear",
        "imports the engine's linear_backward",
        "",
        {
            "linear_backward": """\
    from scratchformer.engine.ops.linear import linear_backward as engine
    return engine(dout, cache)
"""
        },
    ),
]


def _layout(body: str) -> str:
    """A body written for the layout with ``scratchformer.kernels`` (``kernels.linear.backward``),
    as a tree without it calls the op: ``linear.backward``, with ``from
    scratchformer.engine.ops.linear import linear``. The sets themselves are unchanged."""
    import scratchformer  # noqa: PLC0415 - the package on PYTHONPATH, read by its folder

    top = Path(scratchformer.__file__).resolve().parent
    if (top / "kernels").is_dir() or (top / "kernels.py").is_file():
        return body
    return body.replace("kernels.linear.backward", "linear.backward").replace(
        "from scratchformer import kernels", "from scratchformer.engine.ops.linear import linear"
    )


def file_for(ex, code: dict) -> str:
    """The learner's file of ``ex`` with each function's body replaced."""
    text = _layout(ex.file_text())
    for fn in ex.functions:
        stub = f'    raise NotImplementedError("{fn}: not written yet")\n'
        body = code.get(fn, RIGHT.get(fn))
        assert body is not None, (ex.name, fn)
        text = text.replace(stub, textwrap.indent(textwrap.dedent(_layout(body)), "    "))
    return text


def run(fresh: bool = False) -> None:
    from scratchformer.exercises import EXERCISES, files
    from scratchformer.exercises.grade import grade, report

    try:
        from scratchformer.exercises import isolate  # the child process, where there is one
    except ImportError:
        isolate = None
    seeded = "seed" in inspect.signature(grade).parameters
    rows = []
    passes = _fresh_set() if fresh else [None] * len(WRONG)
    wrong = [(p["exercise"], p["label"], p["kind"], p["code"]) for p in passes] if fresh else WRONG
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, label, generic, code) in enumerate(wrong):
            ex = EXERCISES[name]
            path = Path(tmp) / f"w{i}" / f"{name}.py"
            path.parent.mkdir()
            path.write_text(file_for(ex, code))
            if isolate is not None:
                g = isolate.graded(ex, path, 12345, 20.0 if fresh else 5.0)
            elif name == "gelu" and "while True" in code.get("gelu_backward", ""):
                rows.append(_row(name, label, generic, "hangs (no time limit: not run)", ""))
                continue
            elif name == "relu" and "exit()" in code.get("relu_backward", ""):
                rows.append(_row(name, label, generic, "ends the process, status 0", ""))
                continue
            else:
                try:
                    g = grade(ex, files.load(path, ex), path, **({"seed": 12345} if seeded else {}))
                except Exception as e:  # noqa: BLE001 - what the old code let through
                    rows.append(_row(name, label, generic, f"error: {e}", ""))
                    continue
            text = "\n".join(report(g))
            row = _row(name, label, generic, g.status, text)
            rows.append(row if passes[i] is None else _fresh_row(row, passes[i], text))
    json.dump(rows, sys.stdout, indent=1)


def _fresh_set() -> list:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from exercise_wrong_passes_fresh import FRESH  # noqa: PLC0415

    return FRESH


def _keyword_found(keywords, text: str) -> list:
    """The keywords that occur in ``text`` (lowercase, whitespace folded), each starting
    and ending at a word boundary; a keyword ending in "*" is a prefix."""
    found = []
    for kw in keywords:
        k = kw.lower()
        prefix = k.endswith("*")
        k = k.rstrip("*")
        left = "(?<![a-z0-9])" if k[0].isalnum() else ""
        right = "" if prefix or not k[-1].isalnum() else "(?![a-z0-9])"
        if re.search(left + re.escape(k) + right, text):
            found.append(kw)
    return found


def _fresh_row(row: dict, p: dict, text: str) -> dict:
    """``row`` with the pass's declared mistake and whether the report names it."""
    lines = text.splitlines()[1:]  # the title line names the exercise, not a mistake
    body = re.sub(r"\(input: .*?\):", ":", "\n".join(lines))  # nor do the inputs' names
    flat = " ".join(body.lower().split())
    found = _keyword_found(p["keywords"], flat) if row["rejected"] else []
    by_harness = False
    if row["rejected"] and row["named"]:
        # the harness's own classes: a diagnosis that gives the pass's factor, or a sign
        # for a pass whose mistake is a sign
        mark = p["factor"] or ("sign" if p["kind"] == "sign-flipped term" else None)
        mark = mark and mark.lower().replace(" ", "")
        diagnoses = [x.strip().lower().replace(" ", "") for x in lines]
        by_harness = bool(mark) and any(
            x.startswith(("recognised", "found:")) and mark in x for x in diagnoses
        )
    if not row["rejected"]:
        verdict = "passed"
    elif found or by_harness:
        verdict = "named"
    elif row["pointed"]:
        verdict = "pointed"
    else:
        verdict = "unnamed"
    return {**row, "kind": p["kind"], "term": p["term"], "factor": p["factor"],
            "keywords_found": found, "named_by_diagnosis": by_harness, "verdict": verdict,
            "report": text}


def _row(name, label, generic, status, text) -> dict:
    flat = " ".join(text.split())
    rejected = status != "passing"
    unknown = "not a mistake we know" in flat
    named = (
        rejected
        and not unknown
        and (
            "recognised" in flat
            or "found:" in flat
            or status in ("broken", "failing")
            and "checked on" not in flat
            or "changed " in flat
            or "proves nothing" in flat
        )
    )
    pointed = rejected and ("is wrong at" in flat or ", line " in flat or "has shape" in flat)
    return {"exercise": name, "pass": label, "class": generic, "status": status,
            "rejected": rejected, "named": bool(named), "pointed": bool(pointed),
            "unknown": unknown, "says": _says(text)}


def _says(text: str) -> str:
    """The report's line that names the problem, shortened."""
    for line in text.splitlines():
        s = line.strip()
        if (
            s.startswith(("recognised", "found:", "broken:"))
            or "changed" in s
            or (
                "proves nothing" in s
                or s.startswith("not a mistake")
                or "has shape" in s
                or "dtype" in s
                or s.endswith(".py, line")
                or "linear.py, line" in s
            )
        ):
            return s[:110]
    lines = [x.strip() for x in text.splitlines() if x.strip()]
    return (lines[1] if len(lines) > 1 else (lines[0] if lines else ""))[:110]


def fresh_table(paths: list) -> None:
    """Counts per verdict of one run of the fresh set (or two, side by side): overall,
    per exercise, per kind, and a row per pass."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    verdicts = ("rejected", "named", "pointed", "unnamed", "passed")

    def counts(rows):
        c = {v: sum(r["verdict"] == v for r in rows) for v in verdicts}
        c["rejected"] = sum(r["rejected"] for r in rows)
        return " ".join(f"{c[v]:>3}" for v in verdicts)

    head = " ".join(f"{v[:3]:>3}" for v in verdicts)
    print(f"passes: {len(runs[0])}; run(s): {' / '.join(Path(p).stem for p in paths)}")
    print(
        "columns per run: rejected (rej), named (nam), pointed (poi), unnamed (unn), passed (pas)\n"
    )
    for key, title in (("exercise", "per exercise"), ("kind", "per kind")):
        groups = list(dict.fromkeys(r[key] for r in runs[0]))
        print(f"{title:<22} {'n':>3}  " + "   ".join(head for _ in runs))
        print(f"{'all':<22} {len(runs[0]):>3}  " + "   ".join(counts(rows) for rows in runs))
        for g in groups:
            sel = [[r for r in rows if r[key] == g] for rows in runs]
            print(f"{g:<22} {len(sel[0]):>3}  " + "   ".join(counts(rows) for rows in sel))
        print()
    print(
        "| # | exercise | wrong pass | kind | term | factor | "
        + " | ".join(f"{Path(p).stem}: verdict (keyword)" for p in paths)
        + " | what check says |"
    )
    print("|---|---|---|---|---|---|" + "---|" * len(paths) + "---|")
    for i, rows in enumerate(zip(*runs), start=1):
        r = rows[-1]
        cells = []
        for x in rows:
            why = ", ".join(x["keywords_found"]) or ("diagnosis" if x["named_by_diagnosis"] else "")
            cells.append(x["verdict"] + (f" ({why})" if why else ""))
        print(f"| {i} | {r['exercise']} | {r['pass']} | {r['kind']} | {r['term']} | "
              f"{r['factor'] or ''} | " + " | ".join(cells) + f" | {r['says'].replace('|', '/')} |")


def table(before_path: str, after_path: str) -> None:
    before, after = (json.loads(Path(p).read_text()) for p in (before_path, after_path))
    print("| | before | after |\n|---|---|---|")
    for key, what in (("rejected", "rejected"), ("named", "named"), ("pointed", "pointed at"),
                      ("unknown", '"not a mistake we know"')):
        b, a = (sum(r[key] for r in rows) for rows in (before, after))
        rb, ra = (sum(r["rejected"] for r in rows) for rows in (before, after))
        tail = f" ({100 * b / max(rb, 1):.0f}% of rejections)" if key == "unknown" else ""
        tail_a = f" ({100 * a / max(ra, 1):.0f}% of rejections)" if key == "unknown" else ""
        print(f"| {what} | {b} of {len(before)}{tail} | {a} of {len(after)}{tail_a} |")
    print("\n| # | exercise | wrong pass | generic class | before | after: what check says |")
    print("|---|---|---|---|---|---|")
    for i, (b, a) in enumerate(zip(before, after), start=1):

        def cell(r):
            return r["status"] + (" (not known)" if r["unknown"] else "")

        says = a["says"].replace("|", "/")
        print(f"| {i} | {a['exercise']} | {a['pass']} | {a['class']} | {cell(b)} | "
              f"{cell(a)}: {says} |")


if __name__ == "__main__":
    fresh = sys.argv[2:4] == ["--set", "fresh"]
    if sys.argv[1:2] == ["run"]:
        run(fresh)
    elif sys.argv[1:2] == ["table"] and fresh:
        fresh_table(sys.argv[4:6])
    elif sys.argv[1:2] == ["table"]:
        table(sys.argv[2], sys.argv[3])
    else:
        print(__doc__)
