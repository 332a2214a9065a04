# ruff: noqa
"""Exercise ffn: the backward pass of the position-wise feed-forward network. Write ``ffn_backward`` below.

Section 3.3: the same two-layer network at every position, with an activation (the
paper's ReLU, or GELU) and, optionally, dropout on the hidden layer:

    u = x W_1 + b_1      a = act(u)      a' = dropout(a)      out = a' W_2 + b_2

    scratchformer exercise check ffn      grade it
    scratchformer exercise hint ffn       the next hint
    scratchformer exercise solution ffn   the engine's code, derivation

The derivation: docs/derivations.md#add--norm-post-ln-and-pre-ln (on the docs site: derivations.html#add--norm-post-ln-and-pre-ln).
What you write becomes PositionwiseFeedForward.backward while it is checked or trains: ``self`` is
the module, with its parameters in self.params and their gradients in
self.grads (ADD into them: +=), its sub-modules as attributes. The forward is
shown as the engine has it; the checker runs the engine's forward and compares
every input and parameter gradient with float64 central differences on these
inputs:
    ReLU, dropout 0.25 on the hidden layer: D 6, F 10
    GELU, no dropout
"""

from __future__ import annotations

from scratchformer.engine.nn.layers import FeedForwardCache
from scratchformer.engine.ops.linear import linear
from scratchformer.engine.nn.layers import dropout

EXERCISE = "ffn"


# -- given: the forward pass, as in the engine (for reading; not run from here) ------------
def ffn_forward(self, x, rng=None):
    """x (B, T, D)  ->  (B, T, D)."""
    p = self.params
    u, c1 = linear.forward(x, p["W_1"], p["b_1"])  # (B, T, F)
    a, c_act = self.activation.forward(u, donate=True)  # u is ours alone
    a, c_drop = self.dropout.forward(a, rng)
    out, c2 = linear.forward(a, p["W_2"], p["b_2"])  # (B, T, D)
    return out, FeedForwardCache(c1, c_act, c_drop, c2)


# -- yours: the backward pass --------------------------------------------------------------
def ffn_backward(self, dout, cache):
    """dout (B, T, D): the gradient of the loss with respect to the output.

    cache (a FeedForwardCache):
        cache.lin1  x (B, T, D) @ W_1 + b_1 -> u (B, T, F)
        cache.act   the activation's cache: for self.activation.backward(da, cache.act)
        cache.drop  the hidden layer's dropout: for self.dropout.backward(da, cache.drop)
        cache.lin2  a' (B, T, F) @ W_2 + b_2 -> out (B, T, D)

    Use linear.backward(dY, a LinearCache) -> (dX, dW, db). The activation's
    backward may work in the buffer of the gradient you give it.
    Add into self.grads["W_1"], ["b_1"], ["W_2"], ["b_2"] (+=) and return dx (B, T, D).
    """
    da, dW_2, db_2 = linear.backward(dout, cache.lin2)
    da = self.dropout.backward(da, cache.drop)
    du = self.activation.backward(da, cache.act)
    dx, dW_1, db_1 = linear.backward(du, cache.lin1)
    self.grads["W_1"] += dW_1
    self.grads["b_1"] += db_1
    self.grads["W_2"] = dW_2
    self.grads["b_2"] += db_2
    return dx
