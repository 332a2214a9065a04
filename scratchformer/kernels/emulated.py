"""Mixed precision on NumPy: every op's float16 form, emulated as a GPU's tensor cores
compute it.

NumPy's float16 products have no BLAS (hundreds of times slower than float32), so on
NumPy an op whose activations are float16 runs its float32 implementation on them:

    1. the float16 inputs are cast to float32 (exactly: every float16 is a float32);
       for an op whose work is a product (``MATMUL``), its float32 parameters are first
       rounded to float16, as a GPU reads a product's operands in float16;
    2. the float32 implementation the table chooses runs: products accumulated in
       float32, as tensor cores accumulate, and the reductions of layer norm, softmax
       and the loss in float32 (the accumulation dtype);
    3. the outputs are rounded to float16, the activations' dtype (a loss stays float32).

Backward: the incoming gradient is cast to float32, the float32 backward runs, and each
gradient is rounded to the dtype of its input: float16 for an activation (where a
scaled gradient can overflow to inf: what dynamic loss scaling watches for), float32
for a parameter (its gradient adds into the float32 master buffer).

``register`` puts this form in every table of an op that takes activations, for NumPy and
float16, as the default there (scratchformer/kernels/__init__.py calls it once).
"""

from __future__ import annotations

from typing import NamedTuple

from scratchformer import backend
from scratchformer.backend import np
from scratchformer.kernels.table import Implementation, OpTable

#: ops whose work is a product: their float32 parameters are rounded to float16 first
MATMUL = {"linear", "dot_product_logits", "attention_core", "shaw_logits", "shaw_values",
          "skew_logits"}  # fmt: skip
#: ops whose output is a loss: kept in float32
LOSSES = {"cross_entropy", "label_smoothed_nll"}
#: ops whose first floating input is a parameter, not an activation: never float16
PARAMETER_FIRST = {"embedding", "adam_update"}


class EmulatedCache(NamedTuple):
    impl: Implementation  # the float32 implementation that ran
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


def emulated(table: OpTable) -> Implementation:
    """The float16 form of ``table``'s op (see the module doc)."""
    names = table.schema.inputs
    round_to = np.float16 if table.name in MATMUL else None
    out_dtype = None if table.name in LOSSES else np.float16

    def inner():
        return table.chosen("float32", donate=True)  # its inputs are our fresh copies

    def forward(*args, **kwargs):
        dtypes = {n: a.dtype for n, a in zip(names, args) if _is_float(a)}
        dtypes |= {k: a.dtype for k, a in kwargs.items() if _is_float(a)}
        impl = inner()
        out, value = impl.forward(
            *(_up(a, round_to) for a in args), **{k: _up(v, round_to) for k, v in kwargs.items()}
        )
        out = out if out_dtype is None else _down(out, out_dtype)
        return out, EmulatedCache(impl, value, dtypes)

    def backward(dout, cache: EmulatedCache, *more):
        grads = cache.impl.backward(_up(dout), cache.value, *(_up(m) for m in more))
        single = not isinstance(grads, tuple)
        grads = (grads,) if single else grads
        rounded = tuple(
            _down(g, cache.dtypes.get(name[1:], np.float32)) if g is not None else None
            for name, g in zip(table.schema.gradients, grads)
        )
        return rounded[0] if single else rounded

    accessors = {a: (lambda c, a=a: c.impl.accessors[a](c.value)) for a in table.schema.accessors}
    default32 = table.default_for("numpy", "float32")
    return Implementation(
        "emulated", forward, backward, backends=("numpy",), dtypes=("float16",), default=True,
        accessors=accessors, consumes_cache=default32.consumes_cache,
        note="float16 on NumPy: float32 work on float16 values, "
        + ("products' operands rounded to float16" if round_to else "outputs rounded"),
    )  # fmt: skip


def register(tables: dict) -> None:
    """The emulated float16 form in every table of an op that takes activations."""
    for name, table in tables.items():
        if name not in PARAMETER_FIRST:
            table.register(emulated(table))


__all__ = ["LOSSES", "MATMUL", "EmulatedCache", "emulated", "register"]
