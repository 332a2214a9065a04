"""The op exercises before attention: linear, ReLU, GELU, embedding, softmax with a mask,
layer norm, dropout, and the label-smoothed cross-entropy over log-softmax.

Each mistake is a wrong backward that a learner writes often, built from the engine's
own pieces with the one thing wrong; its hint says where to look, not what to write.
"""

from __future__ import annotations

import math

from scratchformer import backend
from scratchformer.backend import xp
from scratchformer.exercises.op import OpExercise, mistake
from scratchformer.kernels.cases import CASES, Case
from scratchformer.ops import activations, dropout, embedding, layernorm, linear, loss, softmax

_XP = "from scratchformer.backend import xp"


def _with(kernel_cases, *extra):
    """The kernel seam's cases of an op, then ``extra(r, dtype) -> [Case]``."""

    def cases(r, dtype):
        found = list(kernel_cases(r, dtype))
        for more in extra:
            found += more(r, dtype)
        return found

    return cases


def _randn(r, shape, dtype):
    return backend.asarray(r.standard_normal(shape), dtype=dtype)


def _always(where: str):
    return lambda model: where


# -- linear ------------------------------------------------------------------------------
def _linear_db_mean(dout, cache):
    dx, dW, db = linear.linear_backward(dout, cache)
    return dx, dW, None if db is None else db / (dout.size // dout.shape[-1])


def _linear_db_one_example(dout, cache):
    dx, dW, db = linear.linear_backward(dout, cache)
    return dx, dW, None if db is None else dout[0].reshape(-1, dout.shape[-1]).sum(axis=0)


def _linear_dW_one_example(dout, cache):
    dx, dW, db = linear.linear_backward(dout, cache)
    x = cache.x
    return dx, x[0].reshape(-1, x.shape[-1]).T @ dout[0].reshape(-1, dout.shape[-1]), db


LINEAR = OpExercise(
    name="linear",
    title="a linear map",
    summary="out = x W + b: dx, dW, db over a batch of sequences",
    section="linear",
    table="linear",
    forward=linear.linear_forward,
    backward=linear.linear_backward,
    signature="linear_backward(dout, cache)",
    intro="""\
The affine map of every projection of the model: ``out = x W + b`` applied at every
position of every sequence of the batch.""",
    docstring="""\
dout (..., D_out): the gradient of the loss with respect to ``out``.

cache (a LinearCache), what the forward kept:
    cache.x         (..., D_in)     the input
    cache.W         (D_in, D_out)   the weight
    cache.has_bias  bool            False when the forward had no b

Return ``(dx, dW, db)``: dx (..., D_in) like x, dW (D_in, D_out) like W, db (D_out,)
like b, or None when ``cache.has_bias`` is False. ``...`` is any number of leading axes
(here (B, T)): W and b are used at every one of those positions.""",
    imports=f"{_XP}\nfrom scratchformer.ops.linear import LinearCache",
    cases=CASES["linear"],
    gradients=("dx", "dW", "db"),
    hints=(
        "Write out = x W + b for one row n: out[n, j] = sum_i x[n, i] W[i, j] + b[j]. "
        "Differentiate with respect to x[n, i], W[i, j] and b[j] in turn.",
        "W and b are used by every row (every example and position): their gradients "
        "are sums over all rows (the sum rule). Fold the leading axes into one first: "
        "x.reshape(-1, D_in).",
        "Check the shapes: dx like x, dW like W (D_in, D_out), db like b (D_out,). "
        "Which product of x and dout has the shape (D_in, D_out)?",
    ),
    mistakes=(
        mistake(
            "db-mean",
            "db averaged over the rows instead of summed",
            "b is added to every row: its gradient is the plain sum of dout over all "
            "leading axes, with no 1/N (docs/derivations.md#linear)",
            _linear_db_mean,
            linear.linear_backward,
        ),
        mistake(
            "db-one-example",
            "a bias gradient not summed over the batch (one example's positions only)",
            "b is shared by every example of the batch, not only by the positions of one: "
            "sum dout over the batch axis too (docs/derivations.md#linear)",
            _linear_db_one_example,
            linear.linear_backward,
        ),
        mistake(
            "dW-one-example",
            "a weight gradient not summed over the batch (one example only)",
            "W multiplies the rows of every example: dW sums x^T dout over all of them "
            "(docs/derivations.md#linear)",
            _linear_dW_one_example,
            linear.linear_backward,
        ),
    ),
    uses=_always("every projection: attention's W_q W_k W_v W_o, the FFN, the output layer"),
)


# -- ReLU and GELU -----------------------------------------------------------------------
def _relu_no_mask(dout, cache):
    return dout * 1.0


def _relu_inverted(dout, cache):
    return dout * xp.logical_not(cache.positive)


_GELU_C, _GELU_A = math.sqrt(2.0 / math.pi), 0.044715


def _gelu(dout, cache, *, product=True, tanh_square=True, cubic=True):
    x, t = cache
    du_dx = _GELU_C * (1.0 + 3.0 * _GELU_A * x * x) if cubic else _GELU_C + 0.0 * x
    dtanh = 1.0 - t * t if tanh_square else 1.0 - t
    local = 0.5 * (1.0 + t) + (0.5 * x * dtanh * du_dx if product else 0.0)
    return dout * local


def _gelu_no_product(dout, cache):
    return _gelu(dout, cache, product=False)


def _gelu_tanh(dout, cache):
    return _gelu(dout, cache, tanh_square=False)


def _gelu_no_cubic(dout, cache):
    return _gelu(dout, cache, cubic=False)


_POINTWISE_DOC = """\
dout (...): the gradient of the loss with respect to ``out``, any shape.

cache ({cache}):
{fields}

Return ``dx``, the shape of dout: the op works entry by entry, so dx[i] depends on
dout[i] and on what the cache holds for entry i only."""

RELU = OpExercise(
    name="relu",
    title="ReLU",
    summary="out = max(x, 0), entry by entry",
    section="activations",
    table="relu",
    forward=activations.relu_forward,
    backward=activations.relu_backward,
    signature="relu_backward(dout, cache)",
    intro="The paper's activation, inside the feed-forward network: ``out = max(x, 0)``.",
    docstring=_POINTWISE_DOC.format(
        cache="a ReLUCache",
        fields="    cache.positive  bool, the shape of x   True where x > 0",
    ),
    imports=f"{_XP}\nfrom scratchformer.ops.activations import ReLUCache",
    cases=CASES["relu"],
    gradients=("dx",),
    hints=(
        "ReLU is applied entry by entry, so its Jacobian is diagonal: dx = dout * (the "
        "derivative of max(x, 0) at each x).",
        "The derivative is 1 where x > 0 and 0 where x < 0 (at exactly 0 the engine "
        "takes 0). The cache tells you which entries are which.",
    ),
    mistakes=(
        mistake(
            "no-mask",
            "the gradient passed through where x <= 0 too",
            "max(x, 0) is flat where x < 0: no gradient flows there "
            "(docs/derivations.md#activations)",
            _relu_no_mask,
            activations.relu_backward,
        ),
        mistake(
            "inverted-mask",
            "the mask inverted: gradient where x <= 0, none where x > 0",
            "the slope of max(x, 0) is 1 on the positive side; cache.positive is True "
            "there (docs/derivations.md#activations)",
            _relu_inverted,
            activations.relu_backward,
        ),
    ),
    uses=lambda model: "the FFN's activation" if model.activation == "relu" else "",
)

GELU = OpExercise(
    name="gelu",
    title="GELU (tanh form)",
    summary="out = 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3)))",
    section="activations",
    table="gelu",
    forward=activations.gelu_forward,
    backward=activations.gelu_backward,
    signature="gelu_backward(dout, cache)",
    intro="""\
GELU in the tanh form BERT and GPT-2 use, the other activation of the FFN:
``out = 0.5 x (1 + tanh(u))``, ``u = sqrt(2/pi) (x + 0.044715 x^3)``.""",
    docstring=_POINTWISE_DOC.format(
        cache="a GELUCache",
        fields=(
            "    cache.x       like x   the input\n"
            "    cache.tanh_u  like x   tanh(u), u = sqrt(2/pi) (x + 0.044715 x^3)"
        ),
    ),
    imports=f"""\
import math

{_XP}
from scratchformer.ops.activations import GELUCache

_GELU_C = math.sqrt(2.0 / math.pi)
_GELU_A = 0.044715""",
    cases=CASES["gelu"],
    gradients=("dx",),
    hints=(
        "out = 0.5 x (1 + t) is a product of two functions of x: x and (1 + t), with "
        "t = tanh(u(x)). Use the product rule.",
        "d tanh(u)/du = 1 - tanh(u)^2, and the cache holds tanh(u).",
        "u = c (x + a x^3), so du/dx = c (1 + 3 a x^2), with c = sqrt(2/pi), a = 0.044715.",
    ),
    mistakes=(
        mistake(
            "no-product-rule",
            "only half of the product rule: dout * 0.5 (1 + tanh(u))",
            "x appears twice in 0.5 x (1 + tanh(u)): the product rule gives a second "
            "term through tanh(u) (docs/derivations.md#activations)",
            _gelu_no_product,
            activations.gelu_backward,
        ),
        mistake(
            "tanh-derivative",
            "the derivative of tanh taken as 1 - tanh(u) instead of 1 - tanh(u)^2",
            "d tanh(u)/du is 1 - tanh(u) squared (docs/derivations.md#activations)",
            _gelu_tanh,
            activations.gelu_backward,
        ),
        mistake(
            "no-cubic",
            "du/dx without the cubic term: sqrt(2/pi) instead of sqrt(2/pi)(1 + 3a x^2)",
            "u = c (x + a x^3) has the derivative c (1 + 3 a x^2) "
            "(docs/derivations.md#activations)",
            _gelu_no_cubic,
            activations.gelu_backward,
        ),
    ),
    uses=lambda model: "the FFN's activation" if model.activation == "gelu" else "",
)


# -- embedding ---------------------------------------------------------------------------
def _embedding_overwrite(dout, cache):
    ids, V, pad_id = cache
    d = dout.shape[-1]
    dE = xp.zeros((V, d), dtype=dout.dtype)
    dE[ids.reshape(-1)] += dout.reshape(-1, d)  # repeated ids: only one row lands
    if pad_id is not None:
        dE[pad_id] = 0
    return dE


def _embedding_pad(dout, cache):
    return embedding.embedding_backward(dout, cache._replace(pad_id=None))


def _embedding_constant_pad(ids, E, pad_id=None):
    """The lookup with the padding row held constant (zero, as in the model): the row
    is never trained, so its finite differences are not the gradient asked for."""
    if pad_id is not None:
        E = E.copy()
        E[pad_id] = 0.0
    return embedding.embedding_forward(ids, E, pad_id)


EMBEDDING = OpExercise(
    name="embedding",
    title="an embedding lookup",
    summary="out = E[ids]: padding, and an id used twice",
    section="embedding",
    table="embedding",
    forward=embedding.embedding_forward,
    backward=embedding.embedding_backward,
    signature="embedding_backward(dout, cache)",
    intro="""\
The token embedding: ``out[b, t] = E[ids[b, t]]``, a row of E per token. The padding id's
row is a constant (zero) that must receive no gradient.""",
    docstring="""\
dout (B, T, D): the gradient of the loss with respect to ``out``.

cache (an EmbeddingCache):
    cache.ids         (B, T) int   the token ids looked up
    cache.vocab_size  int          V, the rows of E
    cache.pad_id      int or None  the padding id, whose row gets no gradient

Return ``dE`` (V, D) like E. The same id may occur several times in ids.""",
    imports=f"""\
{_XP}
from scratchformer import device  # device.segment_sum(idx, rows, K): equal indices add up
from scratchformer.ops.embedding import EmbeddingCache""",
    cases=CASES["embedding"],
    graded_forward=_embedding_constant_pad,
    gradients=("dE",),
    hints=(
        "out[b, t] = E[ids[b, t]]: row v of E is used at every position where the id is "
        "v. By the sum rule dE[v] is the sum of dout over those positions.",
        "In NumPy, dE[ids] += dout does not add up repeated ids: each repeated index "
        "receives one of its rows. Accumulate them: np.add.at, or device.segment_sum.",
        "The padding row is never trained: its gradient is zero.",
    ),
    mistakes=(
        mistake(
            "repeated-ids-overwrite",
            "repeated ids overwrite each other: dE[ids] += dout keeps one row per id",
            "an id used at several positions gets the sum of all their gradients; fancy "
            "indexing with += does not add repeats (docs/derivations.md#embedding)",
            _embedding_overwrite,
            embedding.embedding_backward,
        ),
        mistake(
            "pad-row-trained",
            "the padding row receives gradient",
            "pad_id's row stays zero: its gradient must be zero (docs/derivations.md#embedding)",
            _embedding_pad,
            embedding.embedding_backward,
        ),
    ),
    uses=_always("the shared token embedding of source and target (and the output layer)"),
)


# -- softmax -----------------------------------------------------------------------------
def _softmax_no_row_sum(dout, cache):
    return dout * cache.P


def _softmax_wrong_axis(dout, cache):
    P = cache.P
    return (dout - (dout * P).sum(axis=-2, keepdims=True)) * P


def _softmax_per_batch(dout, cache):
    return softmax.softmax_backward(dout, cache) / dout.shape[0]


SOFTMAX = OpExercise(
    name="softmax",
    title="softmax with a mask",
    summary="P = softmax(x) over the unmasked entries; a fully masked row gives zeros",
    section="softmax",
    table="softmax",
    forward=softmax.softmax_forward,
    backward=softmax.softmax_backward,
    signature="softmax_backward(dout, cache)",
    intro="""\
The softmax over the last axis, restricted to the entries a mask allows (attention's
padding and causal masks). A row with nothing allowed gives zeros, never NaN.""",
    docstring="""\
dout (..., K): the gradient of the loss with respect to ``P``.

cache (a SoftmaxCache):
    cache.P  (..., K)  the output probabilities; masked entries are exactly 0

Return ``dx`` (..., K) like x. Every row is its own softmax: nothing mixes rows.""",
    imports=f"""\
{_XP}
from scratchformer import device  # device.rowdot(a, b) = sum(a * b, -1)
from scratchformer.ops.softmax import SoftmaxCache""",
    cases=CASES["softmax"],
    gradients=("dx",),
    hints=(
        "P_j = exp(x_j) / sum_k exp(x_k): every output of a row depends on every input "
        "of the row. Start from dP_j/dx_i = P_j (delta_ij - P_i).",
        "dx_i = sum_j dout_j P_j (delta_ij - P_i): split it into the diagonal term and a "
        "term with one number per row. No (K, K) Jacobian is needed.",
        "Masked entries have P = 0: see what your formula gives there without any special case.",
    ),
    mistakes=(
        mistake(
            "no-row-sum",
            "softmax backward without the row sum: dx = dout * P",
            "each P_j depends on every x_i of its row: the Jacobian has an off-diagonal "
            "part, a sum over the row (docs/derivations.md#softmax)",
            _softmax_no_row_sum,
            softmax.softmax_backward,
        ),
        mistake(
            "row-sum-wrong-axis",
            "the row sum taken over the wrong axis (-2, not the softmax's -1)",
            "the sum runs over the entries of one softmax, the last axis "
            "(docs/derivations.md#softmax)",
            _softmax_wrong_axis,
            softmax.softmax_backward,
        ),
        mistake(
            "divided-by-batch",
            "softmax backward divided by the batch size",
            "softmax is per row: nothing in its derivative averages over the batch; the "
            "only 1/n is the loss's (docs/derivations.md#softmax)",
            _softmax_per_batch,
            softmax.softmax_backward,
        ),
    ),
    uses=_always("inside every attention"),
)


# -- layer norm --------------------------------------------------------------------------
def _ln(dout, cache, *, mean=True, variance=True, gamma=True):
    xhat, rstd, g = cache
    d = xhat.shape[-1]
    dxhat = dout * g if gamma else dout * 1.0
    dx = dxhat
    if mean:
        dx = dx - dxhat.mean(axis=-1, keepdims=True)
    if variance:
        dx = dx - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True)
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


def _layernorm_cases(r, dtype):
    x = _randn(r, (4, 6), dtype) * 2.0 + 3.0  # rows far from zero mean and unit variance
    return [Case("2-D, D 6, rows off-centre", (x, _randn(r, (6,), dtype), _randn(r, (6,), dtype)))]


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
{_XP}
from scratchformer import device  # device.rowdot(a, b) = sum(a * b, -1)
from scratchformer.ops.layernorm import LayerNormCache""",
    cases=_with(CASES["layernorm"], _layernorm_cases),
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
    ),
    uses=_always("every LayerNorm: each Add & Norm (and the final norms with pre-LN)"),
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
    imports=f"{_XP}\nfrom scratchformer.ops.dropout import DropoutCache",
    given=(dropout.dropout_mask,),
    cases=CASES["dropout"],
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
    uses=_always("every residual and embedding dropout"),
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
    (cache.nll_sum, cache.dtype, cache.spent: not needed here)

Return ``dlogits`` (N..., V) like the logits.""",
    imports=f"{_XP}\nfrom scratchformer.ops.loss import LossCache",
    given=(loss._smoothing_weights, loss._check),
    solution=(loss._dscores_minus_q,),
    cases=CASES["cross_entropy"],
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
    uses=_always("the training loss"),
)

__all__ = [
    "CROSS_ENTROPY",
    "DROPOUT",
    "EMBEDDING",
    "GELU",
    "LAYERNORM",
    "LINEAR",
    "RELU",
    "SOFTMAX",
]
