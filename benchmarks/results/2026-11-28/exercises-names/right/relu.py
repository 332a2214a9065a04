# ruff: noqa
"""Exercise relu: the backward pass of ReLU. Write ``relu_backward`` below.

The paper's activation, inside the feed-forward network: ``out = max(x, 0)``.

    scratchformer exercise check relu      grade it
    scratchformer exercise hint relu       the next hint
    scratchformer exercise solution relu   the engine's code and derivation

The derivation: docs/derivations.md#activations (on the docs site: derivations.html#activations).
The forward is given as the engine has it (scratchformer/engine/ops/activations.py); the
checker runs the engine's forward and compares your backward with float64
central differences of sum(out * dout) on these inputs:
    (2, 3, 5)

``xp`` is NumPy (CuPy on a GPU): xp.zeros, xp.sum, xp.exp, ... as with np.
"""

from __future__ import annotations

from scratchformer.engine.backend import xp
from scratchformer.engine.ops.activations import ReLUCache

EXERCISE = "relu"


# -- given: the forward pass, as in the engine ---------------------------------------------
def relu_forward(x):
    """``out = max(x, 0)``."""
    positive = x > 0
    return x * positive, ReLUCache(positive)


# -- yours: the backward pass --------------------------------------------------------------
def relu_backward(dout, cache):
    """dout (...): the gradient of the loss with respect to ``out``, any shape.

    cache (a ReLUCache):
        cache.positive  bool, the shape of x   True where x > 0

    Return ``dx``, the shape of dout: the op works entry by entry, so dx[i] depends on
    dout[i] and on what the cache holds for entry i only.
    """
    return dout * cache.positive
