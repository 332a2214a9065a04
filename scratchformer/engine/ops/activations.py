"""Activations: ReLU (the paper's), GELU (tanh form, as BERT and GPT-2 use) and SiLU
(``x sigmoid(x)``, "swish", as Marian uses).

The reference pairs first; below them ReLU's in-place form, which runs by default where
the caller gives its input up (the feed-forward layer does): bitwise equal, no (..., F)
temporary. GELU and SiLU run their references. float16 activations take the emulated float16 forms
(ops/float16.py).

Derivation: docs/derivations.md#activations.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from scratchformer.engine.backend import xp
from scratchformer.engine.dispatch import Op
from scratchformer.engine.ops import float16
from scratchformer.engine.ops.cases import pointwise


class ReLUCache(NamedTuple):
    positive: object  # bool, x > 0


def relu_forward(x):
    """``out = max(x, 0)``."""
    positive = x > 0
    return x * positive, ReLUCache(positive)


def relu_backward(dout, cache: ReLUCache):
    """``dx = dout * [x > 0]`` (the subgradient 0 is taken at x == 0)."""
    return dout * cache.positive


_GELU_C = math.sqrt(2.0 / math.pi)
_GELU_A = 0.044715


class GELUCache(NamedTuple):
    x: object  # input
    tanh_u: object  # tanh(c (x + a x^3))


def gelu_forward(x):
    """``out = 0.5 x (1 + tanh(u))``, ``u = sqrt(2/pi) (x + 0.044715 x^3)``."""
    tanh_u = xp.tanh(_GELU_C * (x + _GELU_A * x * x * x))
    return 0.5 * x * (1.0 + tanh_u), GELUCache(x, tanh_u)


def gelu_backward(dout, cache: GELUCache):
    """``dx = dout * (0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2))``."""
    x, t = cache
    du_dx = _GELU_C * (1.0 + 3.0 * _GELU_A * x * x)
    return dout * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du_dx)


class SiLUCache(NamedTuple):
    x: object  # input
    s: object  # sigmoid(x)


def silu_forward(x):
    """``out = x sigmoid(x)``, ``sigmoid(x) = 1 / (1 + exp(-x))`` (SiLU, "swish")."""
    s = 0.5 * (1.0 + xp.tanh(0.5 * x))  # sigmoid(x), without exp overflowing for x << 0
    return x * s, SiLUCache(x, s)


def silu_backward(dout, cache: SiLUCache):
    """``dx = dout * s (1 + x (1 - s))``, ``s = sigmoid(x)``: the product rule with
    ``sigmoid' = s (1 - s)``."""
    x, s = cache
    return dout * (s * (1.0 + x * (1.0 - s)))


# -- ReLU in place ------------------------------------------------------------------------
def relu_inplace_forward(x):
    """``relu_forward`` in x's buffer (x is given up)."""
    positive = x > 0
    xp.multiply(x, positive, out=x)
    return x, ReLUCache(positive)


def relu_inplace_backward(dout, cache: ReLUCache):
    """``relu_backward`` in dout's buffer (dout is given up)."""
    xp.multiply(dout, cache.positive, out=dout)
    return dout


# -- the registration (the cases: one (2, 3, 5) input) -------------------------------------
relu = Op("relu", relu_forward, relu_backward, inputs=("x",), gradients=("dx",),
          donatable=("x",), cases=pointwise)
relu.register("inplace", relu_inplace_forward, relu_inplace_backward, default=True,
              exact=True, donates=("x", "dout"),
              note="in x's buffer, the backward in dout's (both given up)")
float16.register(relu)

gelu = Op("gelu", gelu_forward, gelu_backward, inputs=("x",), gradients=("dx",),
          cases=pointwise)
float16.register(gelu)

silu = Op("silu", silu_forward, silu_backward, inputs=("x",), gradients=("dx",),
          cases=pointwise)
float16.register(silu)

#: the activations by config name
ACTIVATIONS = {"relu": relu, "gelu": gelu, "silu": silu}
