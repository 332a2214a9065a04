"""Masked softmax and log-softmax over the last axis, numerically stable.

The reference pairs first. By default the softmax's backward takes its row sums as
``device.rowdot`` (below): no (..., K) product array. Log-softmax (decoding's
log-probabilities) runs its reference. Inside attention the softmax usually runs fused
into the attention core (ops/attention_fast.py); float16 activations take the emulated
float16 forms (ops/float16.py).

Dimension key: ``...`` any leading dims, ``K`` the softmax axis (keys, or vocabulary V).
Derivation: docs/derivations.md#softmax and #log-softmax.
"""

from __future__ import annotations

from typing import NamedTuple

from scratchformer.engine import device
from scratchformer.engine.backend import xp
from scratchformer.engine.dispatch import Op
from scratchformer.engine.ops import float16
from scratchformer.engine.ops.cases import Case, mask, randn


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


# -- the softmax's backward with row dot products ------------------------------------------
def softmax_rowdot_backward(dout, cache: SoftmaxCache):
    """``dx = P * (dout - rowdot(dout, P))``."""
    P = cache.P
    return (dout - device.rowdot(dout, P)[..., None]) * P


# -- the parity cases and the registration ---------------------------------------------------
def softmax_cases(r, dt):
    x = randn(r, (2, 3, 4, 7), dt)
    return [Case("masked, an empty row", (x, mask(r, (2, 1, 4, 7)))), Case("no mask", (x,))]


def log_softmax_cases(r, dt):
    return [Case("(3, 7)", (randn(r, (3, 7), dt),))]


softmax = Op("softmax", softmax_forward, softmax_backward, inputs=("x", "mask"),
             gradients=("dx",), accessors={"P": lambda c: c.P}, cases=softmax_cases)
softmax.register("rowdot", softmax_forward, softmax_rowdot_backward, default=True,
                 accessors={"P": lambda c: c.P},
                 note="the row sums of the backward without the (..., K) product")
float16.register(softmax)

log_softmax = Op("log_softmax", log_softmax_forward, log_softmax_backward, inputs=("x",),
                 gradients=("dx",), cases=log_softmax_cases)
float16.register(log_softmax)
