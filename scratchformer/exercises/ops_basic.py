"""The first op exercises: linear, ReLU, GELU, embedding and softmax with a mask (layer
norm, dropout and the loss follow in ops_norm_loss.py).

Each mistake is a wrong backward that a learner writes often, built from the engine's
own pieces with the one thing wrong; its hint says where to look, not what to write.
"""

from __future__ import annotations

import math

from scratchformer.engine import dispatch
from scratchformer.engine.backend import xp
from scratchformer.engine.ops import activations, embedding, linear, softmax
from scratchformer.exercises import draw
from scratchformer.exercises.op import XP_IMPORT, OpExercise, mistake
from scratchformer.exercises.spec import always


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
    imports=f"{XP_IMPORT}\nfrom scratchformer.engine.ops.linear import LinearCache",
    cases=dispatch.table("linear").cases,
    drawn=draw.linear,
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
    uses=always("every projection: attention's W_q W_k W_v W_o, the FFN, the output layer"),
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
    imports=f"{XP_IMPORT}\nfrom scratchformer.engine.ops.activations import ReLUCache",
    cases=dispatch.table("relu").cases,
    drawn=draw.pointwise,
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

{XP_IMPORT}
from scratchformer.engine.ops.activations import GELUCache

_GELU_C = math.sqrt(2.0 / math.pi)
_GELU_A = 0.044715""",
    cases=dispatch.table("gelu").cases,
    drawn=draw.pointwise,
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
{XP_IMPORT}
from scratchformer.engine import device  # device.segment_sum(idx, rows, K): equal indices add up
from scratchformer.engine.ops.embedding import EmbeddingCache""",
    cases=dispatch.table("embedding").cases,
    drawn=draw.embedding,
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
    uses=always("the shared token embedding of source and target (and the output layer)"),
)


# -- softmax -----------------------------------------------------------------------------
def _softmax_no_row_sum(dout, cache):
    return dout * cache.P


def _softmax_wrong_axis(dout, cache):
    P = cache.P
    return (dout - (dout * P).sum(axis=-2, keepdims=True)) * P


def _softmax_diagonal(dout, cache):
    return dout * cache.P * (1.0 - cache.P)


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
{XP_IMPORT}
from scratchformer.engine import device  # device.rowdot(a, b) = sum(a * b, -1)
from scratchformer.engine.ops.softmax import SoftmaxCache""",
    cases=dispatch.table("softmax").cases,
    drawn=draw.softmax,
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
            "diagonal-jacobian",
            "the Jacobian's diagonal only: dx = dout * P * (1 - P)",
            "P_j depends on x_i for every i of the row, not only i = j: the off-diagonal "
            "entries -P_i P_j add a row sum (docs/derivations.md#softmax)",
            _softmax_diagonal,
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
    uses=always("inside every attention"),
)


__all__ = ["EMBEDDING", "GELU", "LINEAR", "RELU", "SOFTMAX"]
