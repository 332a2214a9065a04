"""Label-smoothed cross-entropy that ignores padding, with fairseq's formula.

For one non-pad target token with log-probabilities ``lp`` (V,) and target ``y``:

    loss = (1 - eps - eps/(V-1)) * (-lp[y]) + eps/(V-1) * (-sum_k lp[k])

which is the cross-entropy against ``q``: ``q[y] = 1 - eps``, ``q[k] = eps/(V-1)`` for
``k != y``. We report the mean over non-pad target tokens; eps = 0 is plain NLL.
(Older fairseq smoothed with eps/V; tensor2tensor subtracts q's entropy when reporting.)

Dimension key: ``N`` any leading dims (B, T), ``V`` vocabulary.
Derivation: docs/derivations.md#label-smoothed-cross-entropy.
"""

from __future__ import annotations

from typing import NamedTuple

from scratchformer.backend import xp


class LossCache(NamedTuple):
    target: object  # (N...) int target ids
    keep: object  # (N...) bool, target != pad
    eps: float  # label smoothing
    # The two sums stay arrays of the backend (0-d): reading them on the host would stall
    # a GPU at every step; a caller reads them when it reports them.
    n_tokens: object  # 0-d int: the number of non-pad targets, the normaliser
    nll_sum: object  # 0-d float: the sum of -lp[y] over non-pad targets (for perplexity)
    V: int  # vocabulary size, the last axis of the scores
    dtype: object  # dtype of the scores
    P: object  # (N..., V) softmax probabilities (fused form only, else None)
    # [bool] for an implementation whose backward writes dlogits over P: True once it
    # has (the cache then serves no second backward); None: P is never overwritten
    spent: object = None


def _at_least_1(n, dtype):
    """``max(n, 1)`` of a 0-d count, as ``dtype`` (no empty batch divides by 0)."""
    return xp.maximum(n, 1).astype(dtype)


def _smoothing_weights(V: int, eps: float):
    if eps and V < 2:
        raise ValueError("label smoothing needs a vocabulary of at least 2")
    off = eps / (V - 1) if eps else 0.0  # weight on every non-target token
    return off, 1.0 - eps - off  # (eps/(V-1), weight added on the target)


def _check(scores, target):
    if scores.shape[:-1] != target.shape:
        raise ValueError(
            f"scores {tuple(scores.shape)} and target {tuple(target.shape)} disagree: "
            "expected scores of shape target.shape + (V,)"
        )


def label_smoothed_nll_forward(lprobs, target, eps: float = 0.0, pad_id: int | None = None):
    """lprobs (N..., V) log-probabilities, target (N...) int  ->  loss (scalar), cache.

    ``loss = sum over non-pad tokens of the formula above / n_tokens``.
    """
    _check(lprobs, target)
    off, on = _smoothing_weights(lprobs.shape[-1], eps)
    keep = xp.ones(target.shape, dtype=bool) if pad_id is None else target != pad_id
    n_tokens = keep.sum()  # 0-d
    nll = -xp.take_along_axis(lprobs, target[..., None], axis=-1)[..., 0]  # (N...)
    per_token = on * nll
    if eps:
        per_token = per_token - off * lprobs.sum(axis=-1)
    per_token = per_token * keep
    loss = per_token.sum() / _at_least_1(n_tokens, lprobs.dtype)
    nll_sum = (nll * keep).sum()
    return loss, LossCache(
        target, keep, eps, n_tokens, nll_sum, lprobs.shape[-1], lprobs.dtype, None
    )


def _dscores_minus_q(base, cache: LossCache, dout, out=None):
    """``(base - q) * keep * dout / n_tokens``; base is P (fused) or 0 (log-prob form).

    Two passes over (N, V): ``base * r`` and ``- off * r`` with the per-row factor
    ``r = keep * dout / n_tokens``, then the target entries get ``- on * r``.
    """
    target, keep, eps, n_tokens = cache.target, cache.keep, cache.eps, cache.n_tokens
    off, on = _smoothing_weights(cache.V, eps)
    V = cache.V
    r = keep.reshape(-1, 1) * (dout / _at_least_1(n_tokens, xp.float64))
    r = r.astype(cache.dtype)  # (N, 1)
    d = xp.multiply(base.reshape(-1, V), r, out=None if out is None else out.reshape(-1, V))
    if eps:
        d -= off * r  # subtract q: off everywhere ...
    rows = xp.arange(d.shape[0])
    d[rows, target.reshape(-1)] -= on * r[:, 0]  # ... and 1 - eps - off more on the target
    return d.reshape(base.shape)


def label_smoothed_nll_backward(dout, cache: LossCache):
    """``dlprobs = -q * keep * dout / n_tokens`` (zero rows for padding)."""
    zeros = xp.zeros(cache.target.shape + (cache.V,), dtype=cache.dtype)
    return _dscores_minus_q(zeros, cache, dout)


def cross_entropy_forward(logits, target, eps: float = 0.0, pad_id: int | None = None, out=None):
    """Fused log-softmax + label-smoothed NLL: logits (N..., V), target (N...) -> loss.

    The same value as ``label_smoothed_nll_forward(log_softmax(logits), ...)``, with a
    backward that never materialises the log-softmax Jacobian, and without the log-prob
    array: per row only ``m = max x``, ``lse = log sum exp(x - m)``, the shifted target
    logit and (with smoothing) the row sum of ``x - m`` are needed, because

        -lp[y] = lse - (x[y] - m),    -sum_k lp[k] = V lse - sum_k (x[k] - m).

    Five passes over the (N, V) scores: max, subtract, (row sum,) exp, row sum, scale;
    every other quantity is per row. The cache keeps the probabilities ``P`` (N..., V),
    in ``out`` when given (it may be ``logits`` itself, when the caller does not need
    its logits any more), else in a new array.
    Derivation: docs/derivations.md#label-smoothed-cross-entropy.
    """
    _check(logits, target)
    V = logits.shape[-1]
    off, on = _smoothing_weights(V, eps)
    x = logits.reshape(-1, V)  # (N, V); a view when logits is contiguous
    tgt = target.reshape(-1)  # (N,)
    rows = xp.arange(tgt.shape[0])
    m = x.max(axis=-1, keepdims=True)  # (N, 1)
    e = xp.subtract(x, m, out=None if out is None else out.reshape(-1, V))  # (N, V) x - m
    z_y = e[rows, tgt]  # (N,) shifted target logits
    sum_z = e.sum(axis=-1) if eps else None  # (N,)
    xp.exp(e, out=e)  # (N, V) unnormalised probabilities
    s = e.sum(axis=-1, keepdims=True)  # (N, 1), >= 1 (the max entry gives exp(0))
    e *= 1.0 / s  # P
    lse = xp.log(s[:, 0])  # (N,)
    nll = lse - z_y  # (N,) -lp[y]
    per_token = on * nll
    if eps:
        per_token = per_token + off * (V * lse - sum_z)
    keep = xp.ones(target.shape, dtype=bool) if pad_id is None else target != pad_id
    keep_flat = keep.reshape(-1)
    n_tokens = keep_flat.sum()  # 0-d
    loss = (per_token * keep_flat).sum() / _at_least_1(n_tokens, logits.dtype)
    nll_sum = (nll * keep_flat).sum()
    P = e.reshape(logits.shape)  # (N..., V)
    return loss.astype(logits.dtype), LossCache(
        target, keep, eps, n_tokens, nll_sum, V, logits.dtype, P
    )


def cross_entropy_backward(dout, cache: LossCache, out=None):
    """``dlogits = (softmax(logits) - q) * keep * dout / n_tokens``, into ``out`` when
    given (it may be ``cache.P`` itself, when the cache will not be used again: the
    cache is then marked spent, and a second backward through it raises ValueError
    instead of reading gradients as probabilities)."""
    if cache.spent is not None and cache.spent[0]:
        raise ValueError(
            "this loss cache was spent by an in-place backward (dlogits were written "
            "over its probabilities): run the forward again"
        )
    d = _dscores_minus_q(cache.P, cache, dout, out=out)
    if out is cache.P and cache.spent is not None:
        cache.spent[0] = True
    return d
