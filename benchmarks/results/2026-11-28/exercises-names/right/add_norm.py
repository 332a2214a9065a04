# ruff: noqa
"""Exercise add_norm: the backward pass of Add & Norm, post-LN and pre-LN. Write ``add_norm_exit_backward`` and ``add_norm_enter_backward`` below.

The residual block around every sub-layer, split in two steps so any sub-layer fits
between them (s_in, c_in = enter(x); s = sublayer(s_in); y, c_out = exit(x, s)):

    post-LN (the paper):  y = LayerNorm(x + Dropout(Sublayer(x)))
    pre-LN:               y = x + Dropout(Sublayer(LayerNorm(x)))

It is checked around a linear sub-layer, y = exit(x, Linear(enter(x))), in both forms.

    scratchformer exercise check add_norm      grade it
    scratchformer exercise hint add_norm       the next hint
    scratchformer exercise solution add_norm   the engine's code, derivation

The derivation: docs/derivations.md#add--norm-post-ln-and-pre-ln (on the docs site: derivations.html#add--norm-post-ln-and-pre-ln).
What you write becomes AddNorm.exit_backward, AddNorm.enter_backward while it is checked or trains: ``self`` is
the module, with its parameters in self.params and their gradients in
self.grads (ADD into them: +=), its sub-modules as attributes. The forward is
shown as the engine has it; the checker runs the engine's forward and compares
every input and parameter gradient with float64 central differences on these
inputs:
    post-LN (the paper), residual dropout 0.2
    pre-LN, residual dropout 0.2
"""

from __future__ import annotations

from scratchformer.engine.nn.layers import AddNormCache
from scratchformer.exercises.layers import ExitCache

EXERCISE = "add_norm"


# -- given: the forward pass, as in the engine (for reading; not run from here) ------------
def add_norm_enter(self, x):
    if self.norm_first:
        s_in, c = self._norm(x)
        return s_in, AddNormCache(c, None)
    return x, AddNormCache(None, None)


def add_norm_exit(self, x, s, rng=None):
    """``LayerNorm(x + Dropout(s))`` (post-LN) or ``x + Dropout(s)`` (pre-LN), step by
    step (the engine runs these steps as one op, add_norm_exit)."""
    s_drop, c_drop = self.dropout.forward(s, rng)
    r = x + s_drop
    if self.norm_first:
        return r, ExitCache(None, c_drop)
    y, c_norm = self._norm(r)
    return y, ExitCache(c_norm, c_drop)


# -- yours: the backward pass --------------------------------------------------------------
def add_norm_exit_backward(self, dy, cache):
    """dy (B, T, D): the gradient of the loss with respect to exit's output y.

    cache (an ExitCache, of this exit):
        cache.norm     the LayerNorm's cache (post-LN), None for pre-LN
        cache.dropout  the residual dropout's cache

    self.norm_first is True for pre-LN. self._norm_backward(d, cache.norm) is the
    LayerNorm's backward (it adds dgamma and dbeta into self.grads); self.dropout.backward(d,
    cache.dropout) the dropout's.

    Return (dx, ds): the gradient of exit's x along the residual path, and of the
    sub-layer's output s.
    """
    if self.norm_first:
        dr = dy
    else:
        dr = self._norm_backward(dy, cache.norm)
    ds = self.dropout.backward(dr, cache.dropout)
    return dr, ds


def add_norm_enter_backward(self, ds_in, cache):
    """ds_in (B, T, D): the gradient of the loss with respect to enter's output (the
    sub-layer's input).

    cache (an AddNormCache, of this enter): cache.norm, the LayerNorm's cache (pre-LN),
    None for post-LN.

    Return dx: the gradient of x along the sub-layer's path (the caller adds the residual
    path's, from exit_backward).
    """
    if self.norm_first:
        return self._norm_backward(ds_in, cache.norm)
    return ds_in
