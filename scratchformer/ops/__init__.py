"""Pure forward/backward pairs. ``<op>_forward(...) -> (out, cache)``;
``<op>_backward(dout, cache) -> gradients of the inputs, in input order``.
No op keeps state; every cache is a NamedTuple whose fields are commented with shapes.
"""

from scratchformer.ops.activations import (
    gelu_backward,
    gelu_forward,
    relu_backward,
    relu_forward,
)
from scratchformer.ops.attention import attention_backward, attention_forward, causal_mask
from scratchformer.ops.dropout import dropout_backward, dropout_forward
from scratchformer.ops.embedding import embedding_backward, embedding_forward
from scratchformer.ops.layernorm import layernorm_backward, layernorm_forward
from scratchformer.ops.linear import linear_backward, linear_forward
from scratchformer.ops.loss import (
    cross_entropy_backward,
    cross_entropy_forward,
    label_smoothed_nll_backward,
    label_smoothed_nll_forward,
)
from scratchformer.ops.positional import (
    positional_backward,
    positional_forward,
    sinusoidal_table,
)
from scratchformer.ops.softmax import (
    log_softmax_backward,
    log_softmax_forward,
    softmax_backward,
    softmax_forward,
)

__all__ = [
    "attention_backward",
    "attention_forward",
    "causal_mask",
    "cross_entropy_backward",
    "cross_entropy_forward",
    "dropout_backward",
    "dropout_forward",
    "embedding_backward",
    "embedding_forward",
    "gelu_backward",
    "gelu_forward",
    "label_smoothed_nll_backward",
    "label_smoothed_nll_forward",
    "layernorm_backward",
    "layernorm_forward",
    "linear_backward",
    "linear_forward",
    "log_softmax_backward",
    "log_softmax_forward",
    "positional_backward",
    "positional_forward",
    "relu_backward",
    "relu_forward",
    "sinusoidal_table",
    "softmax_backward",
    "softmax_forward",
]
