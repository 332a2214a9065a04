"""A fresh set of wrong backward passes for ``scratchformer exercise check`` (data only).

How it was written: from docs/exercises.md and docs/derivations.md alone, the learner's
stubs that ``scratchformer exercise start NAME`` writes, and nothing else: not the page of
the mistakes ``check`` names (docs/exercise-mistakes.md), not the code that diagnoses a
wrong pass, not the rows of exercise_wrong_passes.py's own set. Each pass is a mistake a
learner working from the derivations could make: a size factor (1/V, 1/S, 1/T, the batch
size, n_tokens, 1/(1-p), sqrt(d_k), their roots and inverses), a term of one formula
dropped, doubled or with its sign flipped, a term computed on the wrong input, a layer's
path dropped or its gradients put in place of what ``self.grads`` holds, the relative
attentions' scatter-adds and the embedding's repeated ids and padding.

Each entry of ``FRESH``:

    exercise   the exercise's name
    label      a short description of the pass
    kind       "dropped term", "doubled term", "sign-flipped term", "scaled",
               "wrong input" or "other"
    term       the term or quantity as the derivation names it
    factor     for kind "scaled": the factor the pass is off by, else None
    keywords   lowercase phrases, any one of which in check's report names the mistake
               (a phrase ending in "*" matches as a prefix; every phrase must start and
               end at a word boundary, so "1/s" does not match "1/sqrt")
    code       {function name: body}: every function the learner writes for the exercise

``python benchmarks/exercise_wrong_passes.py run --set fresh`` grades every pass.
"""

# ruff: noqa: E501 -- the passes are data, one per entry
from __future__ import annotations

# -- right bodies, written from the derivations (each pass changes one thing in them) ------
LINEAR = """\
    x, W, has_bias = cache.x, cache.W, cache.has_bias
    d_in, d_out = W.shape
    x2 = x.reshape(-1, d_in)
    dout2 = dout.reshape(-1, d_out)
    dx = dout @ W.T
    dW = x2.T @ dout2
    db = dout2.sum(axis=0) if has_bias else None
    return dx, dW, db
"""
GELU_HEAD = """\
    x, t = cache.x, cache.tanh_u
    du_dx = _GELU_C * (1.0 + 3.0 * _GELU_A * x * x)
"""
EMBEDDING = """\
    ids, V, pad_id = cache.ids, cache.vocab_size, cache.pad_id
    D = dout.shape[-1]
    dE = device.segment_sum(ids.reshape(-1), dout.reshape(-1, D), V)
    if pad_id is not None:
        dE[pad_id] = 0
    return dE
"""
LN_HEAD = """\
    xhat, rstd, gamma = cache.xhat, cache.rstd, cache.gamma
    D = xhat.shape[-1]
    dxhat = dout * gamma
    mean_dxhat = dxhat.mean(axis=-1, keepdims=True)
    mean_dxhat_xhat = (dxhat * xhat).mean(axis=-1, keepdims=True)
"""
LN_DX = """\
    dx = rstd * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat)
"""
LN_TAIL = """\
    dgamma = (dout * xhat).reshape(-1, D).sum(axis=0)
    dbeta = dout.reshape(-1, D).sum(axis=0)
    return dx, dgamma, dbeta
"""
CE_HEAD = """\
    V, eps = cache.V, cache.eps
    P = cache.P.reshape(-1, V)
    tgt = cache.target.reshape(-1)
    rows = xp.arange(tgt.shape[0])
    off = eps / (V - 1) if eps else 0.0
    on = 1.0 - eps - off
    keep = cache.keep.reshape(-1, 1)
    n = max(int(cache.n_tokens), 1)
"""
CE_Q = """\
    q = xp.full(P.shape, off, dtype=P.dtype)
    q[rows, tgt] += on
"""
CE_RETURN = """\
    return d.reshape(cache.P.shape).astype(cache.P.dtype)
"""
CE = CE_HEAD + CE_Q
LOGITS = """\
    Q, K, s = cache.Q, cache.K, cache.scale
    dQ = s * (dZ @ K)
    dK = s * (dZ.swapaxes(-1, -2) @ Q)
    return dQ, dK
"""
CORE_DA = """\
    dA = dO @ cache.V.swapaxes(-1, -2)
    if dA_drop is not None:
        dA = dA + dA_drop
    dV = cache.A_drop.swapaxes(-1, -2) @ dO
"""
CORE_MASK = """\
    if cache.dropout.mask is not None:
        dA = dA * cache.dropout.mask * cache.dropout.scale
"""
CORE_SOFTMAX = """\
    P = cache.softmax.P
    dZ = P * (dA - (dA * P).sum(axis=-1, keepdims=True))
    return dZ, dV
"""
CORE = CORE_DA + CORE_MASK + CORE_SOFTMAX
MHA_PROJ = """\
    dO_m, dW_o, _ = kernels.linear.backward(dout, cache.o_proj)
    dQ, dK, dV = self.attend_backward(split_heads(dO_m, self.h), cache.attn)
    dx_q, dW_q, _ = kernels.linear.backward(merge_heads(dQ), cache.q_proj)
    dx_k, dW_k, _ = kernels.linear.backward(merge_heads(dK), cache.k_proj)
    dx_v, dW_v, _ = kernels.linear.backward(merge_heads(dV), cache.v_proj)
"""
MHA_GRADS = """\
    self.grads["W_o"] += dW_o
    self.grads["W_q"] += dW_q
    self.grads["W_k"] += dW_k
    self.grads["W_v"] += dW_v
"""
FFN_TOP = """\
    da, dW_2, db_2 = kernels.linear.backward(dout, cache.lin2)
"""
FFN_DROP = """\
    da = self.dropout.backward(da, cache.drop)
"""
FFN_ACT = """\
    du = self.activation.backward(da, cache.act)
    dx, dW_1, db_1 = kernels.linear.backward(du, cache.lin1)
"""
FFN_GRADS = """\
    g = self.grads
    g["W_2"] += dW_2
    g["b_2"] += db_2
    g["W_1"] += dW_1
    g["b_1"] += db_1
    return dx
"""
EXIT = """\
    dr = dy if self.norm_first else self._norm_backward(dy, cache.norm)
    ds = self.dropout.backward(dr, cache.dropout)
    return dr, ds
"""
ENTER = """\
    return self._norm_backward(ds_in, cache.norm) if self.norm_first else ds_in
"""
ENC_FFN = """\
    c = cache.ffn
    dx, df = self.ffn_norm.exit_backward(dout, c.exit)
    dx = dx + self.ffn_norm.enter_backward(self.ffn.backward(df, c.sublayer), c.enter)
"""
ENC_ATTN = """\
    c = cache.self_attn
    dx_res, da = self.self_attn_norm.exit_backward(dx, c.exit)
    da_q, da_kv = self.self_attn.backward(da, c.sublayer)
    return dx_res + self.self_attn_norm.enter_backward(da_q + da_kv, c.enter)
"""
DEC_FFN = """\
    c = cache.ffn
    dy, df = self.ffn_norm.exit_backward(dout, c.exit)
    dy = dy + self.ffn_norm.enter_backward(self.ffn.backward(df, c.sublayer), c.enter)
"""
DEC_CROSS = """\
    c = cache.cross_attn
    dy_res, dx = self.cross_attn_norm.exit_backward(dy, c.exit)
    dx_q, dmemory = self.cross_attn.backward(dx, c.sublayer)
    dy = dy_res + self.cross_attn_norm.enter_backward(dx_q, c.enter)
"""
DEC_SELF = """\
    c = cache.self_attn
    dy_res, da = self.self_attn_norm.exit_backward(dy, c.exit)
    da_q, da_kv = self.self_attn.backward(da, c.sublayer)
    dy = dy_res + self.self_attn_norm.enter_backward(da_q + da_kv, c.enter)
    return dy, dmemory
"""
SHAW_HEAD = """\
    Q, K, E_k, idx, s = cache.Q, cache.K, cache.E_k, cache.idx, cache.scale
    B, H, T, S = dZ.shape
    R = E_k.shape[0]
    dZs = s * dZ
    dQ = dZs @ K
    dK = dZs.swapaxes(-1, -2) @ Q
"""
SHAW_SCATTER = """\
    flat = (xp.arange(T)[:, None] * R + idx).reshape(-1)  # (T*S,): bucket (i, r(i, j))
    dR = device.segment_sum(flat, dZs.reshape(B * H, T * S).T, T * R).T.reshape(B, H, T, R)
"""
SHAW_TAIL = """\
    dQ = dQ + dR @ E_k
    dE_k = dR.reshape(-1, R).T @ Q.reshape(-1, Q.shape[-1])
    return dQ, dK, dE_k
"""
SKEW_HEAD = """\
    Q, K, E_r, Er_L, rows, idx, s = (
        cache.Q, cache.K, cache.E_r, cache.Er_L, cache.rows, cache.idx, cache.scale
    )
    B, H, T, S = dZ.shape
    R = E_r.shape[-2]
    Dh = Q.shape[-1]
    dZs = s * dZ
    dQ = dZs @ K
    dK = dZs.swapaxes(-1, -2) @ Q
"""
SKEW_T = """\
        L = S
        d_padded = xp.zeros((B, H, L + 1, L), dtype=dZ.dtype)
        d_padded[..., 1:, :] = dZs
        drel = d_padded.reshape(B, H, L, L + 1)[..., 1:]
"""
SKEW_SKEWFORM_REST = """\
        dQ = dQ + drel @ Er_L
        dEr_L = (drel.swapaxes(-1, -2) @ Q).sum(axis=0)  # (H, L, Dh)
        dE_r = device.segment_sum(rows, dEr_L.swapaxes(0, 1), R).swapaxes(0, 1)
"""
SKEW_GATHER = """\
    else:
        flat = (xp.arange(T)[:, None] * R + idx).reshape(-1)
        dR = device.segment_sum(flat, dZs.reshape(B * H, T * S).T, T * R).T.reshape(B, H, T, R)
        dQ = dQ + dR @ E_r
        dE_r = (dR.swapaxes(-1, -2) @ Q).sum(axis=0)
    return dQ, dK, dE_r.astype(E_r.dtype)
"""
SKEW = SKEW_HEAD + "    if Er_L is not None:\n" + SKEW_T + SKEW_SKEWFORM_REST + SKEW_GATHER
ADAM_MOMENTS = """\
    m *= beta1
    m += (1 - beta1) * g
    v *= beta2
    v += (1 - beta2) * g * g
"""

RIGHT_FRESH = {
    "linear": {"linear_backward": LINEAR},
    "relu": {"relu_backward": "    return dout * cache.positive\n"},
    "gelu": {
        "gelu_backward": GELU_HEAD
        + "    return dout * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du_dx)\n"
    },
    "embedding": {"embedding_backward": EMBEDDING},
    "softmax": {
        "softmax_backward": "    P = cache.P\n    return P * (dout - (dout * P).sum(axis=-1, keepdims=True))\n"
    },
    "layernorm": {"layernorm_backward": LN_HEAD + LN_DX + LN_TAIL},
    "dropout": {
        "dropout_backward": "    if cache.mask is None:\n        return dout.copy()\n    return dout * cache.mask * cache.scale\n"
    },
    "cross_entropy": {
        "cross_entropy_backward": CE + "    d = (P - q) * keep * (dout / n)\n" + CE_RETURN
    },
    "attention": {"attention_core_backward": CORE, "dot_product_logits_backward": LOGITS},
    "multi_head_attention": {
        "multi_head_attention_backward": MHA_PROJ + MHA_GRADS + "    return dx_q, dx_k + dx_v\n"
    },
    "ffn": {"ffn_backward": FFN_TOP + FFN_DROP + FFN_ACT + FFN_GRADS},
    "add_norm": {"add_norm_exit_backward": EXIT, "add_norm_enter_backward": ENTER},
    "encoder_layer": {"encoder_layer_backward": ENC_FFN + ENC_ATTN},
    "decoder_layer": {"decoder_layer_backward": DEC_FFN + DEC_CROSS + DEC_SELF},
    "shaw": {"shaw_logits_backward": SHAW_HEAD + SHAW_SCATTER + SHAW_TAIL},
    "skew": {"skew_logits_backward": SKEW},
    "adam": {
        "adam_update": ADAM_MOMENTS
        + """\
    m_hat = m / (1 - beta1**t)
    v_hat = v / (1 - beta2**t)
    theta -= lr * m_hat / (xp.sqrt(v_hat) + eps)
"""
    },
}


def _p(exercise, label, kind, term, keywords, code, factor=None):
    return {"exercise": exercise, "label": label, "kind": kind, "term": term,
            "factor": factor, "keywords": keywords, "code": code}


def _core(body):
    return {"attention_core_backward": body, "dot_product_logits_backward": LOGITS}


def _logits(body):
    return {"attention_core_backward": CORE, "dot_product_logits_backward": body}


def _exit(body):
    return {"add_norm_exit_backward": body, "add_norm_enter_backward": ENTER}


# keyword lists used by several passes
K_SCALE_P = ["1/(1-p)", "1/(1 - p)", "(1-p)", "(1 - p)", "1-p", "1 - p", "survivors"]
K_SQRT_DK = ["sqrt(d_k)", "1/sqrt(d_k)", "sqrt(dh)", "1/sqrt(dh)", "sqrt(d_h)", "attention scale"]
K_LAYER_RESIDUAL = ["residual path", "residual gradient", "the residual", "sum rule", "(+)"]
K_ACCUMULATE = [
    "+=",
    "accumulat*",
    "added into",
    "adding into",
    "in place of what",
    "lost what was there",
    "replaced what",
]
K_BIAS_CORR = ["bias correction", "bias-correction", "bias corrected", "1 - beta^t", "1-beta^t"]
K_ROW_SUM = ["row-sum", "row sum", "rowsum", "p^t dp", "sum_i dp_i p_i", "sum(dp"]
K_SCATTER = [
    "scatter-add",
    "scatter_add",
    "scatter add",
    "repeated buckets",
    "edge bucket*",
    "clipped distance*",
    "every clipped",
]

FRESH = [
    # -- linear ----------------------------------------------------------------------------
    _p(
        "linear",
        "dW divided by the batch size B",
        "scaled",
        "dW, summed over the positions",
        ["1/b", "batch size", "averag*", "nothing is averaged"],
        {"linear_backward": LINEAR.replace("dW = x2.T @ dout2", "dW = x2.T @ dout2 / x.shape[0]")},
        factor="1/B",
    ),
    _p(
        "linear",
        "db the mean over the positions, not their sum",
        "scaled",
        "db, the sum rule over positions",
        [
            "1/n",
            "1/(b t)",
            "1/(bt)",
            "number of positions",
            "averag*",
            "nothing is averaged",
            "mean instead of",
        ],
        {"linear_backward": LINEAR.replace("dout2.sum(axis=0)", "dout2.mean(axis=0)")},
        factor="1/(B*T)",
    ),
    _p(
        "linear",
        "dW from the first sequence only (no sum over the batch)",
        "dropped term",
        "the sum over the batch (sum rule)",
        [
            "sum rule",
            "summed over the batch",
            "sum over the batch",
            "other sequences",
            "first sequence",
        ],
        {
            "linear_backward": LINEAR.replace(
                "dW = x2.T @ dout2",
                "dW = x.reshape(x.shape[0], -1, d_in)[0].T @ dout.reshape(dout.shape[0], -1, d_out)[0]",
            )
        },
    ),
    # -- relu ------------------------------------------------------------------------------
    _p(
        "relu",
        "leaky: 0.01 dout where x <= 0",
        "other",
        "f'(x) = [x > 0]",
        ["leaky", "slope", "subgradient", "[x > 0]", "where x <= 0", "negative entries"],
        {"relu_backward": "    return dout * cache.positive + 0.01 * dout * ~cache.positive\n"},
    ),
    _p(
        "relu",
        "the mask inverted (dout where x <= 0)",
        "wrong input",
        "f'(x) = [x > 0]",
        ["inverted", "[x > 0]", "x <= 0", "negative entries", "complement"],
        {"relu_backward": "    return dout * ~cache.positive\n"},
    ),
    # -- gelu ------------------------------------------------------------------------------
    _p(
        "gelu",
        "the tanh' term dropped: 0.5 (1 + t) only",
        "dropped term",
        "the tanh' term, 1/2 x (1 - t^2) c (1 + 3 a x^2)",
        [
            "tanh' term",
            "tanh'",
            "1 - t^2",
            "1 - tanh^2",
            "second term",
            "product rule",
            "derivative of tanh",
            "du/dx",
        ],
        {"gelu_backward": GELU_HEAD + "    return dout * 0.5 * (1.0 + t)\n"},
    ),
    _p(
        "gelu",
        "the first factor dropped: only the tanh' term",
        "dropped term",
        "the first term, 1/2 (1 + t)",
        ["first term", "first factor", "1/2 (1 + t)", "0.5 (1 + t)", "(1 + t)", "product rule"],
        {"gelu_backward": GELU_HEAD + "    return dout * 0.5 * x * (1.0 - t * t) * du_dx\n"},
    ),
    _p(
        "gelu",
        "the tanh' term with its sign flipped",
        "sign-flipped term",
        "the tanh' term",
        ["tanh' term", "tanh'", "1 - t^2", "second term", "sign of the second", "product rule"],
        {
            "gelu_backward": GELU_HEAD
            + "    return dout * (0.5 * (1.0 + t) - 0.5 * x * (1.0 - t * t) * du_dx)\n"
        },
    ),
    _p(
        "gelu",
        "du/dx without its 3 a x^2 (the cube's derivative)",
        "dropped term",
        "du/dx = c (1 + 3 a x^2)",
        ["3 a x^2", "3ax^2", "3 a x²", "du/dx", "x^3", "cubic", "0.044715"],
        {
            "gelu_backward": GELU_HEAD.replace("(1.0 + 3.0 * _GELU_A * x * x)", "1.0")
            + "    return dout * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du_dx)\n"
        },
    ),
    _p(
        "gelu",
        "tanh' written as 1 - t, not 1 - t^2",
        "other",
        "1 - t^2, the derivative of tanh",
        ["1 - t^2", "1 - tanh^2", "1-t^2", "derivative of tanh", "tanh'"],
        {
            "gelu_backward": GELU_HEAD
            + "    return dout * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t) * du_dx)\n"
        },
    ),
    _p(
        "gelu",
        "the tanh' term's 1/2 left out (the term doubled)",
        "doubled term",
        "the tanh' term",
        ["tanh' term", "tanh'", "second term", "1/2 x", "0.5 x", "doubled", "twice"],
        {
            "gelu_backward": GELU_HEAD
            + "    return dout * (0.5 * (1.0 + t) + x * (1.0 - t * t) * du_dx)\n"
        },
    ),
    _p(
        "gelu",
        "tanh' taken at x, not at u: 1 - tanh(x)^2",
        "wrong input",
        "1 - t^2 with t = tanh u",
        ["tanh(u)", "tanh u", "at u", "of u", "tanh(x)", "1 - t^2"],
        {
            "gelu_backward": GELU_HEAD
            + "    tx = xp.tanh(x)\n    return dout * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - tx * tx) * du_dx)\n"
        },
    ),
    # -- embedding -------------------------------------------------------------------------
    _p(
        "embedding",
        "dE[ids] += dout: a repeated id keeps one row",
        "other",
        "the scatter-add over every occurrence",
        [
            "scatter-add",
            "scatter_add",
            "scatter add",
            "every occurrence",
            "each occurrence",
            "repeated token ids",
            "add.at",
            "fancy-index",
        ],
        {
            "embedding_backward": """\
    ids, V, pad_id = cache.ids, cache.vocab_size, cache.pad_id
    dE = xp.zeros((V, dout.shape[-1]), dtype=dout.dtype)
    dE[ids] += dout
    if pad_id is not None:
        dE[pad_id] = 0
    return dE
"""
        },
    ),
    _p(
        "embedding",
        "the padding id's row keeps its gradient",
        "dropped term",
        "dE[pad_id] = 0",
        ["pad row", "padding row", "pad_id", "padding id", "dE[pad_id]", "row of the padding"],
        {"embedding_backward": EMBEDDING.replace("        dE[pad_id] = 0\n", "        pass\n")},
    ),
    _p(
        "embedding",
        "dE[pad_id] = 0 even when pad_id is None (every row zeroed)",
        "other",
        "dE[pad_id] = 0, only when there is a pad_id",
        ["pad_id", "padding id", "no padding id", "pad_id is none"],
        {
            "embedding_backward": EMBEDDING.replace(
                "    if pad_id is not None:\n        dE[pad_id] = 0\n", "    dE[pad_id] = 0\n"
            )
        },
    ),
    _p(
        "embedding",
        "dE multiplied by sqrt(D), the module's scale, inside the op",
        "scaled",
        "the module's scale sqrt(d_model)",
        ["sqrt(d)", "sqrt(d_model)", "√d", "module's scale", "embedding scale"],
        {"embedding_backward": EMBEDDING.replace("    return dE\n", "    return dE * D**0.5\n")},
        factor="sqrt(D)",
    ),
    _p(
        "embedding",
        "dE divided by V",
        "scaled",
        "dE, a sum over occurrences",
        ["1/v", "vocabulary size", "vocab size", "size of the vocabulary"],
        {"embedding_backward": EMBEDDING.replace("    return dE\n", "    return dE / V\n")},
        factor="1/V",
    ),
    _p(
        "embedding",
        "each row averaged over its occurrences",
        "other",
        "the sum over every occurrence (sum rule)",
        ["sum rule", "every occurrence", "each occurrence", "averag*", "occurrences"],
        {
            "embedding_backward": EMBEDDING.replace(
                "    return dE\n",
                """\
    counts = xp.bincount(ids.reshape(-1), minlength=V).astype(dE.dtype)
    return dE / xp.maximum(counts, 1.0)[:, None]
""",
            )
        },
    ),
    # -- softmax ---------------------------------------------------------------------------
    _p(
        "softmax",
        "the row-sum term dropped: P dout",
        "dropped term",
        "the row-sum term P (P^T dP)",
        K_ROW_SUM + ["off-diagonal", "p p^t", "pp^t"],
        {"softmax_backward": "    return cache.P * dout\n"},
    ),
    _p(
        "softmax",
        "the row-sum term with its sign flipped",
        "sign-flipped term",
        "the row-sum term",
        K_ROW_SUM,
        {
            "softmax_backward": "    P = cache.P\n    return P * (dout + (dout * P).sum(axis=-1, keepdims=True))\n"
        },
    ),
    _p(
        "softmax",
        "the row sum of dout, not of dout P",
        "wrong input",
        "the row-sum term sum_i dP_i P_i",
        K_ROW_SUM + ["log-softmax", "without p"],
        {
            "softmax_backward": "    P = cache.P\n    return P * (dout - dout.sum(axis=-1, keepdims=True))\n"
        },
    ),
    _p(
        "softmax",
        "the row sum taken down the columns (axis -2)",
        "other",
        "the row-sum term, over the row",
        K_ROW_SUM
        + ["wrong axis", "columns", "mixes rows", "nothing mixes rows", "axis=-2", "over the rows"],
        {
            "softmax_backward": "    P = cache.P\n    return P * (dout - (dout * P).sum(axis=-2, keepdims=True))\n"
        },
    ),
    _p(
        "softmax",
        "dx divided by the batch size",
        "scaled",
        "dx, per row (no batch sum)",
        ["1/b", "batch size"],
        {
            "softmax_backward": "    P = cache.P\n    return P * (dout - (dout * P).sum(axis=-1, keepdims=True)) / dout.shape[0]\n"
        },
        factor="1/B",
    ),
    _p(
        "softmax",
        "only the diagonal of the Jacobian: P (1 - P) dout",
        "dropped term",
        "the off-diagonal part -P P^T",
        K_ROW_SUM + ["off-diagonal", "diagonal", "p p^t", "pp^t", "diag(p)"],
        {"softmax_backward": "    P = cache.P\n    return P * (1.0 - P) * dout\n"},
    ),
    _p(
        "softmax",
        "log-softmax's backward: dout - P sum(dout)",
        "other",
        "log-softmax's backward in place of softmax's",
        ["log-softmax", "log softmax", "log_softmax"],
        {
            "softmax_backward": "    P = cache.P\n    return dout - P * dout.sum(axis=-1, keepdims=True)\n"
        },
    ),
    # -- layernorm -------------------------------------------------------------------------
    _p(
        "layernorm",
        "the variance term dropped",
        "dropped term",
        "the variance term",
        [
            "variance term",
            "var depends on x",
            "through var",
            "d var",
            "dvar",
            "xhat * mean(dxhat * xhat)",
        ],
        {"layernorm_backward": LN_HEAD + "    dx = rstd * (dxhat - mean_dxhat)\n" + LN_TAIL},
    ),
    _p(
        "layernorm",
        "the mean term dropped",
        "dropped term",
        "the mean term, mean(dxhat)",
        ["mean term", "mean(dxhat)", "mean of dxhat", "through mu", "mu depends", "d mu", "dmu"],
        {
            "layernorm_backward": LN_HEAD
            + "    dx = rstd * (dxhat - xhat * mean_dxhat_xhat)\n"
            + LN_TAIL
        },
    ),
    _p(
        "layernorm",
        "the variance term with its sign flipped",
        "sign-flipped term",
        "the variance term",
        ["variance term", "through var", "d var", "dvar"],
        {
            "layernorm_backward": LN_HEAD
            + "    dx = rstd * (dxhat - mean_dxhat + xhat * mean_dxhat_xhat)\n"
            + LN_TAIL
        },
    ),
    _p(
        "layernorm",
        "the variance term doubled (its 2/D kept twice)",
        "doubled term",
        "the variance term",
        ["variance term", "through var", "d var", "dvar", "2/d"],
        {
            "layernorm_backward": LN_HEAD
            + "    dx = rstd * (dxhat - mean_dxhat - 2.0 * xhat * mean_dxhat_xhat)\n"
            + LN_TAIL
        },
    ),
    _p(
        "layernorm",
        "dout where dxhat = dout * gamma belongs",
        "wrong input",
        "dxhat = dout * gamma",
        [
            "dout * gamma",
            "dout*gamma",
            "times gamma",
            "by gamma",
            "without gamma",
            "gamma's factor",
            "gamma missing",
        ],
        {
            "layernorm_backward": LN_HEAD.replace("dxhat = dout * gamma", "dxhat = dout")
            + LN_DX
            + LN_TAIL
        },
    ),
    _p(
        "layernorm",
        "dout in the variance term (dxhat elsewhere)",
        "wrong input",
        "the variance term, mean(dxhat * xhat)",
        ["variance term", "dout * gamma", "dout*gamma", "times gamma", "by gamma", "without gamma"],
        {
            "layernorm_backward": LN_HEAD
            + "    dx = rstd * (dxhat - mean_dxhat - xhat * (dout * xhat).mean(axis=-1, keepdims=True))\n"
            + LN_TAIL
        },
    ),
    _p(
        "layernorm",
        "dgamma from dxhat (gamma applied twice)",
        "wrong input",
        "dgamma = sum dout * xhat",
        [
            "dout * xhat",
            "dout*xhat",
            "gamma twice",
            "gamma applied twice",
            "gamma^2",
            "squared gamma",
            "dxhat for dout",
        ],
        {
            "layernorm_backward": LN_HEAD
            + LN_DX
            + LN_TAIL.replace("(dout * xhat)", "(dxhat * xhat)")
        },
    ),
    _p(
        "layernorm",
        "the unbiased variance: the variance term over D-1",
        "scaled",
        "the variance term",
        ["variance term", "d-1", "d - 1", "unbiased", "biased"],
        {
            "layernorm_backward": LN_HEAD
            + "    dx = rstd * (dxhat - mean_dxhat - xhat * (dxhat * xhat).sum(axis=-1, keepdims=True) / (D - 1))\n"
            + LN_TAIL
        },
        factor="D/(D-1) on the variance term",
    ),
    _p(
        "layernorm",
        "the mean term a sum (its 1/D left out)",
        "scaled",
        "the mean term, mean(dxhat)",
        ["mean term", "mean(dxhat)", "mean of dxhat", "1/d", "through mu", "dmu"],
        {
            "layernorm_backward": LN_HEAD
            + "    dx = rstd * (dxhat - dxhat.sum(axis=-1, keepdims=True) - xhat * mean_dxhat_xhat)\n"
            + LN_TAIL
        },
        factor="D on the mean term",
    ),
    _p(
        "layernorm",
        "dx without its rstd",
        "scaled",
        "rstd, the factor of the boxed formula",
        [
            "times rstd",
            "without rstd",
            "missing rstd",
            "rstd missing",
            "sqrt(var + eps)",
            "factor per row",
        ],
        {
            "layernorm_backward": LN_HEAD
            + "    dx = dxhat - mean_dxhat - xhat * mean_dxhat_xhat\n"
            + LN_TAIL
        },
        factor="sqrt(var + eps) per row",
    ),
    # -- dropout ---------------------------------------------------------------------------
    _p(
        "dropout",
        "the mask without its scale 1/(1-p)",
        "scaled",
        "m = mask / (1-p)",
        K_SCALE_P,
        {
            "dropout_backward": "    if cache.mask is None:\n        return dout.copy()\n    return dout * cache.mask\n"
        },
        factor="1-p",
    ),
    _p(
        "dropout",
        "divided by p, not by 1 - p",
        "scaled",
        "m = mask / (1-p)",
        K_SCALE_P + ["1/p"],
        {
            "dropout_backward": "    if cache.mask is None:\n        return dout.copy()\n    p = 1.0 - 1.0 / cache.scale\n    return dout * cache.mask / p\n"
        },
        factor="(1-p)/p",
    ),
    _p(
        "dropout",
        "the mask inverted (the dropped entries get the gradient)",
        "wrong input",
        "the same mask as the forward's",
        ["inverted", "dropped entries", "complement", "~mask", "same mask"],
        {
            "dropout_backward": "    if cache.mask is None:\n        return dout.copy()\n    return dout * ~cache.mask * cache.scale\n"
        },
    ),
    _p(
        "dropout",
        "divided by the scale, not multiplied",
        "scaled",
        "m = mask / (1-p)",
        K_SCALE_P + ["(1-p)^2", "(1 - p)^2", "inverse"],
        {
            "dropout_backward": "    if cache.mask is None:\n        return dout.copy()\n    return dout * cache.mask / cache.scale\n"
        },
        factor="(1-p)^2",
    ),
    _p(
        "dropout",
        "the square root of the scale",
        "scaled",
        "m = mask / (1-p)",
        K_SCALE_P + ["sqrt(1-p)", "sqrt(1 - p)", "square root"],
        {
            "dropout_backward": "    if cache.mask is None:\n        return dout.copy()\n    return dout * cache.mask * cache.scale**0.5\n"
        },
        factor="sqrt(1-p)",
    ),
    _p(
        "dropout",
        "zeros when dropout was off",
        "other",
        "dropout off: the identity, dx = dout",
        ["identity", "mask is none", "dropout was off", "dx = dout", "when off"],
        {
            "dropout_backward": "    if cache.mask is None:\n        return xp.zeros_like(dout)\n    return dout * cache.mask * cache.scale\n"
        },
    ),
    # -- cross_entropy ---------------------------------------------------------------------
    _p(
        "cross_entropy",
        "the label-smoothing term dropped: q one-hot",
        "dropped term",
        "the label-smoothing term eps/(V-1)",
        ["label smoothing", "label-smoothing", "smoothing", "eps/(v-1)", "q_k"],
        {
            "cross_entropy_backward": CE_HEAD
            + "    q = xp.zeros(P.shape, dtype=P.dtype)\n    q[rows, tgt] = 1.0\n    d = (P - q) * keep * (dout / n)\n"
            + CE_RETURN
        },
    ),
    _p(
        "cross_entropy",
        "older fairseq's smoothing: eps/V on every token",
        "other",
        "the label-smoothing weight off = eps/(V-1)",
        ["eps/v", "eps/(v-1)", "v-1", "v - 1", "fairseq", "label smoothing", "smoothing"],
        {
            "cross_entropy_backward": CE_HEAD
            + "    q = xp.full(P.shape, eps / V, dtype=P.dtype)\n    q[rows, tgt] += 1.0 - eps\n    d = (P - q) * keep * (dout / n)\n"
            + CE_RETURN
        },
    ),
    _p(
        "cross_entropy",
        "q_y set to `on` (off not added on the target)",
        "dropped term",
        "q_y = 1 - eps (on + off)",
        [
            "q_y",
            "1 - eps",
            "target's weight",
            "target weight",
            "weight of the target",
            "weight on the target",
        ],
        {
            "cross_entropy_backward": CE_HEAD
            + "    q = xp.full(P.shape, off, dtype=P.dtype)\n    q[rows, tgt] = on\n    d = (P - q) * keep * (dout / n)\n"
            + CE_RETURN
        },
    ),
    _p(
        "cross_entropy",
        "padding not left out (keep ignored)",
        "dropped term",
        "keep, zero rows for padding",
        [
            "padded",
            "pad rows",
            "padding rows",
            "pad targets",
            "zero rows for padding",
            "not masked",
        ],
        {"cross_entropy_backward": CE + "    d = (P - q) * (dout / n)\n" + CE_RETURN},
    ),
    _p(
        "cross_entropy",
        "divided by n_tokens twice",
        "scaled",
        "the 1/n_tokens of the mean",
        ["n_tokens", "number of targets", "number of tokens", "non-pad targets"],
        {"cross_entropy_backward": CE + "    d = (P - q) * keep * (dout / n) / n\n" + CE_RETURN},
        factor="1/n_tokens",
    ),
    _p(
        "cross_entropy",
        "divided by the batch size B, not n_tokens",
        "scaled",
        "the 1/n_tokens of the mean",
        [
            "batch size",
            "1/b",
            "n_tokens",
            "number of targets",
            "number of tokens",
            "non-pad targets",
        ],
        {
            "cross_entropy_backward": CE
            + "    d = (P - q) * keep * (dout / cache.target.shape[0])\n"
            + CE_RETURN
        },
        factor="n_tokens/B",
    ),
    _p(
        "cross_entropy",
        "divided by every row, pads included, not n_tokens",
        "scaled",
        "the 1/n_tokens of the mean",
        [
            "n_tokens",
            "number of targets",
            "number of tokens",
            "non-pad targets",
            "pads counted",
            "padded",
        ],
        {
            "cross_entropy_backward": CE
            + "    d = (P - q) * keep * (dout / tgt.shape[0])\n"
            + CE_RETURN
        },
        factor="n_tokens/N",
    ),
    _p(
        "cross_entropy",
        "divided by V as well",
        "scaled",
        "dlogits = (P - q) keep dout / n_tokens",
        ["1/v", "vocabulary size", "vocab size", "size of the vocabulary"],
        {"cross_entropy_backward": CE + "    d = (P - q) * keep * (dout / n) / V\n" + CE_RETURN},
        factor="1/V",
    ),
    _p(
        "cross_entropy",
        "q - P, not P - q",
        "sign-flipped term",
        "P - q",
        ["flipped sign", "sign flipped", "opposite sign", "sign is flipped", "q - p", "negated"],
        {"cross_entropy_backward": CE + "    d = (q - P) * keep * (dout / n)\n" + CE_RETURN},
    ),
    _p(
        "cross_entropy",
        "dout left out",
        "dropped term",
        "the incoming gradient dout",
        [
            "times dout",
            "* dout",
            "by dout",
            "incoming gradient",
            "without dout",
            "ignores dout",
            "dloss",
        ],
        {"cross_entropy_backward": CE + "    d = (P - q) * keep / n\n" + CE_RETURN},
    ),
    # -- attention: the core ---------------------------------------------------------------
    _p(
        "attention",
        "dV from the pre-dropout weights A",
        "wrong input",
        "dV = A'^T dO, the weights after dropout",
        [
            "pre-dropout",
            "before dropout",
            "after dropout",
            "post-dropout",
            "a_drop",
            "weights after",
        ],
        _core(CORE.replace("dV = cache.A_drop.swapaxes", "dV = cache.softmax.P.swapaxes")),
    ),
    _p(
        "attention",
        "the softmax's P taken as A' (the dropped weights)",
        "wrong input",
        "the softmax's own output A (before dropout)",
        [
            "pre-dropout",
            "before dropout",
            "after dropout",
            "post-dropout",
            "a_drop",
            "softmax's own output",
        ],
        _core(CORE.replace("P = cache.softmax.P", "P = cache.A_drop")),
    ),
    _p(
        "attention",
        "the dropout mask skipped in dA",
        "dropped term",
        "dA = dA' * m, the same mask",
        [
            "dropout mask",
            "same mask",
            "dropout's backward",
            "without the mask",
            "mask skipped",
            "mask not applied",
        ],
        _core(CORE_DA + CORE_SOFTMAX),
    ),
    _p(
        "attention",
        "dA_drop not added",
        "dropped term",
        "dA_drop, added by the sum rule",
        [
            "sum rule",
            "da_drop not added",
            "without da_drop",
            "ignores da_drop",
            "da_drop is not added",
            "adds da_drop",
        ],
        _core(CORE.replace("        dA = dA + dA_drop\n", "        pass\n")),
    ),
    _p(
        "attention",
        "dA_drop added after the dropout mask",
        "other",
        "dA_drop, added before step 2",
        ["before step 2", "after the mask", "before the mask", "dropout mask"],
        _core(
            CORE_DA.replace("        dA = dA + dA_drop\n", "        pass\n")
            + CORE_MASK
            + "    if dA_drop is not None:\n        dA = dA + dA_drop\n"
            + CORE_SOFTMAX
        ),
    ),
    _p(
        "attention",
        "the core's mask without its scale",
        "scaled",
        "dA = dA' * m, m = mask / (1-p)",
        K_SCALE_P,
        _core(
            CORE.replace("dA * cache.dropout.mask * cache.dropout.scale", "dA * cache.dropout.mask")
        ),
        factor="1-p",
    ),
    _p(
        "attention",
        "the core's dropout scale applied twice",
        "scaled",
        "dA = dA' * m, m = mask / (1-p)",
        K_SCALE_P,
        _core(
            CORE.replace(
                "dA * cache.dropout.mask * cache.dropout.scale",
                "dA * cache.dropout.mask * cache.dropout.scale**2",
            )
        ),
        factor="1/(1-p)",
    ),
    _p(
        "attention",
        "the core's row-sum term taken with A'",
        "wrong input",
        "the row-sum term sum(dA * A)",
        K_ROW_SUM
        + [
            "pre-dropout",
            "before dropout",
            "after dropout",
            "post-dropout",
            "softmax's own output",
        ],
        _core(CORE.replace("(dA * P).sum", "(dA * cache.A_drop).sum")),
    ),
    _p(
        "attention",
        "the core's row-sum term dropped",
        "dropped term",
        "the row-sum term",
        K_ROW_SUM + ["off-diagonal", "p p^t"],
        _core(CORE.replace("(dA - (dA * P).sum(axis=-1, keepdims=True))", "dA")),
    ),
    _p(
        "attention",
        "dZ divided by S, the number of keys",
        "scaled",
        "dZ, per row",
        ["1/s", "number of keys", "source length", "key length"],
        _core(CORE.replace("    return dZ, dV\n", "    return dZ / dZ.shape[-1], dV\n")),
        factor="1/S",
    ),
    _p(
        "attention",
        "dV divided by T, the number of queries",
        "scaled",
        "dV = A'^T dO, a sum over queries",
        ["1/t", "number of queries", "target length", "query length"],
        _core(CORE.replace("    return dZ, dV\n", "    return dZ, dV / dO.shape[-2]\n")),
        factor="1/T",
    ),
    # -- attention: the logits -------------------------------------------------------------
    _p(
        "attention",
        "dQ without the scale s",
        "scaled",
        "s = 1/sqrt(d_k) in dQ = s dZ K",
        K_SQRT_DK,
        _logits(LOGITS.replace("dQ = s * (dZ @ K)", "dQ = dZ @ K")),
        factor="sqrt(d_k)",
    ),
    _p(
        "attention",
        "both scaled by 1/d_k, not 1/sqrt(d_k)",
        "scaled",
        "s = 1/sqrt(d_k)",
        K_SQRT_DK + ["1/d_k"],
        _logits(
            LOGITS.replace(
                "Q, K, s = cache.Q, cache.K, cache.scale",
                "Q, K, s = cache.Q, cache.K, cache.scale**2",
            )
        ),
        factor="1/sqrt(d_k)",
    ),
    _p(
        "attention",
        "dK multiplied by sqrt(d_k), not divided",
        "scaled",
        "s = 1/sqrt(d_k) in dK = s dZ^T Q",
        K_SQRT_DK + ["d_k"],
        _logits(LOGITS.replace("dK = s * (", "dK = (1.0 / s) * (")),
        factor="d_k",
    ),
    _p(
        "attention",
        "dK = s Q^T dZ, transposed",
        "other",
        "dK = s dZ^T Q (the query index summed)",
        ["q^t dz", "q^t dZ", "transpose*", "dz^t q", "query index"],
        _logits(
            LOGITS.replace(
                "dK = s * (dZ.swapaxes(-1, -2) @ Q)", "dK = s * (Q.swapaxes(-1, -2) @ dZ)"
            )
        ),
    ),
    # -- multi_head_attention --------------------------------------------------------------
    _p(
        "multi_head_attention",
        "dx_kv through the keys only (the value path dropped)",
        "dropped term",
        "dx_kv = dx_k + dx_v (through the values)",
        ["through the values", "value path", "dx_k + dx_v", "sum rule", "used twice", "two paths"],
        {"multi_head_attention_backward": MHA_PROJ + MHA_GRADS + "    return dx_q, dx_k\n"},
    ),
    _p(
        "multi_head_attention",
        "dW_o assigned, not added",
        "other",
        "self.grads[...] += (the sum rule)",
        K_ACCUMULATE,
        {
            "multi_head_attention_backward": MHA_PROJ
            + MHA_GRADS.replace('self.grads["W_o"] += dW_o', 'self.grads["W_o"] = dW_o')
            + "    return dx_q, dx_k + dx_v\n"
        },
    ),
    _p(
        "multi_head_attention",
        "dW_q assigned into the buffer ([...] =), not added",
        "other",
        "self.grads[...] += (the sum rule)",
        K_ACCUMULATE,
        {
            "multi_head_attention_backward": MHA_PROJ
            + MHA_GRADS.replace('self.grads["W_q"] += dW_q', 'self.grads["W_q"][...] = dW_q')
            + "    return dx_q, dx_k + dx_v\n"
        },
    ),
    _p(
        "multi_head_attention",
        "heads split by a reshape, without the transpose",
        "other",
        "split_heads, the inverse of merge_heads",
        [
            "split_heads",
            "merge_heads",
            "mixes positions with heads",
            "without the transpose",
            "permutation",
        ],
        {
            "multi_head_attention_backward": MHA_PROJ.replace(
                "split_heads(dO_m, self.h)",
                "dO_m.reshape(dO_m.shape[0], self.h, dO_m.shape[1], -1)",
            )
            + MHA_GRADS
            + "    return dx_q, dx_k + dx_v\n"
        },
    ),
    _p(
        "multi_head_attention",
        "dx_kv the mean of the two paths",
        "scaled",
        "dx_kv = dx_k + dx_v",
        ["sum rule", "averag*", "dx_k + dx_v", "1/2", "half"],
        {
            "multi_head_attention_backward": MHA_PROJ
            + MHA_GRADS
            + "    return dx_q, 0.5 * (dx_k + dx_v)\n"
        },
        factor="1/2",
    ),
    _p(
        "multi_head_attention",
        "dx_q divided by the number of heads",
        "scaled",
        "dx_q = merge_heads(dQ) W_q^T",
        ["1/h", "number of heads"],
        {
            "multi_head_attention_backward": MHA_PROJ
            + MHA_GRADS
            + "    return dx_q / self.h, dx_k + dx_v\n"
        },
        factor="1/H",
    ),
    # -- ffn -------------------------------------------------------------------------------
    _p(
        "ffn",
        "the hidden dropout's backward skipped",
        "dropped term",
        "a' = dropout(a): its mask",
        ["dropout mask", "dropout's backward", "same mask", "mask skipped", "without the mask"],
        {"ffn_backward": FFN_TOP + FFN_ACT + FFN_GRADS},
    ),
    _p(
        "ffn",
        "the hidden dropout's backward divided by 1 - p again",
        "scaled",
        "a' = dropout(a), m = mask / (1-p)",
        K_SCALE_P,
        {
            "ffn_backward": FFN_TOP
            + FFN_DROP.replace("cache.drop)", "cache.drop) / (1.0 - self.dropout.p)")
            + FFN_ACT
            + FFN_GRADS
        },
        factor="1/(1-p)",
    ),
    _p(
        "ffn",
        "the hidden dropout's scale undone (times 1 - p)",
        "scaled",
        "a' = dropout(a), m = mask / (1-p)",
        K_SCALE_P,
        {
            "ffn_backward": FFN_TOP
            + FFN_DROP.replace("cache.drop)", "cache.drop) * (1.0 - self.dropout.p)")
            + FFN_ACT
            + FFN_GRADS
        },
        factor="1-p",
    ),
    _p(
        "ffn",
        "the activation's backward skipped",
        "dropped term",
        "a = act(u): the activation's derivative",
        [
            "activation's derivative",
            "activation's backward",
            "f'(u)",
            "f'(x)",
            "relu's backward",
            "through the activation",
        ],
        {
            "ffn_backward": FFN_TOP
            + FFN_DROP
            + FFN_ACT.replace("du = self.activation.backward(da, cache.act)", "du = da")
            + FFN_GRADS
        },
    ),
    _p(
        "ffn",
        "the gradients assigned, not added",
        "other",
        "self.grads[...] +=",
        K_ACCUMULATE,
        {"ffn_backward": FFN_TOP + FFN_DROP + FFN_ACT + FFN_GRADS.replace("+=", "=")},
    ),
    # -- add_norm --------------------------------------------------------------------------
    _p(
        "add_norm",
        "post-LN's residual path skips the LayerNorm (dy for dr)",
        "wrong input",
        "dr = LN_bwd(dy) on the residual path",
        ["residual path", "ln_bwd", "through the layernorm", "through the layer norm", "dr = ln"],
        _exit("""\
    dr = dy if self.norm_first else self._norm_backward(dy, cache.norm)
    return dy, self.dropout.backward(dr, cache.dropout)
"""),
    ),
    _p(
        "add_norm",
        "ds without the residual dropout's mask",
        "dropped term",
        "ds = dr * m",
        [
            "dropout mask",
            "dropout's backward",
            "same mask",
            "mask skipped",
            "without the mask",
            "* m",
        ],
        _exit("""\
    dr = dy if self.norm_first else self._norm_backward(dy, cache.norm)
    return dr, dr.copy()
"""),
    ),
    _p(
        "add_norm",
        "ds divided by 1 - p again",
        "scaled",
        "ds = dr * m, m = mask / (1-p)",
        K_SCALE_P,
        _exit(EXIT.replace("cache.dropout)\n", "cache.dropout) / (1.0 - self.dropout.p)\n")),
        factor="1/(1-p)",
    ),
    _p(
        "add_norm",
        "ds with the scale undone (times 1 - p)",
        "scaled",
        "ds = dr * m, m = mask / (1-p)",
        K_SCALE_P,
        _exit(EXIT.replace("cache.dropout)\n", "cache.dropout) * (1.0 - self.dropout.p)\n")),
        factor="1-p",
    ),
    _p(
        "add_norm",
        "pre-LN's enter_backward the identity",
        "dropped term",
        "LN_bwd on the sub-layer branch (pre-LN)",
        ["ln_bwd", "sub-layer branch", "enter_backward", "layer norm", "layernorm"],
        {"add_norm_exit_backward": EXIT, "add_norm_enter_backward": "    return ds_in\n"},
    ),
    _p(
        "add_norm",
        "post-LN's ds from dy, not from dr",
        "wrong input",
        "ds = dr * m, after LN_bwd",
        ["ln_bwd", "through the layernorm", "through the layer norm", "dr * m", "from dr"],
        _exit("""\
    dr = dy if self.norm_first else self._norm_backward(dy, cache.norm)
    return dr, self.dropout.backward(dy, cache.dropout)
"""),
    ),
    _p(
        "add_norm",
        "the residual path's gradient dropped",
        "dropped term",
        "the residual path dr",
        K_LAYER_RESIDUAL,
        _exit("""\
    dr = dy if self.norm_first else self._norm_backward(dy, cache.norm)
    return dr * 0.0, self.dropout.backward(dr, cache.dropout)
"""),
    ),
    # -- encoder_layer ---------------------------------------------------------------------
    _p(
        "encoder_layer",
        "the FFN block's residual gradient dropped",
        "dropped term",
        "the residual path (sum rule at the fork)",
        K_LAYER_RESIDUAL,
        {
            "encoder_layer_backward": ENC_FFN.replace(
                "dx = dx + self.ffn_norm", "dx = self.ffn_norm"
            )
            + ENC_ATTN
        },
    ),
    _p(
        "encoder_layer",
        "the self-attention block's residual gradient dropped",
        "dropped term",
        "the residual path (sum rule at the fork)",
        K_LAYER_RESIDUAL,
        {
            "encoder_layer_backward": ENC_FFN
            + ENC_ATTN.replace("return dx_res + self", "return self")
        },
    ),
    _p(
        "encoder_layer",
        "self-attention's dx_kv dropped (dx_q only)",
        "dropped term",
        "dx_q + dx_kv",
        ["dx_q + dx_kv", "dx_kv", "sum rule", "keys and values", "used three times", "three paths"],
        {"encoder_layer_backward": ENC_FFN + ENC_ATTN.replace("da_q + da_kv", "da_q")},
    ),
    _p(
        "encoder_layer",
        "dx_q in place of dx_kv (the queries' for the keys')",
        "wrong input",
        "dx_q + dx_kv",
        ["dx_q + dx_kv", "dx_kv", "keys and values", "three paths"],
        {"encoder_layer_backward": ENC_FFN + ENC_ATTN.replace("da_q + da_kv", "da_q + da_q")},
    ),
    _p(
        "encoder_layer",
        "the residual path given the layer's dout, not exit's dx",
        "wrong input",
        "dr = LN_bwd(dy) on the residual path",
        ["residual path", "ln_bwd", "through the layernorm", "through the layer norm"],
        {
            "encoder_layer_backward": ENC_FFN.replace(
                "dx = dx + self.ffn_norm", "dx = dout + self.ffn_norm"
            )
            + ENC_ATTN
        },
    ),
    # -- decoder_layer ---------------------------------------------------------------------
    _p(
        "decoder_layer",
        "cross-attention's dx_kv not passed on to the memory",
        "dropped term",
        "dmemory = dx_kv of the cross-attention",
        [
            "dx_kv",
            "keys and values",
            "cross-attention's key",
            "key/value",
            "sum rule",
            "memory's gradient",
        ],
        {
            "decoder_layer_backward": DEC_FFN
            + DEC_CROSS
            + DEC_SELF.replace("return dy, dmemory", "return dy, dmemory * 0.0")
        },
    ),
    _p(
        "decoder_layer",
        "the cross-attention block's residual gradient dropped",
        "dropped term",
        "the residual path (sum rule at the fork)",
        K_LAYER_RESIDUAL,
        {
            "decoder_layer_backward": DEC_FFN
            + DEC_CROSS.replace("dy = dy_res + self", "dy = self")
            + DEC_SELF
        },
    ),
    _p(
        "decoder_layer",
        "the FFN block's residual gradient dropped",
        "dropped term",
        "the residual path (sum rule at the fork)",
        K_LAYER_RESIDUAL,
        {
            "decoder_layer_backward": DEC_FFN.replace("dy = dy + self", "dy = self")
            + DEC_CROSS
            + DEC_SELF
        },
    ),
    _p(
        "decoder_layer",
        "masked self-attention's dx_kv dropped",
        "dropped term",
        "dx_q + dx_kv",
        ["dx_q + dx_kv", "dx_kv", "sum rule", "keys and values", "three paths"],
        {"decoder_layer_backward": DEC_FFN + DEC_CROSS + DEC_SELF.replace("da_q + da_kv", "da_q")},
    ),
    _p(
        "decoder_layer",
        "cross-attention given the residual dy, not ds (its dropout mask skipped)",
        "dropped term",
        "ds = dr * m, the residual dropout's mask",
        ["dropout mask", "same mask", "mask skipped", "without the mask", "* m", "ds = dr"],
        {
            "decoder_layer_backward": DEC_FFN
            + DEC_CROSS.replace(
                "self.cross_attn.backward(dx, c.sublayer)",
                "self.cross_attn.backward(dy_res, c.sublayer)",
            )
            + DEC_SELF
        },
    ),
    _p(
        "decoder_layer",
        "cross-attention's dx_q not taken through enter_backward (pre-LN's LN_bwd)",
        "dropped term",
        "LN_bwd on the dx_q branch (pre-LN)",
        ["ln_bwd", "enter_backward", "dx_q branch", "layer norm", "layernorm"],
        {
            "decoder_layer_backward": DEC_FFN
            + DEC_CROSS.replace("self.cross_attn_norm.enter_backward(dx_q, c.enter)", "dx_q")
            + DEC_SELF
        },
    ),
    # -- shaw ------------------------------------------------------------------------------
    _p(
        "shaw",
        "dR by a fancy-index assignment: repeated buckets keep one",
        "other",
        "dR = scatter(dZ'), a scatter-add",
        K_SCATTER,
        {
            "shaw_logits_backward": SHAW_HEAD
            + """\
    dR = xp.zeros((B, H, T, R), dtype=dZ.dtype)
    dR[..., xp.arange(T)[:, None], idx] = dZs
"""
            + SHAW_TAIL
        },
    ),
    _p(
        "shaw",
        "dQ without the relative term's dR E_k",
        "dropped term",
        "dQ += dR E_k (the relative term)",
        ["relative term", "dr e_k", "dr @ e_k", "dq +=", "both terms"],
        {
            "shaw_logits_backward": SHAW_HEAD
            + SHAW_SCATTER
            + SHAW_TAIL.replace("    dQ = dQ + dR @ E_k\n", "")
        },
    ),
    _p(
        "shaw",
        "dE_k without the scale s",
        "scaled",
        "dZ' = s dZ",
        K_SQRT_DK,
        {
            "shaw_logits_backward": SHAW_HEAD
            + SHAW_SCATTER
            + SHAW_TAIL.replace("dE_k = dR.reshape", "dE_k = (1.0 / s) * dR.reshape")
        },
        factor="sqrt(d_k)",
    ),
    _p(
        "shaw",
        "dE_k averaged over the heads",
        "scaled",
        "dE_k = sum over b, h of dR^T Q (shared by the heads)",
        ["1/h", "number of heads", "shared by the heads", "sum over heads", "averag*"],
        {
            "shaw_logits_backward": SHAW_HEAD
            + SHAW_SCATTER
            + SHAW_TAIL.replace("    return dQ, dK, dE_k\n", "    return dQ, dK, dE_k / H\n")
        },
        factor="1/H",
    ),
    _p(
        "shaw",
        "dK from the unscaled dZ",
        "scaled",
        "dZ' = s dZ in dK = dZ'^T Q",
        K_SQRT_DK,
        {
            "shaw_logits_backward": SHAW_HEAD.replace("dK = dZs.swapaxes", "dK = dZ.swapaxes")
            + SHAW_SCATTER
            + SHAW_TAIL
        },
        factor="sqrt(d_k)",
    ),
    # -- skew ------------------------------------------------------------------------------
    _p(
        "skew",
        "Skew^T taken as the skew again",
        "other",
        "Skew^T, the adjoint of the skew",
        [
            "adjoint",
            "skew^t",
            "transpose of the skew",
            "skew's backward",
            "skew_backward",
            "three transposes",
        ],
        {"skew_logits_backward": SKEW.replace(SKEW_T, "        drel = skew_forward(dZs)\n")},
    ),
    _p(
        "skew",
        "dE_r by a fancy-index assignment: clipped distances keep one",
        "other",
        "dE_r = scatter-add of dEr_L over rows",
        K_SCATTER + ["row k"],
        {
            "skew_logits_backward": SKEW.replace(
                "        dE_r = device.segment_sum(rows, dEr_L.swapaxes(0, 1), R).swapaxes(0, 1)\n",
                "        dE_r = xp.zeros(E_r.shape, dtype=dZ.dtype)\n        dE_r[:, rows] = dEr_L\n",
            )
        },
    ),
    _p(
        "skew",
        "dQ without the relative term (both forms)",
        "dropped term",
        "dQ += drel Er_L (the relative term)",
        ["relative term", "drel", "d rel", "dq +=", "both terms", "er_l"],
        {
            "skew_logits_backward": SKEW.replace("        dQ = dQ + drel @ Er_L\n", "").replace(
                "        dQ = dQ + dR @ E_r\n", ""
            )
        },
    ),
    _p(
        "skew",
        "dE_r summed over the heads (one table for all)",
        "other",
        "one table per head: dE_r[h] from head h",
        ["per head", "each head", "one table per head", "summed over the heads", "sum over heads"],
        {
            "skew_logits_backward": SKEW.replace(
                "    return dQ, dK, dE_r.astype(E_r.dtype)\n",
                "    dE_r = xp.broadcast_to(dE_r.sum(axis=0), E_r.shape).copy()\n    return dQ, dK, dE_r.astype(E_r.dtype)\n",
            )
        },
    ),
    _p(
        "skew",
        "dEr_L from K, not Q (skew form)",
        "wrong input",
        "dEr_L = sum over b of drel^T Q",
        ["drel^t q", "d rel^t q", "k for q", "q for k", "keys for the queries"],
        {
            "skew_logits_backward": SKEW.replace(
                "dEr_L = (drel.swapaxes(-1, -2) @ Q)", "dEr_L = (drel.swapaxes(-1, -2) @ K)"
            )
        },
    ),
    # -- adam ------------------------------------------------------------------------------
    _p(
        "adam",
        "m-hat uncorrected",
        "dropped term",
        "m-hat's bias correction 1 - beta1^t",
        K_BIAS_CORR + ["m_hat", "m-hat", "1 - beta1^t", "1-beta1^t"],
        {
            "adam_update": ADAM_MOMENTS
            + "    v_hat = v / (1 - beta2**t)\n    theta -= lr * m / (xp.sqrt(v_hat) + eps)\n"
        },
    ),
    _p(
        "adam",
        "v-hat uncorrected",
        "dropped term",
        "v-hat's bias correction 1 - beta2^t",
        K_BIAS_CORR + ["v_hat", "v-hat", "1 - beta2^t", "1-beta2^t"],
        {
            "adam_update": ADAM_MOMENTS
            + "    m_hat = m / (1 - beta1**t)\n    theta -= lr * m_hat / (xp.sqrt(v) + eps)\n"
        },
    ),
    _p(
        "adam",
        "both bias corrections with t + 1",
        "other",
        "the bias corrections' t",
        K_BIAS_CORR + ["t + 1", "t+1", "off by one", "step count"],
        {
            "adam_update": ADAM_MOMENTS
            + "    m_hat = m / (1 - beta1 ** (t + 1))\n    v_hat = v / (1 - beta2 ** (t + 1))\n    theta -= lr * m_hat / (xp.sqrt(v_hat) + eps)\n"
        },
    ),
    _p(
        "adam",
        "both bias corrections with t - 1",
        "other",
        "the bias corrections' t",
        K_BIAS_CORR
        + ["t - 1", "t-1", "off by one", "step count", "divides by 0", "division by zero"],
        {
            "adam_update": ADAM_MOMENTS
            + "    m_hat = m / (1 - beta1 ** (t - 1))\n    v_hat = v / (1 - beta2 ** (t - 1))\n    theta -= lr * m_hat / (xp.sqrt(v_hat) + eps)\n"
        },
    ),
    _p(
        "adam",
        "eps inside the square root",
        "other",
        "eps, added outside the square root",
        [
            "inside the square root",
            "outside the square root",
            "sqrt(v_hat + eps)",
            "inside the sqrt",
            "eps inside",
        ],
        {
            "adam_update": ADAM_MOMENTS
            + "    m_hat = m / (1 - beta1**t)\n    v_hat = v / (1 - beta2**t)\n    theta -= lr * m_hat / xp.sqrt(v_hat + eps)\n"
        },
    ),
    _p(
        "adam",
        "v from g, not g^2",
        "wrong input",
        "v_t = beta2 v + (1 - beta2) g^2",
        ["g^2", "g²", "g * g", "squared gradient", "second moment"],
        {
            "adam_update": ADAM_MOMENTS.replace("(1 - beta2) * g * g", "(1 - beta2) * xp.abs(g)")
            + "    m_hat = m / (1 - beta1**t)\n    v_hat = v / (1 - beta2**t)\n    theta -= lr * m_hat / (xp.sqrt(v_hat) + eps)\n"
        },
    ),
    _p(
        "adam",
        "v-hat corrected with beta1",
        "wrong input",
        "v-hat's bias correction 1 - beta2^t",
        K_BIAS_CORR + ["v_hat", "v-hat", "1 - beta2^t", "beta1 for beta2", "beta2"],
        {
            "adam_update": ADAM_MOMENTS
            + "    m_hat = m / (1 - beta1**t)\n    v_hat = v / (1 - beta1**t)\n    theta -= lr * m_hat / (xp.sqrt(v_hat) + eps)\n"
        },
    ),
    _p(
        "adam",
        "the step added, not subtracted",
        "sign-flipped term",
        "theta <- theta - lr m_hat / (sqrt(v_hat) + eps)",
        ["flipped sign", "sign flipped", "opposite sign", "ascent", "added instead"],
        {
            "adam_update": ADAM_MOMENTS
            + "    m_hat = m / (1 - beta1**t)\n    v_hat = v / (1 - beta2**t)\n    theta += lr * m_hat / (xp.sqrt(v_hat) + eps)\n"
        },
    ),
    _p(
        "adam",
        "m-hat written back into m (the stored moment corrected)",
        "other",
        "m-hat's bias correction, never stored in m",
        K_BIAS_CORR + ["m_hat", "m-hat", "written into m", "m itself", "corrected moment"],
        {
            "adam_update": ADAM_MOMENTS
            + "    m /= 1 - beta1**t\n    v_hat = v / (1 - beta2**t)\n    theta -= lr * m / (xp.sqrt(v_hat) + eps)\n"
        },
    ),
]
