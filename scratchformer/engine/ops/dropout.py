"""Inverted dropout: zero each entry with probability ``p``, scale survivors by 1/(1-p).

The mask lives in the cache, never on a module, so one Dropout used by several
sub-layers (or called twice) still back-propagates through the right mask, and a
gradient check can replay it by reseeding the generator.

The reference pair, drawing from the generator it is given, is what runs by default (on
a GPU the generator is the counter-based one, device/counter.py). Below it: the NumPy
mirror of the CUDA kernel (``counter``) and the kernel itself (``cuda``, dropout.cu
beside this file: off until a GPU run proves it). float16 activations take the emulated
float16 form (ops/float16.py).

Dimension key: ``...`` any shape.
Derivation: docs/derivations.md#dropout.
"""

from __future__ import annotations

from typing import NamedTuple

from scratchformer.engine.backend import np, xp
from scratchformer.engine.device.counter import CounterGenerator
from scratchformer.engine.dispatch import Op
from scratchformer.engine.ops import float16
from scratchformer.engine.ops.cases import Case, Seed, randn


class DropoutCache(NamedTuple):
    mask: object  # bool, same shape as x: True where x survives; None when dropout was off
    scale: float = 1.0  # 1 / (1 - p), the survivors' factor


def dropout_forward(x, p: float, rng=None):
    """``out = x * m``, ``m = Bernoulli(1-p) / (1-p)``; identity when ``rng`` is None or p == 0.

    Passing a generator is what turns dropout on: evaluation simply passes none. The
    cache keeps the bool mask (1 byte per entry, not a float mask of 4 or 8).
    """
    if rng is None or p == 0.0:
        return x, DropoutCache(None)
    cache = dropout_mask(x.shape, p, rng, x.dtype)
    out = xp.multiply(x, cache.mask)
    out *= cache.scale
    return out, cache


def dropout_mask(shape, p: float, rng, dtype) -> DropoutCache:
    """The mask ``dropout_forward`` draws for an input of ``shape``: keep each entry with
    probability 1-p (one uniform draw of ``dtype`` per entry). Drawing it again from a
    generator in the same state gives the same mask (memory-efficient attention
    regenerates its masks in the backward pass this way instead of storing them).
    A float16 input draws float32 numbers: generators draw no float16."""
    keep = rng.random(shape, dtype=dtype if dtype != xp.float16 else xp.float32) >= p
    return DropoutCache(keep, 1.0 / (1.0 - p))


def dropout_backward(dout, cache: DropoutCache):
    """``dx = dout * m`` (the same mask as the forward)."""
    if cache.mask is None:
        return dout
    dx = xp.multiply(dout, cache.mask)
    dx *= cache.scale
    return dx


# -- the counter-based draws, and the CUDA kernel ---------------------------------------------
def dropout_counter_forward(x, p: float, rng=None):
    """``dropout_forward`` with the draws of the counter-based generator: a generator of
    another kind is replaced by a counter-based one seeded from it."""
    if rng is not None and not isinstance(rng, CounterGenerator):
        rng = CounterGenerator(int(rng.integers(0, 2**62)))
    return dropout_forward(x, p, rng)


def dropout_cuda_forward(x, p: float, rng=None):
    """``dropout_forward`` in one launch of dropout.cu: the mask drawn by the kernel from
    the counter-based generator ``rng`` (advanced by ``x.size`` draws, as the op would)."""
    from scratchformer.engine.device import cupy_kernels  # noqa: PLC0415  (CuPy: a GPU only)

    if rng is None or p == 0.0:
        return x, DropoutCache(None)
    if not isinstance(rng, CounterGenerator):
        raise TypeError("the dropout kernel draws from the counter-based generator only")
    x = xp.ascontiguousarray(x)
    out = xp.empty_like(x)
    keep = xp.empty(x.shape, dtype=bool)
    scale = 1.0 / (1.0 - p)
    name = "sf_dropout_f32" if x.dtype == np.float32 else "sf_dropout_f64"
    args = (x, out, keep, np.uint64(x.size), np.uint64(rng.key), np.uint64(rng.counter),
            x.dtype.type(p), x.dtype.type(scale))
    cupy_kernels.launch("dropout", name, x.size, args)
    rng.counter += x.size
    return out, DropoutCache(keep, scale)


# -- the parity cases and the registration ---------------------------------------------------
def cases(r, dt):
    x = randn(r, (2, 3, 5), dt)
    return [
        Case("p 0.3", (x, 0.3), {"rng": Seed(4, counter=True)}),
        Case("p 0.3, odd size", (x[..., :3], 0.3), {"rng": Seed(5, counter=True)}),
        Case("off", (x, 0.3)),
    ]


dropout = Op("dropout", dropout_forward, dropout_backward, inputs=("x", "p", "rng"),
             gradients=("dx",), cases=cases)
dropout.register("counter", dropout_counter_forward, dropout_backward, exact=True,
                 note="the NumPy mirror of the cuda kernel: the counter-based generator's masks")
dropout.register("cuda", dropout_cuda_forward, dropout_backward, backends=("cupy",), proven=False,
                 exact=True, note="one launch (dropout.cu), the counter-based masks")
float16.register(dropout)
