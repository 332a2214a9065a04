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
from scratchformer.ops.softmax import log_softmax_forward


class LossCache(NamedTuple):
    target: object  # (N...) int target ids
    keep: object  # (N...) bool, target != pad
    eps: float  # label smoothing
    n_tokens: int  # number of non-pad targets, the normaliser
    nll_sum: float  # sum of -lp[y] over non-pad targets (for perplexity)
    V: int  # vocabulary size, the last axis of the scores
    dtype: object  # dtype of the scores
    P: object  # (N..., V) softmax probabilities (fused form only, else None)


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
    n_tokens = int(keep.sum())
    nll = -xp.take_along_axis(lprobs, target[..., None], axis=-1)[..., 0]  # (N...)
    per_token = on * nll
    if eps:
        per_token = per_token - off * lprobs.sum(axis=-1)
    per_token = per_token * keep
    loss = per_token.sum() / max(n_tokens, 1)
    nll_sum = float((nll * keep).sum())
    return loss, LossCache(
        target, keep, eps, n_tokens, nll_sum, lprobs.shape[-1], lprobs.dtype, None
    )


def _dscores_minus_q(base, cache: LossCache, dout):
    """``(base - q) * keep * dout / n_tokens``; base is P (fused) or 0 (log-prob form)."""
    target, keep, eps, n_tokens = cache.target, cache.keep, cache.eps, cache.n_tokens
    off, on = _smoothing_weights(cache.V, eps)
    d = base - off if eps else base.copy()  # subtract q: off everywhere ...
    xp.put_along_axis(  # ... and 1 - eps - off more on the target
        d, target[..., None], xp.take_along_axis(d, target[..., None], axis=-1) - on, axis=-1
    )
    d *= (keep * (dout / max(n_tokens, 1)))[..., None].astype(d.dtype)
    return d


def label_smoothed_nll_backward(dout, cache: LossCache):
    """``dlprobs = -q * keep * dout / n_tokens`` (zero rows for padding)."""
    zeros = xp.zeros(cache.target.shape + (cache.V,), dtype=cache.dtype)
    return _dscores_minus_q(zeros, cache, dout)


def cross_entropy_forward(logits, target, eps: float = 0.0, pad_id: int | None = None):
    """Fused log-softmax + label-smoothed NLL: logits (N..., V), target (N...) -> loss.

    The same value as ``label_smoothed_nll_forward(log_softmax(logits), ...)``, with a
    backward that never materialises the log-softmax Jacobian.
    """
    _check(logits, target)
    lprobs, ls_cache = log_softmax_forward(logits)
    loss, cache = label_smoothed_nll_forward(lprobs, target, eps, pad_id)
    return loss, cache._replace(P=ls_cache.P)


def cross_entropy_backward(dout, cache: LossCache):
    """``dlogits = (softmax(logits) - q) * keep * dout / n_tokens``."""
    return _dscores_minus_q(cache.P, cache, dout)
