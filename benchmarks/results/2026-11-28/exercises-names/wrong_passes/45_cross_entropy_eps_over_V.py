# ruff: noqa
"""Exercise cross_entropy: the backward pass of label-smoothed cross-entropy over log-softmax. Write ``cross_entropy_backward`` below.

The training loss, from the logits: log-softmax, then the cross-entropy against the
smoothed target q (q[y] = 1 - eps, q[k] = eps / (V - 1) for the other k), summed over
the targets that are not padding and divided by their number.

    scratchformer exercise check cross_entropy      grade it
    scratchformer exercise hint cross_entropy       the next hint
    scratchformer exercise solution cross_entropy   the engine's code and derivation

The derivation: docs/derivations.md#label-smoothed-cross-entropy (on the docs site: derivations.html#label-smoothed-cross-entropy).
The forward is given as the engine has it (scratchformer/engine/ops/loss.py); the
checker runs the engine's forward and compares your backward with float64
central differences of sum(out * dout) on these inputs:
    eps 0.1, pad 0
    eps 0

``xp`` is NumPy (CuPy on a GPU): xp.zeros, xp.sum, xp.exp, ... as with np.
"""

from __future__ import annotations

from scratchformer.engine.backend import xp
from scratchformer.engine.ops.loss import LossCache

EXERCISE = "cross_entropy"


# -- given: the forward pass, as in the engine ---------------------------------------------
def cross_entropy_forward(logits, target, eps: float = 0.0, pad_id: int | None = None):
    """Fused log-softmax + label-smoothed NLL: logits (N..., V), target (N...) -> loss.

    The same value as ``label_smoothed_nll_forward(log_softmax(logits), ...)``, with a
    backward that never materialises the log-softmax Jacobian, and without the log-prob
    array: per row only ``m = max x``, ``lse = log sum exp(x - m)``, the shifted target
    logit and (with smoothing) the row sum of ``x - m`` are needed, because

        -lp[y] = lse - (x[y] - m),    -sum_k lp[k] = V lse - sum_k (x[k] - m).

    The cache keeps the probabilities ``P`` (N..., V) for the backward.
    Derivation: docs/derivations.md#label-smoothed-cross-entropy.
    """
    check_scores(logits, target)
    V = logits.shape[-1]
    off, on = smoothing_weights(V, eps)
    x = logits.reshape(-1, V)  # (N, V)
    keep = xp.ones(target.shape, dtype=bool) if pad_id is None else target != pad_id
    target = index_targets(target, pad_id, V)
    tgt = target.reshape(-1)  # (N,)
    rows = xp.arange(tgt.shape[0])
    m = x.max(axis=-1, keepdims=True)  # (N, 1)
    z = x - m  # (N, V) shifted logits
    z_y = z[rows, tgt]  # (N,) shifted target logits
    sum_z = z.sum(axis=-1) if eps else None  # (N,)
    e = xp.exp(z)  # (N, V) unnormalised probabilities
    s = e.sum(axis=-1, keepdims=True)  # (N, 1), >= 1 (the max entry gives exp(0))
    P = e * (1.0 / s)  # (N, V)
    lse = xp.log(s[:, 0])  # (N,)
    nll = lse - z_y  # (N,) -lp[y]
    per_token = on * nll
    if eps:
        per_token = per_token + off * (V * lse - sum_z)
    keep_flat = keep.reshape(-1)
    n_tokens = keep_flat.sum()  # 0-d
    loss = (per_token * keep_flat).sum() / _at_least_1(n_tokens, logits.dtype)
    nll_sum = (nll * keep_flat).sum()
    return loss.astype(logits.dtype), LossCache(
        target, keep, eps, n_tokens, nll_sum, V, logits.dtype, P.reshape(logits.shape)
    )


def smoothing_weights(V: int, eps: float):
    """``(off, on)``: the weight ``eps/(V-1)`` of every non-target token, and the weight
    ``1 - eps - off`` added on the target (so that the target's is ``1 - eps``)."""
    if eps and V < 2:
        raise ValueError("label smoothing needs a vocabulary of at least 2")
    off = eps / (V - 1) if eps else 0.0  # weight on every non-target token
    return off, 1.0 - eps - off


def check_scores(scores, target):
    """Scores (N..., V) and targets (N...) must agree in their leading shape."""
    if scores.shape[:-1] != target.shape:
        raise ValueError(
            f"scores {tuple(scores.shape)} and target {tuple(target.shape)} disagree: "
            "expected scores of shape target.shape + (V,)"
        )


def _at_least_1(n, dtype):
    """``max(n, 1)`` of a 0-d count, as ``dtype`` (no empty batch divides by 0)."""
    return xp.maximum(n, 1).astype(dtype)


def index_targets(target, pad_id, V: int):
    """``target`` as indices into the scores' last axis: itself, or where the padding id
    is no token of the vocabulary (``pad_id >= V``) 0 at the padding, whose rows are not
    kept (only a valid index is needed there)."""
    if pad_id is None or pad_id < V:
        return target
    return xp.where(target == pad_id, 0, target)


# -- yours: the backward pass --------------------------------------------------------------
def cross_entropy_backward(dout, cache):
    """dout (): the gradient of the loss with respect to the loss itself (1 in training), a
    0-d array.

    cache (a LossCache):
        cache.target    (N...) int        the target ids
        cache.keep      (N...) bool       target != pad_id: the targets that count
        cache.eps       float             label smoothing
        cache.n_tokens  int               the number of targets that count (keep.sum())
        cache.V         int               the vocabulary, the last axis of the logits
        cache.P         (N..., V)         softmax(logits)
        (cache.nll_sum, cache.dtype: not needed here)

    Return ``dlogits`` (N..., V) like the logits.
    """
    V = cache.V
    P = cache.P.reshape(-1, V)
    tgt = cache.target.reshape(-1)
    keep = cache.keep.reshape(-1)

    off = cache.eps / V
    q = xp.full_like(P, off)
    q[xp.arange(tgt.shape[0]), tgt] = 1.0 - cache.eps
    r = keep * dout / max(int(cache.n_tokens), 1)
    d = (P - q) * r[:, None]
    return d.reshape(cache.P.shape)
