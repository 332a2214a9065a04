"""cross_entropy: log-softmax fused with the label-smoothed NLL (ops/loss.py), the
training loss of every model.

    reference   ops/loss.py: the probabilities P in a new (N, V) array
    inplace     the same steps with P in the logits' buffer (the caller gives the
                logits up) and dlogits written over P: no second (N, V) array in
                either pass; its cache serves one backward. Bitwise equal, the default

Accessors: ``n_tokens`` and ``nll_sum`` (0-d, on the device), for the logs.

Dimension key: ``N...`` the leading dims (B, T), ``V`` vocabulary.
"""

from __future__ import annotations

from scratchformer.backend import xp
from scratchformer.kernels.cases import Case, randn, targets
from scratchformer.kernels.label_smoothed_nll import READ
from scratchformer.kernels.table import Implementation, Schema, new_table
from scratchformer.ops import loss as _op

SCHEMA = Schema(inputs=("logits", "target", "eps", "pad_id"), gradients=("dlogits",),
                accessors=("n_tokens", "nll_sum"), donatable=("logits",))  # fmt: skip


def cases(r, dt):
    logits = randn(r, (3, 4, 7), dt)
    return [
        Case("eps 0.1, pad 0", (logits, targets(r), 0.1, 0)),
        Case("eps 0", (logits, targets(r))),
    ]


def inplace_forward(logits, target, eps: float = 0.0, pad_id=None):
    """``cross_entropy_forward``'s steps with the shifted logits, their exponentials and
    the probabilities each written over the logits' buffer (given up)."""
    _op.check_scores(logits, target)
    V = logits.shape[-1]
    off, on = _op.smoothing_weights(V, eps)
    x = logits.reshape(-1, V)  # (N, V), a view of the logits
    tgt = target.reshape(-1)  # (N,)
    rows = xp.arange(tgt.shape[0])
    m = x.max(axis=-1, keepdims=True)  # (N, 1)
    e = xp.subtract(x, m, out=x)  # (N, V) shifted logits
    z_y = e[rows, tgt]  # (N,)
    sum_z = e.sum(axis=-1) if eps else None  # (N,)
    xp.exp(e, out=e)  # unnormalised probabilities
    s = e.sum(axis=-1, keepdims=True)  # (N, 1)
    e *= 1.0 / s  # P
    lse = xp.log(s[:, 0])  # (N,)
    nll = lse - z_y
    per_token = on * nll
    if eps:
        per_token = per_token + off * (V * lse - sum_z)
    keep = xp.ones(target.shape, dtype=bool) if pad_id is None else target != pad_id
    keep_flat = keep.reshape(-1)
    n_tokens = keep_flat.sum()  # 0-d
    loss = (per_token * keep_flat).sum() / xp.maximum(n_tokens, 1).astype(logits.dtype)
    nll_sum = (nll * keep_flat).sum()
    P = e.reshape(logits.shape)  # the logits' buffer (a copy only if they were strided)
    cache = _op.LossCache(target, keep, eps, n_tokens, nll_sum, V, logits.dtype, P)
    return loss.astype(logits.dtype), cache


def inplace_backward(dout, cache: _op.LossCache):
    """dlogits written over the cached probabilities (the cache is then spent)."""
    r = _op.row_factors(cache, dout)  # (N, 1)
    d = cache.P.reshape(-1, cache.V)
    xp.multiply(d, r, out=d)
    _op.subtract_q(d, r, cache)
    return cache.P


TABLE = new_table(
    "cross_entropy", SCHEMA, _op.cross_entropy_forward, _op.cross_entropy_backward, cases,
    accessors=READ,
)  # fmt: skip
TABLE.register(
    Implementation(
        "inplace", inplace_forward, inplace_backward, default=True, exact=True,
        donates=("logits",), consumes_cache=True, accessors=READ,
        note="P in the logits' buffer (given up), dlogits over P: one backward per cache",
    )
)  # fmt: skip
forward, backward = TABLE.forward, TABLE.backward
n_tokens = TABLE.accessor("n_tokens")
nll_sum = TABLE.accessor("nll_sum")
