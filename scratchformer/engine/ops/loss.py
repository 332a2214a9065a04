"""Label-smoothed cross-entropy that ignores padding, with fairseq's formula.

For one non-pad target token with log-probabilities ``lp`` (V,) and target ``y``:

    loss = (1 - eps - eps/(V-1)) * (-lp[y]) + eps/(V-1) * (-sum_k lp[k])

which is the cross-entropy against ``q``: ``q[y] = 1 - eps``, ``q[k] = eps/(V-1)`` for
``k != y``. We report the mean over non-pad target tokens; eps = 0 is plain NLL.
(Older fairseq smoothed with eps/V; tensor2tensor subtracts q's entropy when reporting.)
A ``pad_id`` of V or more is padding that is no token of the vocabulary (GPT-2 has none):
its rows are dropped as every pad row is, and their target is read as 0 where an index
into the scores is needed (``index_targets``).

The reference pairs first: the NLL of log-probabilities, and the training loss of every
model, ``cross_entropy`` (log-softmax fused with that NLL). What runs by default for the
training loss is its in-place form below: the same steps with the probabilities in the
logits' buffer (the caller gives the logits up) and dlogits written over them, no
second (N, V) array in either pass; its cache serves one backward. The losses'
accessors ``n_tokens`` and ``nll_sum`` (0-d, left on the device) serve the logs. float16
activations take the emulated float16 forms (ops/float16.py), whose loss stays float32.

Dimension key: ``N`` any leading dims (B, T), ``V`` vocabulary.
Derivation: docs/derivations.md#label-smoothed-cross-entropy.
"""

from __future__ import annotations

from typing import NamedTuple

from scratchformer.engine import backend
from scratchformer.engine.backend import np, xp
from scratchformer.engine.dispatch import Op
from scratchformer.engine.ops import float16
from scratchformer.engine.ops.cases import Case, randn, targets


class LossCache(NamedTuple):
    target: object  # (N...) int target ids (0 at padding that is no token: index_targets)
    keep: object  # (N...) bool, target != pad
    eps: float  # label smoothing
    # The two sums stay arrays of the backend (0-d): reading them on the host would stall
    # a GPU at every step; a caller reads them when it reports them.
    n_tokens: object  # 0-d int: the number of non-pad targets, the normaliser
    nll_sum: object  # 0-d float: the sum of -lp[y] over non-pad targets (for perplexity)
    V: int  # vocabulary size, the last axis of the scores
    dtype: object  # dtype of the scores
    P: object  # (N..., V) softmax probabilities (fused form only, else None)


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


def row_factors(cache: LossCache, dout):
    """``r = keep * dout / n_tokens`` per row, (N, 1) in the scores' dtype: the factor
    every entry of a row's gradient carries."""
    r = cache.keep.reshape(-1, 1) * (dout / _at_least_1(cache.n_tokens, xp.float64))
    return r.astype(cache.dtype)  # (N, 1)


def subtract_q(d, r, cache: LossCache) -> None:
    """``d -= q * r`` in place, d (N, V): ``off * r`` from every entry, then ``on * r``
    more from each row's target entry."""
    off, on = smoothing_weights(cache.V, cache.eps)
    if cache.eps:
        d -= off * r
    rows = xp.arange(d.shape[0])
    d[rows, cache.target.reshape(-1)] -= on * r[:, 0]


def label_smoothed_nll_forward(lprobs, target, eps: float = 0.0, pad_id: int | None = None):
    """lprobs (N..., V) log-probabilities, target (N...) int  ->  loss (scalar), cache.

    ``loss = sum over non-pad tokens of the formula above / n_tokens``.
    """
    check_scores(lprobs, target)
    off, on = smoothing_weights(lprobs.shape[-1], eps)
    keep = xp.ones(target.shape, dtype=bool) if pad_id is None else target != pad_id
    n_tokens = keep.sum()  # 0-d
    target = index_targets(target, pad_id, lprobs.shape[-1])
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


def label_smoothed_nll_backward(dout, cache: LossCache):
    """``dlprobs = -q * keep * dout / n_tokens`` (zero rows for padding)."""
    d = xp.zeros((cache.keep.size, cache.V), dtype=cache.dtype)  # (N, V)
    subtract_q(d, row_factors(cache, dout), cache)
    return d.reshape(cache.target.shape + (cache.V,))


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


def cross_entropy_backward(dout, cache: LossCache):
    """``dlogits = (softmax(logits) - q) * keep * dout / n_tokens``."""
    r = row_factors(cache, dout)  # (N, 1)
    d = cache.P.reshape(-1, cache.V) * r  # (N, V)
    subtract_q(d, r, cache)
    return d.reshape(cache.P.shape)


# -- the training loss in place ---------------------------------------------------------------
class InplaceLossCache(NamedTuple):
    loss: LossCache  # its P is the logits' buffer
    spent: list  # [True] once the backward has written dlogits over P


def cross_entropy_inplace_forward(logits, target, eps: float = 0.0, pad_id=None):
    """``cross_entropy_forward``'s steps with the shifted logits, their exponentials and
    the probabilities each written over the logits' buffer (given up)."""
    check_scores(logits, target)
    V = logits.shape[-1]
    off, on = smoothing_weights(V, eps)
    x = logits.reshape(-1, V)  # (N, V), a view of the logits
    keep = xp.ones(target.shape, dtype=bool) if pad_id is None else target != pad_id
    target = index_targets(target, pad_id, V)
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
    keep_flat = keep.reshape(-1)
    n_tokens = keep_flat.sum()  # 0-d
    loss = (per_token * keep_flat).sum() / xp.maximum(n_tokens, 1).astype(logits.dtype)
    nll_sum = (nll * keep_flat).sum()
    P = e.reshape(logits.shape)  # the logits' buffer (a copy only if they were strided)
    cache = LossCache(target, keep, eps, n_tokens, nll_sum, V, logits.dtype, P)
    return loss.astype(logits.dtype), InplaceLossCache(cache, [False])


def cross_entropy_inplace_backward(dout, cache: InplaceLossCache):
    """dlogits written over the cached probabilities (the cache is then spent)."""
    if cache.spent[0]:
        raise ValueError("this cross_entropy cache was spent by a backward that wrote over it: "
                         "run the forward again")
    c = cache.loss
    r = row_factors(c, dout)  # (N, 1)
    d = c.P.reshape(-1, c.V)
    xp.multiply(d, r, out=d)
    subtract_q(d, r, c)
    cache.spent[0] = True
    return c.P


# -- the parity cases and the registration ---------------------------------------------------
def cross_entropy_cases(r, dt):
    logits = randn(r, (3, 4, 7), dt)
    return [
        Case("eps 0.1, pad 0", (logits, targets(r), 0.1, 0)),
        Case("eps 0", (logits, targets(r))),
    ]


def label_smoothed_nll_cases(r, dt):
    x = r.standard_normal((3, 4, 7))
    lp = x - np.log(np.exp(x).sum(-1, keepdims=True))
    return [Case("eps 0.1, pad 0", (backend.asarray(lp, dtype=dt), targets(r), 0.1, 0))]


#: the loss caches' accessors
READ = {"n_tokens": lambda c: c.n_tokens, "nll_sum": lambda c: c.nll_sum}

cross_entropy = Op("cross_entropy", cross_entropy_forward, cross_entropy_backward,
                   inputs=("logits", "target", "eps", "pad_id"), gradients=("dlogits",),
                   accessors=READ, donatable=("logits",), cases=cross_entropy_cases)
cross_entropy.register("inplace", cross_entropy_inplace_forward,
                       cross_entropy_inplace_backward, default=True, exact=True,
                       donates=("logits",),
                       accessors={k: (lambda c, f=f: f(c.loss)) for k, f in READ.items()},
                       note="P in the logits' buffer (given up), dlogits over P: one backward "
                       "per cache")
float16.register(cross_entropy, loss=True)

label_smoothed_nll = Op("label_smoothed_nll", label_smoothed_nll_forward,
                        label_smoothed_nll_backward, inputs=("lprobs", "target", "eps", "pad_id"),
                        gradients=("dlprobs",), accessors=READ, cases=label_smoothed_nll_cases)
float16.register(label_smoothed_nll, loss=True)
