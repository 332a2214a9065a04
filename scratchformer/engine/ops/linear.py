"""Linear (affine) map: ``out = x W + b``.

The reference pair below is what runs on every backend (its products are BLAS calls
already); float16 activations take its emulated float16 form (ops/float16.py). Below it,
``few_rows``: the product of a few rows against a weight stored transposed (the tied
output projection ``h E^T``) taken the other way round, ``(E h^T)^T``, which decoding
puts in place for its steps (engine/decode/common.py).

Dimension key: ``N`` any leading dims, ``D_in`` input features, ``D_out`` output features.
Derivation: docs/derivations.md#linear.
"""

from __future__ import annotations

from typing import NamedTuple

from scratchformer.engine.backend import xp
from scratchformer.engine.dispatch import Op
from scratchformer.engine.ops import float16
from scratchformer.engine.ops.cases import Case, randn


class LinearCache(NamedTuple):
    x: object  # (..., D_in) the input, needed for dW
    W: object  # (D_in, D_out) the weight, needed for dx
    has_bias: bool


def linear_forward(x, W, b=None):
    """``out = x @ W + b``.

    x (..., D_in), W (D_in, D_out), b (D_out,) or None  ->  out (..., D_out).

    The leading dims are folded into one before the product: ``(N, D_in) @ (D_in, D_out)``
    is one matrix product, where NumPy's ``(B, T, D_in) @ (D_in, D_out)`` would be B small
    ones (about twice as slow at T = 32).
    """
    d_in, d_out = W.shape
    out = x.reshape(-1, d_in) @ W  # (N, D_out)
    if b is not None:
        out += b
    return out.reshape(*x.shape[:-1], d_out), LinearCache(x, W, b is not None)


def linear_backward(dout, cache: LinearCache):
    """``dx = dout W^T``, ``dW = x^T dout`` (summed over all leading dims), ``db = sum dout``.

    Returns ``(dx, dW, db)``; ``db`` is None when the forward had no bias.
    """
    x, W, has_bias = cache
    d_in, d_out = W.shape
    x2 = x.reshape(-1, d_in)  # (N, D_in)
    dout2 = dout.reshape(-1, d_out)  # (N, D_out): one product each, as in the forward
    dx = (dout2 @ W.T).reshape(x.shape)  # (..., D_in)
    dW = x2.T @ dout2  # (D_in, D_out)
    # column sums as a product with ones: NumPy's axis-0 reduction is several times slower
    db = xp.ones(dout2.shape[0], dtype=dout2.dtype) @ dout2 if has_bias else None
    return dx, dW, db


# -- few rows against a weight stored transposed: the product the other way round ----------
#: the rows (2 to this many) for which ``few_rows`` turns the product round
FEW_ROWS = 48


def linear_few_rows_forward(x, W, b=None):
    """``linear_forward`` for a decoding step's few rows: where ``W`` is the transpose of a
    stored matrix (``W = E^T``, the tied output projection (D, V)) and there are 2 to
    ``FEW_ROWS`` rows, ``x W = (E x^T)^T``, taken that way round and made contiguous:
    OpenBLAS runs a product of a few rows against a long matrix faster with the long side
    first (on one core, (256, 8000): 4 rows 3.6 against 1.4 ms, 32 rows 3.6 against 2.9
    ms; one row, or 64 and more, lose). The same sums in another order: equal to
    rounding, not bitwise; any other product is the reference's, bitwise."""
    d_in, d_out = W.shape
    x2 = x.reshape(-1, d_in)  # (N, D_in)
    if not (1 < x2.shape[0] <= FEW_ROWS and W.flags.f_contiguous and not W.flags.c_contiguous):
        return linear_forward(x, W, b)
    out = xp.ascontiguousarray((W.T @ x2.T).T)  # (N, D_out)
    if b is not None:
        out += b
    return out.reshape(*x.shape[:-1], d_out), LinearCache(x, W, b is not None)


# -- the parity cases and the registration ---------------------------------------------------
def cases(r, dt):
    x, W, b = randn(r, (2, 3, 5), dt), randn(r, (5, 4), dt), randn(r, (4,), dt)
    E = randn(r, (9, 5), dt)  # a stored (V, D) matrix: the product with E^T, as projected
    return [Case("with bias", (x, W, b)), Case("no bias", (x, W)),
            Case("a transposed weight (the tied projection)", (x, E.T))]


linear = Op("linear", linear_forward, linear_backward, inputs=("x", "W", "b"),
            gradients=("dx", "dW", "db"), cases=cases)
linear.register("few_rows", linear_few_rows_forward, linear_backward, backends=("numpy",),
                note="a few rows against a transposed weight, the product the other way round "
                "(decoding puts it in place)")
float16.register(linear, products=True)
