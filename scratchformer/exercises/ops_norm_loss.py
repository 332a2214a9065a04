"""The op exercises of the layer's other parts: layer norm, dropout, and the
label-smoothed cross-entropy over log-softmax (after ops_basic.py, before attention).

Each mistake is a wrong backward that a learner writes often, built from the engine's
own pieces with the one thing wrong; its hint says where to look, not what to write.
"""

from __future__ import annotations

from scratchformer.engine import dispatch
from scratchformer.engine.backend import xp
from scratchformer.engine.ops import dropout, layernorm, loss
from scratchformer.engine.ops.cases import Case
from scratchformer.exercises import draw
from scratchformer.exercises.op import XP_IMPORT, OpExercise, mistake, randn, with_cases
from scratchformer.exercises.spec import always


# -- layer norm --------------------------------------------------------------------------
def _ln(dout, cache, *, mean=True, variance=True, gamma=True, unbiased=False):
    xhat, rstd, g = cache
    d = xhat.shape[-1]
    # the unbiased variance's 1/(D-1) in the variance term (the forward's is 1/D)
    per = d / (d - 1) if unbiased else 1.0
    dxhat = dout * g if gamma else dout * 1.0
    dx = dxhat
    if mean:
        dx = dx - dxhat.mean(axis=-1, keepdims=True)
    if variance:
        dx = dx - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True) * per
    dx = dx * rstd
    dgamma = (dout * xhat).reshape(-1, d).sum(axis=0)
    return dx, dgamma, dout.reshape(-1, d).sum(axis=0)


def _ln_no_variance(dout, cache):
    return _ln(dout, cache, variance=False)


def _ln_no_mean(dout, cache):
    return _ln(dout, cache, mean=False)


def _ln_constants(dout, cache):
    return _ln(dout, cache, mean=False, variance=False)


def _ln_no_gamma(dout, cache):
    return _ln(dout, cache, gamma=False)


def _ln_unbiased(dout, cache):
    return _ln(dout, cache, unbiased=True)


def _layernorm_cases(r, dtype):
    x = randn(r, (4, 6), dtype) * 2.0 + 3.0  # rows far from zero mean and unit variance
    return [Case("2-D, D 6, rows off-centre", (x, randn(r, (6,), dtype), randn(r, (6,), dtype)))]


LAYERNORM = OpExercise(
    name="layernorm",
    title="layer norm",
    summary="out = gamma (x - mu) / sqrt(var + eps) + beta over the last axis",
    section="layer-norm",
    table="layernorm",
    forward=layernorm.layernorm_forward,
    backward=layernorm.layernorm_backward,
    signature="layernorm_backward(dout, cache)",
    intro="""\
Layer normalisation over the last axis of every row: ``xhat = (x - mu) / sqrt(var + eps)``
with the row's mean ``mu`` and (biased) variance ``var``, then ``out = gamma xhat + beta``.""",
    docstring="""\
dout (..., D): the gradient of the loss with respect to ``out``.

cache (a LayerNormCache):
    cache.xhat   (..., D)  the normalised input, (x - mu) * rstd
    cache.rstd   (..., 1)  1 / sqrt(var + eps)
    cache.gamma  (D,)

Return ``(dx, dgamma, dbeta)``: dx (..., D) like x, dgamma (D,), dbeta (D,).
mu and var are computed from x: each depends on every entry of its row.""",
    imports=f"""\
{XP_IMPORT}
from scratchformer.engine import device  # device.rowdot(a, b) = sum(a * b, -1)
from scratchformer.engine.ops.layernorm import LayerNormCache""",
    cases=with_cases(dispatch.table("layernorm").cases, _layernorm_cases),
    drawn=draw.layernorm,
    gradients=("dx", "dgamma", "dbeta"),
    hints=(
        "gamma and beta are shared by every row: dgamma and dbeta are sums over the rows "
        "(of dout * xhat and of dout). For dx, start from dxhat = dout * gamma.",
        "x reaches xhat by three paths: directly, through mu, and through var. Walk the "
        "forward backwards for one row: xhat = (x - mu) * rstd, rstd = (var + eps)^-1/2, "
        "var = mean((x - mu)^2), mu = mean(x).",
        "The mean path gives -mean(dxhat); the variance path gives a term along xhat, "
        "-xhat * mean(dxhat * xhat). Both are multiplied by rstd.",
        "Check it: the entries of dx of one row sum to zero (shifting x by a constant "
        "changes nothing).",
    ),
    mistakes=(
        mistake(
            "no-variance",
            "layer norm without its variance term",
            "var depends on x too: the chain rule through rstd = (var + eps)^-1/2 adds "
            "a term along xhat (docs/derivations.md#layer-norm, steps 1-3)",
            _ln_no_variance,
            layernorm.layernorm_backward,
        ),
        mistake(
            "no-mean",
            "layer norm without its mean term",
            "mu depends on every x_i of the row: x - mu gives a term -mean(...) "
            "(docs/derivations.md#layer-norm, steps 4-5)",
            _ln_no_mean,
            layernorm.layernorm_backward,
        ),
        mistake(
            "mean-and-var-constant",
            "mu and var treated as constants: dx = dout * gamma * rstd",
            "mu and var are functions of x: both add terms to dx (docs/derivations.md#layer-norm)",
            _ln_constants,
            layernorm.layernorm_backward,
        ),
        mistake(
            "no-gamma",
            "dx without gamma: dxhat taken as dout",
            "out = gamma * xhat + beta: the gradient reaching xhat is dout * gamma "
            "(docs/derivations.md#layer-norm)",
            _ln_no_gamma,
            layernorm.layernorm_backward,
        ),
        mistake(
            "unbiased-variance",
            "the variance term with 1/(D-1), the unbiased variance, where the forward's is 1/D",
            "differentiate the variance the forward computed: the mean of the squares, a "
            "1/D (docs/derivations.md#layer-norm)",
            _ln_unbiased,
            layernorm.layernorm_backward,
        ),
    ),
    uses=always("every LayerNorm: each Add & Norm (and the final norms with pre-LN)"),
)


# -- dropout -----------------------------------------------------------------------------
def _dropout_not_applied(dout, cache):
    return dout * 1.0


def _dropout_no_scale(dout, cache):
    return dout * 1.0 if cache.mask is None else dout * cache.mask


DROPOUT = OpExercise(
    name="dropout",
    title="inverted dropout",
    summary="out = x * mask / (1 - p), the mask replayed from the cache",
    section="dropout",
    table="dropout",
    forward=dropout.dropout_forward,
    backward=dropout.dropout_backward,
    signature="dropout_backward(dout, cache)",
    intro="""\
Inverted dropout: each entry is zeroed with probability p and the survivors are scaled by
1 / (1 - p). With no generator (evaluation) it is the identity and keeps no mask.""",
    docstring="""\
dout (...): the gradient of the loss with respect to ``out``.

cache (a DropoutCache):
    cache.mask   bool like x, or None   True where x survived; None when dropout was off
    cache.scale  float                  1 / (1 - p), the survivors' factor

Return ``dx`` like x.""",
    imports=f"{XP_IMPORT}\nfrom scratchformer.engine.ops.dropout import DropoutCache",
    given=(dropout.dropout_mask,),
    cases=dispatch.table("dropout").cases,
    drawn=draw.dropout,
    gradients=("dx",),
    hints=(
        "out = x * m with m = mask / (1 - p) fixed by the forward: a constant factor per "
        "entry, so dx = dout * m.",
        "Use the mask in the cache: the forward drew it, and the backward must use the "
        "very same one. With cache.mask None, dropout was off.",
    ),
    mistakes=(
        mistake(
            "not-applied",
            "dropout not applied in backward: dx = dout",
            "the entries the forward dropped contributed nothing, so they get no gradient "
            "(docs/derivations.md#dropout)",
            _dropout_not_applied,
            dropout.dropout_backward,
        ),
        mistake(
            "no-scale",
            "the mask applied without the survivors' scale 1 / (1 - p)",
            "the forward multiplied the survivors by 1 / (1 - p): so does the backward "
            "(docs/derivations.md#dropout)",
            _dropout_no_scale,
            dropout.dropout_backward,
        ),
    ),
    uses=always("every residual and embedding dropout"),
)


# -- the loss ----------------------------------------------------------------------------
def _ce(dout, cache, *, smoothing="V-1", keep_pad=False, count_all=False, softmax=True):
    P, target, eps, V = cache.P, cache.target, cache.eps, cache.V
    onehot = xp.arange(V) == target[..., None]  # (N..., V)
    if smoothing == "V-1":
        off = eps / (V - 1) if eps else 0.0
        q = off + onehot * (1.0 - eps - off)
    elif smoothing == "V":
        q = eps / V + onehot * (1.0 - eps)
    elif smoothing == "V-2":
        off = eps / (V - 2) if eps else 0.0
        q = off + onehot * (1.0 - eps - off)
    else:
        q = onehot * 1.0
    keep = xp.ones(target.shape, dtype=bool) if keep_pad else cache.keep
    n = target.size if count_all else max(cache.n_tokens, 1)
    base = P if softmax else 0.0
    return ((base - q) * keep[..., None] * (dout / n)).astype(P.dtype)


CROSS_ENTROPY = OpExercise(
    name="cross_entropy",
    title="label-smoothed cross-entropy over log-softmax",
    summary="the loss from the logits: label smoothing eps/(V-1), padding ignored",
    section="label-smoothed-cross-entropy",
    table="cross_entropy",
    forward=loss.cross_entropy_forward,
    backward=loss.cross_entropy_backward,
    signature="cross_entropy_backward(dout, cache)",
    intro="""\
The training loss, from the logits: log-softmax, then the cross-entropy against the
smoothed target q (q[y] = 1 - eps, q[k] = eps / (V - 1) for the other k), summed over
the targets that are not padding and divided by their number.""",
    docstring="""\
dout (): the gradient of the loss with respect to the loss itself (1 in training), a
0-d array.

cache (a LossCache):
    cache.target    (N...) int        the target ids
    cache.keep      (N...) bool       target != pad_id: the targets that count
    cache.eps       float             label smoothing
    cache.n_tokens  int               the number of targets that count (keep.sum())
    cache.V         int               the vocabulary, the last axis of the logits
    cache.P         (N..., V)         softmax(logits)
    (cache.nll_sum, cache.dtype: not needed here)

Return ``dlogits`` (N..., V) like the logits.""",
    imports=f"{XP_IMPORT}\nfrom scratchformer.engine.ops.loss import LossCache",
    given=(loss.smoothing_weights, loss.check_scores),
    solution=(loss.row_factors, loss.subtract_q),
    cases=dispatch.table("cross_entropy").cases,
    drawn=draw.cross_entropy,
    gradients=("dlogits",),
    hints=(
        "Write the loss of one target as -sum_k q_k log P_k, with log P = log-softmax of "
        "the logits. Its gradient with respect to the log-probabilities is -q.",
        "Through the log-softmax: d logits_j = -q_j + P_j sum_k q_k, and q sums to 1.",
        "The reported loss is a mean over the targets that count: padding rows get zero "
        "gradient, and each of the others is divided by n_tokens (times dout).",
    ),
    mistakes=(
        mistake(
            "eps-over-V",
            "label smoothing with eps/V instead of eps/(V-1)",
            "q gives eps/(V-1) to each of the V-1 other tokens and 1 - eps to the target, "
            "as the forward's _smoothing_weights does "
            "(docs/derivations.md#label-smoothed-cross-entropy)",
            lambda dout, cache: _ce(dout, cache, smoothing="V"),
            loss.cross_entropy_backward,
        ),
        mistake(
            "eps-over-V-2",
            "label smoothing with eps/(V-2) instead of eps/(V-1)",
            "eps is shared by the tokens other than the target: there are V-1 of them, "
            "not V-2 (docs/derivations.md#label-smoothed-cross-entropy)",
            lambda dout, cache: _ce(dout, cache, smoothing="V-2"),
            loss.cross_entropy_backward,
        ),
        mistake(
            "padding-trained",
            "padding targets not ignored: they get gradient",
            "the loss sums over targets with keep True only; a padding row's gradient is "
            "zero (docs/derivations.md#label-smoothed-cross-entropy)",
            lambda dout, cache: _ce(dout, cache, keep_pad=True),
            loss.cross_entropy_backward,
        ),
        mistake(
            "divided-by-all-targets",
            "divided by every target (padding too) instead of n_tokens",
            "the loss is the mean over the targets that count: divide by cache.n_tokens "
            "(docs/derivations.md#label-smoothed-cross-entropy)",
            lambda dout, cache: _ce(dout, cache, count_all=True),
            loss.cross_entropy_backward,
        ),
        mistake(
            "no-smoothing",
            "the smoothing left out of the gradient: P - onehot(target)",
            "the loss trained is the smoothed one: its gradient is P - q with the "
            "smoothed q (docs/derivations.md#label-smoothed-cross-entropy)",
            lambda dout, cache: _ce(dout, cache, smoothing="none"),
            loss.cross_entropy_backward,
        ),
        mistake(
            "no-softmax",
            "the log-softmax left out: -q, the gradient of the log-probabilities",
            "the input is the logits, not the log-probabilities: the chain rule through "
            "the log-softmax adds P (docs/derivations.md#label-smoothed-cross-entropy)",
            lambda dout, cache: _ce(dout, cache, softmax=False),
            loss.cross_entropy_backward,
        ),
    ),
    uses=always("the training loss"),
)


__all__ = ["CROSS_ENTROPY", "DROPOUT", "LAYERNORM"]
