# ruff: noqa
"""Exercise gelu: the backward pass of GELU (tanh form). Write ``gelu_backward`` below.

GELU in the tanh form BERT and GPT-2 use, the other activation of the FFN:
``out = 0.5 x (1 + tanh(u))``, ``u = sqrt(2/pi) (x + 0.044715 x^3)``.

    scratchformer exercise check gelu      grade it
    scratchformer exercise hint gelu       the next hint
    scratchformer exercise solution gelu   the engine's code and derivation

The derivation: docs/derivations.md#activations (on the docs site: derivations.html#activations).
The forward is given as the engine has it (scratchformer/engine/ops/activations.py); the
checker runs the engine's forward and compares your backward with float64
central differences of sum(out * dout) on these inputs:
    (2, 3, 5)

``xp`` is NumPy (CuPy on a GPU): xp.zeros, xp.sum, xp.exp, ... as with np.
"""

from __future__ import annotations

import math

from scratchformer.engine.backend import xp
from scratchformer.engine.ops.activations import GELUCache

_GELU_C = math.sqrt(2.0 / math.pi)
_GELU_A = 0.044715

EXERCISE = "gelu"


# -- given: the forward pass, as in the engine ---------------------------------------------
def gelu_forward(x):
    """``out = 0.5 x (1 + tanh(u))``, ``u = sqrt(2/pi) (x + 0.044715 x^3)``."""
    tanh_u = xp.tanh(_GELU_C * (x + _GELU_A * x * x * x))
    return 0.5 * x * (1.0 + tanh_u), GELUCache(x, tanh_u)


# -- yours: the backward pass --------------------------------------------------------------
def gelu_backward(dout, cache):
    """dout (...): the gradient of the loss with respect to ``out``, any shape.

    cache (a GELUCache):
        cache.x       like x   the input
        cache.tanh_u  like x   tanh(u), u = sqrt(2/pi) (x + 0.044715 x^3)

    Return ``dx``, the shape of dout: the op works entry by entry, so dx[i] depends on
    dout[i] and on what the cache holds for entry i only.
    """
    x, t = cache.x, cache.tanh_u
    du_dx = 1.0 + 3.0 * _GELU_A * x * x
    return dout * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du_dx)
