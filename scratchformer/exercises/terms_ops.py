"""The op exercises' backward passes written as the derivation's named terms (terms.py).

Each ``_<op>(k)`` returns the exercise's functions with the knob ``k`` applied: a term's
coefficient ``k("key")`` (1 unless it is the one changed) or an input replaced
(``k.swap("key")``). With no knob each equals the engine's backward to rounding
(tests/exercises/test_terms.py). The says of each term quote the derivation's words.
"""

from __future__ import annotations

import math

from scratchformer.engine.backend import xp
from scratchformer.exercises.terms import Swap, Term, TermSet

_GELU_C, _GELU_A = math.sqrt(2.0 / math.pi), 0.044715


def _size(sizes: dict, short: str) -> float:
    for name, value in sizes.items():
        if name.split(" (")[0] == short:
            return value
    return float("nan")


# -- linear ------------------------------------------------------------------------------
def _linear(k):
    def linear_backward(dout, cache):
        x, W = cache.x, cache.W
        d_in, d_out = W.shape
        x2, d2 = x.reshape(-1, d_in), dout.reshape(-1, d_out)  # (N, D_in), (N, D_out)
        dx = k("dx") * (d2 @ W.T).reshape(x.shape)
        dW = (d2.T @ x2).reshape(d_in, d_out) if k.swap("dW-T") else x2.T @ d2
        db = k("db") * d2.sum(axis=0) if cache.has_bias else None
        return dx, k("dW") * dW, db

    return {"linear_backward": linear_backward}


LINEAR = TermSet(
    _linear,
    terms=(Term("dx", "dx = dout W^T"), Term("dW", "dW = x^T dout, summed over every row"),
           Term("db", "db = the sum of dout over every row")),
    swaps=(Swap("dW-T", "dW computed as dout^T x, the transpose of x^T dout, and reshaped to "
                "W's shape: a different matrix"),),
    sums={"dx": ("dx",), "dW": ("dW",), "db": ("db",)},
)


# -- ReLU, GELU --------------------------------------------------------------------------
def _relu(k):
    def relu_backward(dout, cache):
        mask = cache.positive
        if k.swap("inverted"):
            mask = xp.logical_not(mask)
        if k.swap("no-mask"):
            return dout * 1.0
        if k.swap("no-dout"):
            return mask.astype(dout.dtype)
        return k("dx") * (dout * mask)

    return {"relu_backward": relu_backward}


RELU = TermSet(
    _relu,
    terms=(Term("dx", "dx = dout * [x > 0]"),),
    swaps=(Swap("no-mask", "the mask [x > 0] left out: dx = dout, as if ReLU were the "
                "identity"),
           Swap("no-dout", "dout (the incoming gradient) left out: dx = [x > 0], the local "
                "derivative alone; the chain rule multiplies it by dout"),
           Swap("inverted", "the mask inverted: the gradient passed where x <= 0")),
    sums={"dx": ("dx",)},
)


def _gelu(k):
    def gelu_backward(dout, cache):
        x, t = cache.x, cache.tanh_u
        c = 1.0 if k.swap("no-c") else _GELU_C
        three = 1.0 if k.swap("no-3") else 3.0
        du_dx = c * (1.0 + three * _GELU_A * x * x)
        if k.swap("no-du"):
            du_dx = 1.0
        dtanh = 1.0 - t * t
        if k.swap("1-t"):
            dtanh = 1.0 - t
        elif k.swap("1+t2"):
            dtanh = 1.0 + t * t
        elif k.swap("no-dtanh"):
            dtanh = 1.0
        xx = 1.0 if k.swap("no-x") else x
        first = 0.5 * (1.0 + t)
        second = 0.5 * xx * dtanh * du_dx
        return dout * (k("first") * first + k("second") * second)

    return {"gelu_backward": gelu_backward}


_SECOND = "the second term of GELU's derivative, 0.5 x (1 - t^2) du/dx"
GELU = TermSet(
    _gelu,
    terms=(Term("first", "the first term of GELU's derivative, 0.5 (1 + t) (the product "
                "rule's derivative of x),"),
           Term("second", f"{_SECOND},", known=((lambda s: 1.0 / _GELU_C, "1/sqrt(2/pi): the "
                                             "constant c = sqrt(2/pi) of du/dx left out"),))),
    swaps=(Swap("1-t", f"tanh's derivative written 1 - t in {_SECOND}, where it is 1 - t^2"),
           Swap("1+t2", f"tanh's derivative written 1 + t^2 in {_SECOND}, where it is "
                "1 - t^2"),
           Swap("no-3", "du/dx without the 3 of d(x^3)/dx = 3x^2: c (1 + a x^2) for c (1 + 3 a "
                "x^2), in the second term"),
           Swap("no-c", "du/dx without the constant c = sqrt(2/pi): 1 + 3 a x^2 for c (1 + 3 a "
                "x^2), in the second term"),
           Swap("no-du", f"du/dx (the chain rule through u) left out of {_SECOND}"),
           Swap("no-dtanh", f"tanh's derivative 1 - t^2 left out of {_SECOND}"),
           Swap("no-x", f"the factor x left out of {_SECOND}")),
    sums={"dx": ("first", "second")},
)


# -- embedding ---------------------------------------------------------------------------
def _embedding(k):
    def embedding_backward(dout, cache):
        d = dout.shape[-1]
        ids = cache.ids.reshape(-1)
        dE = xp.zeros((cache.vocab_size, d), dtype=dout.dtype)
        if k.swap("fancy"):
            dE[ids] += dout.reshape(-1, d)
        else:
            xp.add.at(dE, ids, dout.reshape(-1, d))
        if k.swap("mean"):
            dE /= xp.maximum(xp.bincount(ids, minlength=cache.vocab_size), 1)[:, None]
        if cache.pad_id is not None and not k.swap("pad"):
            dE[cache.pad_id] = 0
        return k("dE") * dE

    return {"embedding_backward": embedding_backward}


EMBEDDING = TermSet(
    _embedding,
    terms=(Term("dE", "dE = the sum of dout over the positions of each id"),),
    swaps=(Swap("fancy", "dE[ids] += dout: a repeated id keeps one of its positions' "
                "gradients, where the sum rule adds them all"),
           Swap("mean", "each row of dE divided by its id's number of occurrences: the mean "
                "of its positions' gradients, not their sum"),
           Swap("pad", "the padding row not zeroed: it is a constant and gets no gradient")),
    sums={"dE": ("dE",)},
)


# -- softmax -----------------------------------------------------------------------------
def _softmax(k):
    def softmax_backward(dout, cache):
        P = cache.P
        if k.swap("log-softmax"):
            return dout - P * dout.sum(axis=-1, keepdims=True)
        if k.swap("sum-dP"):
            row = dout.sum(axis=-1, keepdims=True)
        elif k.swap("axis-0"):
            row = (dout * P).sum(axis=0, keepdims=True)
        else:
            row = (dout * P).sum(axis=-1, keepdims=True)  # (..., 1)
        if k.swap("no-outer-P"):
            return dout - row
        return k("direct") * (P * dout) - k("row-sum") * (P * row)

    return {"softmax_backward": softmax_backward}


SOFTMAX = TermSet(
    _softmax,
    terms=(Term("row-sum", "the row-sum term P * sum(dP * P)"),
           Term("direct", "the direct term P * dP")),
    swaps=(Swap("sum-dP", "the row-sum term taken of dP alone: P * sum(dP), not "
                "P * sum(dP * P)"),
           Swap("no-outer-P", "the outer factor P left out: dx = dP - sum(dP * P), where "
                "dx = P * (dP - sum(dP * P))"),
           Swap("axis-0", "the row-sum term summed over the first axis, not over the row (the "
                "last axis)"),
           Swap("log-softmax", "log-softmax's backward, dP - P * sum(dP), written for "
                "softmax's, P * (dP - sum(dP * P))")),
    sums={"dx": ("row-sum", "direct")},
)


# -- layer norm --------------------------------------------------------------------------
def _layernorm(k):
    def layernorm_backward(dout, cache):
        xhat, rstd, gamma = cache.xhat, cache.rstd, cache.gamma
        lead = tuple(range(dout.ndim - 1))
        dxhat = dout if k.swap("dout-for-dxhat") else dout * gamma
        in_mean = dout if k.swap("mean-dout") else dxhat
        in_var = dout if k.swap("var-dout") else dxhat
        r = 1.0 if k.swap("no-rstd") else rstd
        dx = (k("direct") * r * dxhat - k("mean") * r * in_mean.mean(axis=-1, keepdims=True)
              - k("variance") * r * xhat * (in_var * xhat).mean(axis=-1, keepdims=True))
        dgamma = ((dxhat if k.swap("dgamma-dxhat") else dout) * xhat).sum(axis=lead)
        return dx, k("dgamma") * dgamma, k("dbeta") * dout.sum(axis=lead)

    return {"layernorm_backward": layernorm_backward}


LAYERNORM = TermSet(
    _layernorm,
    terms=(Term("variance", "the variance term rstd * xhat * mean(dxhat * xhat) (through var)",
                "steps 1-3", known=((lambda s: _size(s, "D") / (_size(s, "D") - 1),
                                     "D/(D-1): 1/(D-1), the unbiased variance, where the "
                                     "forward's variance is 1/D"),)),
           Term("mean", "the mean term rstd * mean(dxhat) (through mu)", "steps 4-5"),
           Term("direct", "the direct term rstd * dxhat", "step 1"),
           Term("dgamma", "dgamma = the sum of dout * xhat over the rows"),
           Term("dbeta", "dbeta = the sum of dout over the rows")),
    swaps=(Swap("dout-for-dxhat", "dout used for dxhat = dout * gamma: gamma left out of dx"),
           Swap("var-dout", "the variance term computed on dout where it has dxhat = dout * "
                "gamma: rstd * xhat * mean(dout * xhat)", "steps 1-3"),
           Swap("mean-dout", "the mean term computed on dout where it has dxhat = dout * "
                "gamma: rstd * mean(dout)", "steps 4-5"),
           Swap("no-rstd", "dx not multiplied by rstd = 1/sqrt(var + eps)"),
           Swap("dgamma-dxhat", "dgamma from dxhat = dout * gamma where it is sum(dout * xhat): "
                "a factor gamma per column too many")),
    sums={"dx": ("variance", "mean", "direct"), "dgamma": ("dgamma",), "dbeta": ("dbeta",)},
)


# -- dropout -----------------------------------------------------------------------------
def _dropout(k):
    def dropout_backward(dout, cache):
        if cache.mask is None:
            return xp.zeros_like(dout) if k.swap("off-zeros") else k("dx") * dout
        mask = xp.logical_not(cache.mask) if k.swap("inverted") else cache.mask
        return k("dx") * (dout * mask * cache.scale)

    return {"dropout_backward": dropout_backward}


DROPOUT = TermSet(
    _dropout,
    terms=(Term("dx", "dx = dout * mask / (1-p)"),),
    swaps=(Swap("off-zeros", "with dropout off (no mask) zeros instead of dout: off, dropout "
                "is the identity"),
           Swap("inverted", "the mask inverted: the dropped entries get the gradient")),
    sums={"dx": ("dx",)},
)


# -- cross-entropy -----------------------------------------------------------------------
def _cross_entropy(k):
    def cross_entropy_backward(dout, cache):
        V = cache.V
        P = cache.P.reshape(-1, V)  # (N, V)
        tgt = cache.target.reshape(-1)
        keep = xp.ones_like(tgt, dtype=bool) if k.swap("no-keep") else cache.keep.reshape(-1)
        eps = 0.0 if k.swap("one-hot") else cache.eps
        off = (eps / V if k.swap("eps-V") else eps / (V - 1)) if eps else 0.0
        q = xp.full_like(P, off)
        target = off + 1.0 - eps if k.swap("off-on-target") else 1.0 - eps
        q[xp.arange(tgt.shape[0]), tgt] = target
        n = tgt.shape[0] if k.swap("all-rows") else max(int(cache.n_tokens), 1)
        g = 1.0 if k.swap("no-dout") else dout
        r = (keep * g / n).astype(P.dtype)[:, None]  # (N, 1)
        d = k("P") * (P * r) - k("q") * (q * r)
        return d.reshape(cache.P.shape)

    return {"cross_entropy_backward": cross_entropy_backward}


CROSS_ENTROPY = TermSet(
    _cross_entropy,
    terms=(Term("q", "the smoothed target's term -q * keep * dout / n_tokens (q_y = 1 - eps, "
                "eps/(V-1) elsewhere)"),
           Term("P", "the softmax's term P * keep * dout / n_tokens")),
    swaps=(Swap("one-hot", "label smoothing left out: q is the one-hot target, where q_y = "
                "1 - eps and every other entry eps/(V-1)"),
           Swap("eps-V", "q's off-target weight eps/V, where it is eps/(V-1) (q sums to 1)"),
           Swap("off-on-target", "the target's weight 1 - eps + eps/(V-1): the off-target "
                "weight eps/(V-1) left on the target too (q_y is 1 - eps)"),
           Swap("no-keep", "the padding rows kept (keep left out): padding targets get "
                "gradient"),
           Swap("all-rows", "divided by every row, padding included, instead of n_tokens (the "
                "targets that count)"),
           Swap("no-dout", "dout (the incoming gradient of the loss) left out")),
    sums={"dlogits": ("q", "P")},
)

__all__ = ["CROSS_ENTROPY", "DROPOUT", "EMBEDDING", "GELU", "LAYERNORM", "LINEAR", "RELU",
           "SOFTMAX"]
