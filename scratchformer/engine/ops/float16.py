"""Mixed precision on NumPy: an op's float16 form, emulated as a GPU's tensor cores
compute it.

NumPy's float16 products have no BLAS (hundreds of times slower than float32), so on
NumPy an op whose activations are float16 runs its float32 implementation on them:

    1. the float16 inputs are cast to float32 (exactly: every float16 is a float32);
       for an op whose work is a product (``products=True``), its float32 parameters
       are first rounded to float16, as a GPU reads a product's operands in float16;
    2. the float32 implementation the table chooses runs: products accumulated in
       float32, as tensor cores accumulate, and the reductions of layer norm, softmax
       and the loss in float32 (the accumulation dtype);
    3. the outputs are rounded to float16, the activations' dtype (a loss stays float32:
       ``loss=True``).

Backward: the incoming gradient is cast to float32, the float32 backward runs, and each
gradient is rounded to the dtype of its input: float16 for an activation (where a
scaled gradient can overflow to inf: what dynamic loss scaling watches for), float32
for a parameter (its gradient adds into the float32 master buffer).

Each op's file registers this form for its table with ``register`` (an op whose first
floating input is a parameter, the embedding, has none: its float32 form serves).
"""

from __future__ import annotations

from typing import NamedTuple

from scratchformer.engine import backend
from scratchformer.engine.backend import np
from scratchformer.engine.dispatch import Op


class Float16Cache(NamedTuple):
    impl: object  # the float32 Implementation that ran
    value: object  # its cache
    dtypes: dict  # input name -> its dtype (the gradients are rounded to these)


def _is_float(a) -> bool:
    return backend.is_array(a) and a.dtype.kind == "f"


def _up(a, round_to=None):
    """``a`` as float32: float16 exactly; float32 rounded to ``round_to`` first."""
    if not _is_float(a) or a.dtype == np.float64:
        return a
    if a.dtype == np.float32 and round_to is not None:
        return a.astype(round_to).astype(np.float32)
    return a.astype(np.float32)


def _down(a, dtype):
    return a.astype(dtype) if _is_float(a) and a.dtype != dtype else a


def register(op: Op, products: bool = False, loss: bool = False) -> None:
    """Register ``op``'s float16 form (see the module doc) as its default for NumPy and
    float16: ``products`` for an op whose work is a product, ``loss`` for a loss."""
    round_to = np.float16 if products else None

    def forward(*args, **kwargs):
        dtypes = {n: a.dtype for n, a in zip(op.inputs, args) if _is_float(a)}
        dtypes |= {k: a.dtype for k, a in kwargs.items() if _is_float(a)}
        impl = op.chosen("float32", donate=True)  # its inputs are our fresh copies
        out, value = impl.forward(*(_up(a, round_to) for a in args),
                                  **{k: _up(v, round_to) for k, v in kwargs.items()})
        return (out if loss else _down(out, np.float16)), Float16Cache(impl, value, dtypes)

    def backward(dout, cache: Float16Cache, *more):
        grads = cache.impl.backward(_up(dout), cache.value, *(_up(m) for m in more))
        single = not isinstance(grads, tuple)
        grads = (grads,) if single else grads
        rounded = tuple(None if g is None else _down(g, cache.dtypes.get(name[1:], np.float32))
                        for name, g in zip(op.gradients, grads))
        return rounded[0] if single else rounded

    accessors = {a: (lambda c, a=a: c.impl.accessors[a](c.value)) for a in op.reference.accessors}
    how = "products' operands rounded to float16" if products else "outputs rounded"
    op.register("float16", forward, backward, backends=("numpy",), dtypes=("float16",),
                default=True, accessors=accessors,
                note=f"float16 on NumPy: float32 work on float16 values, {how}")


__all__ = ["Float16Cache", "register"]
