"""The ops: one file per family, each read top to bottom as llm.c's ``dev/cuda/<op>.cu``.

    the reference pairs     pure ``<op>_forward(...) -> (out, cache)`` and
                            ``<op>_backward(dout, cache) -> gradients``, in input order;
                            each cache a NamedTuple whose fields are commented with shapes
    the faster forms        in place, fused, online, BLAS-shaped, a CUDA kernel (``.cu``
                            beside the file), each proven equal to the reference
                            (scratchformer/engine/parity.py and the op gradient tests)
    the registration        the parity cases and the op's table (scratchformer/engine/dispatch.py)

The modules call an op through its table, named after the op, which chooses the form
(``from scratchformer.engine.ops.layernorm import layernorm``; ``layernorm.forward(...)``).

    activations         relu, gelu, silu              linear          linear
    attention           attention_core,               local_attention the local blocks'
                        dot_product_logits                            re-indexings
    dropout             dropout                       loss            cross_entropy,
    embedding           embedding                                     label_smoothed_nll
    layernorm           layernorm, add_norm_exit      positional      positional
    relative_attention  shaw_logits, shaw_values,     softmax         softmax, log_softmax
                        skew_logits                   tanh            tanh

Beside them: ``cases.py`` (makers of the parity inputs) and ``float16.py`` (the emulated
float16 form every activation op registers). Adam's update is the optimizer's own
(scratchformer/engine/optim/adam.py). The reference functions are importable from here too
(``from scratchformer.engine.ops import layernorm_forward``).
"""

from scratchformer.engine.ops import (
    activations,
    attention,
    dropout,
    embedding,
    layernorm,
    linear,
    local_attention,
    loss,
    positional,
    relative_attention,
    softmax,
    tanh,
)
from scratchformer.engine.ops.activations import (
    gelu_backward,
    gelu_forward,
    relu_backward,
    relu_forward,
    silu_backward,
    silu_forward,
)
from scratchformer.engine.ops.attention import attention_backward, attention_forward, causal_mask
from scratchformer.engine.ops.dropout import dropout_backward, dropout_forward
from scratchformer.engine.ops.embedding import embedding_backward, embedding_forward
from scratchformer.engine.ops.layernorm import layernorm_backward, layernorm_forward
from scratchformer.engine.ops.linear import linear_backward, linear_forward
from scratchformer.engine.ops.loss import (
    cross_entropy_backward,
    cross_entropy_forward,
    label_smoothed_nll_backward,
    label_smoothed_nll_forward,
)
from scratchformer.engine.ops.positional import (
    positional_backward,
    positional_forward,
    sinusoidal_table,
)
from scratchformer.engine.ops.softmax import (
    log_softmax_backward,
    log_softmax_forward,
    softmax_backward,
    softmax_forward,
)

__all__ = ["attention_backward", "attention_forward", "causal_mask", "cross_entropy_backward",
           "cross_entropy_forward", "dropout_backward", "dropout_forward", "embedding_backward",
           "embedding_forward", "gelu_backward", "gelu_forward", "label_smoothed_nll_backward",
           "label_smoothed_nll_forward", "layernorm_backward", "layernorm_forward",
           "linear_backward", "linear_forward", "log_softmax_backward", "log_softmax_forward",
           "positional_backward", "positional_forward", "relu_backward", "relu_forward",
           "silu_backward", "silu_forward", "sinusoidal_table", "softmax_backward",
           "softmax_forward",
           "activations", "attention", "dropout", "embedding", "layernorm", "linear",
           "local_attention", "loss", "positional", "relative_attention", "softmax", "tanh"]
