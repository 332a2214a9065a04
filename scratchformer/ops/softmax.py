"""Masked softmax and log-softmax over the last axis, numerically stable.

Dimension key: ``...`` any leading dims, ``K`` the softmax axis (keys, or vocabulary V).
Derivation: docs/derivations.md#softmax and #log-softmax.
"""

from __future__ import annotations

from typing import NamedTuple

from scratchformer.backend import xp


class SoftmaxCache(NamedTuple):
    P: object  # (..., K) the output probabilities; masked entries are exactly 0


def softmax_forward(x, mask=None):
    """``P = exp(x - max x) / sum exp(x - max x)`` over entries where ``mask`` is True.

    x (..., K); mask bool, broadcastable to x, True where an entry takes part.
    A row with no True entry gives all zeros (never NaN): its max is -inf, which is
    replaced by 0 so that ``exp(-inf - 0) = 0`` and the zero sum is divided by 1.
    """
    if mask is not None:
        x = xp.where(mask, x, -xp.inf)
    m = x.max(axis=-1, keepdims=True)  # (..., 1)
    m = xp.where(xp.isneginf(m), 0.0, m)
    e = xp.exp(x - m)
    s = e.sum(axis=-1, keepdims=True)  # (..., 1)
    s = xp.where(s == 0, 1.0, s)
    e *= 1.0 / s  # one reciprocal per row, then a product per entry
    return e, SoftmaxCache(e)


def softmax_backward(dout, cache: SoftmaxCache):
    """``dx = P * (dP - sum(dP * P, -1))`` with ``dP = dout``: closed form, no (K, K) Jacobian.

    Masked entries have P = 0 and so get zero gradient.
    """
    P = cache.P
    return (dout - (dout * P).sum(axis=-1, keepdims=True)) * P


class LogSoftmaxCache(NamedTuple):
    P: object  # (..., K) softmax(x) = exp(out)


def log_softmax_forward(x):
    """``out = x - logsumexp(x)``, computed as ``(x - m) - log(sum exp(x - m))``."""
    m = x.max(axis=-1, keepdims=True)
    shifted = x - m
    lse = xp.log(xp.exp(shifted).sum(axis=-1, keepdims=True))
    out = shifted - lse
    return out, LogSoftmaxCache(xp.exp(out))


def log_softmax_backward(dout, cache: LogSoftmaxCache):
    """``dx = dout - P * sum(dout, -1)``."""
    return dout - cache.P * dout.sum(axis=-1, keepdims=True)
