"""dropout: inverted dropout, ``out = x * m / (1 - p)`` (ops/dropout.py), with the mask
drawn from the caller's generator.

    reference   ops/dropout.py, drawing from the generator it is given
    counter     the same with the counter-based generator's draws (a generator of
                another kind is replaced by one seeded from it): the NumPy mirror of
                the CUDA kernel, which draws the same masks
    cuda        dropout.cu: the mask drawn and applied in one launch; written without
                a GPU, so off until a GPU run proves it

Dimension key: ``...`` any shape.
"""

from __future__ import annotations

from scratchformer.backend import np, xp
from scratchformer.device.counter import CounterGenerator
from scratchformer.kernels.cases import Case, Seed, randn
from scratchformer.kernels.table import Implementation, Schema, new_table
from scratchformer.ops import dropout as _op

SCHEMA = Schema(inputs=("x", "p", "rng"), gradients=("dx",))


def cases(r, dt):
    x = randn(r, (2, 3, 5), dt)
    return [
        Case("p 0.3", (x, 0.3), {"rng": Seed(4, counter=True)}),
        Case("p 0.3, odd size", (x[..., :3], 0.3), {"rng": Seed(5, counter=True)}),
        Case("off", (x, 0.3)),
    ]


def counter_forward(x, p: float, rng=None):
    """``dropout_forward`` with the draws of the counter-based generator: a generator of
    another kind is replaced by a counter-based one seeded from it."""
    if rng is not None and not isinstance(rng, CounterGenerator):
        rng = CounterGenerator(int(rng.integers(0, 2**62)))
    return _op.dropout_forward(x, p, rng)


def cuda_forward(x, p: float, rng=None):
    """``dropout_forward`` in one launch of dropout.cu: the mask drawn by the kernel from
    the counter-based generator ``rng`` (advanced by ``x.size`` draws, as the op would)."""
    from scratchformer.kernels import cupy_kernels  # noqa: PLC0415  (CuPy: a GPU only)

    if rng is None or p == 0.0:
        return x, _op.DropoutCache(None)
    if not isinstance(rng, CounterGenerator):
        raise TypeError("the dropout kernel draws from the counter-based generator only")
    x = xp.ascontiguousarray(x)
    out = xp.empty_like(x)
    keep = xp.empty(x.shape, dtype=bool)
    scale = 1.0 / (1.0 - p)
    name = "sf_dropout_f32" if x.dtype == np.float32 else "sf_dropout_f64"
    args = (x, out, keep, np.uint64(x.size), np.uint64(rng.key), np.uint64(rng.counter),
            x.dtype.type(p), x.dtype.type(scale))  # fmt: skip
    cupy_kernels.launch("dropout", name, x.size, args)
    rng.counter += x.size
    return out, _op.DropoutCache(keep, scale)


TABLE = new_table("dropout", SCHEMA, _op.dropout_forward, _op.dropout_backward, cases)
TABLE.register(
    Implementation(
        "counter", counter_forward, _op.dropout_backward, exact=True,
        note="the NumPy mirror of the cuda kernel: the counter-based generator's masks",
    )
)  # fmt: skip
TABLE.register(
    Implementation(
        "cuda", cuda_forward, _op.dropout_backward, backends=("cupy",), proven=False,
        exact=True, note="one launch (dropout.cu), the counter-based masks",
    )
)  # fmt: skip
forward, backward = TABLE.forward, TABLE.backward
