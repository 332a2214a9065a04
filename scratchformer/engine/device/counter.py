"""A counter-based random generator: the same draws on every device, from two integers.

Draw ``j`` of the stream with key ``k`` is ``mix(k + (j + 1) G)``, where ``mix`` is the
SplitMix64 finaliser (Steele, Lea and Flood, 2014; two xor-shift-multiply rounds and a
final xor-shift, a bijection of 64-bit words with full avalanche) and ``G`` the 64-bit
golden ratio: the generator's whole state is its key and the number of draws made. So

- the stream does not depend on the device (CuPy's default generator keeps a state per
  GPU thread, and so gives other numbers on another GPU model);
- making one costs nothing on the device: no state to allocate or initialise;
- a copy (``fork``) continues the same stream: a backward pass that regenerates a
  dropout mask replays the forward's draws exactly, with no mask stored and no
  generator made again;
- it is written with ``xp`` integer operations alone, so NumPy computes the very numbers
  CuPy does: parity with dropout on, and a NumPy mirror for a GPU kernel that draws the
  same masks.

On NumPy the default dropout generator stays NumPy's PCG64, which is several times
faster than these integer passes (see scratchformer/engine/device/__init__.py).

Dimension key: ``n`` draws.
"""

from __future__ import annotations

import math

from scratchformer.engine.backend import xp

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB


def mix_host(z: int) -> int:
    """The SplitMix64 finaliser of a 64-bit word, on the host (Python integers)."""
    z &= _MASK
    z = ((z ^ (z >> 30)) * _M1) & _MASK
    z = ((z ^ (z >> 27)) * _M2) & _MASK
    return z ^ (z >> 31)


def mix(z):
    """The same finaliser on an array of uint64 words, in place (wrapping products)."""
    z ^= z >> xp.uint64(30)
    z *= xp.uint64(_M1)
    z ^= z >> xp.uint64(27)
    z *= xp.uint64(_M2)
    z ^= z >> xp.uint64(31)
    return z


class CounterGenerator:
    """A generator of the active backend's arrays, state ``(key, counter)``.

    ``random(shape, dtype)`` and ``integers(low, high, size)`` as NumPy's Generator
    (the subset the package uses); a scalar ``integers`` draw (a seed) is computed on
    the host, so reading it needs no transfer from a device.
    """

    def __init__(self, seed: int = 0, *, key: int | None = None, counter: int = 0):
        self.key = mix_host(int(seed) * _GOLDEN + 1) if key is None else int(key)
        self.counter = int(counter)

    def __repr__(self) -> str:
        return f"CounterGenerator(key={self.key:#x}, counter={self.counter})"

    def fork(self) -> CounterGenerator:
        """An independent copy that continues this stream from here."""
        return CounterGenerator(key=self.key, counter=self.counter)

    def _bits(self, n: int):
        """The next ``n`` draws as uint64 words (n,)."""
        z = xp.arange(self.counter + 1, self.counter + 1 + n, dtype=xp.uint64)
        z *= xp.uint64(_GOLDEN)
        z += xp.uint64(self.key)
        self.counter += n
        return mix(z)

    def random(self, size=None, dtype=None):
        """Uniform floats in [0, 1): the top 24 bits of each draw for float32, 53 for
        float64, times 2^-24 (2^-53), so every value is exact and below 1."""
        dtype = xp.dtype(xp.float64 if dtype is None else dtype)
        shape = () if size is None else (size,) if isinstance(size, int) else tuple(size)
        bits = 24 if dtype == xp.float32 else 53
        z = self._bits(math.prod(shape))
        z >>= xp.uint64(64 - bits)
        return (z.astype(dtype) * dtype.type(2.0**-bits)).reshape(shape)

    def integers(self, low, high=None, size=None):
        """Integers in [low, high) (``integers(high)``: [0, high)). A scalar draw is a
        host integer; with ``size``, an int64 array of the backend."""
        low, high = (0, low) if high is None else (low, high)
        span = int(high) - int(low)
        if span < 1:
            raise ValueError(f"integers: empty range [{low}, {high})")
        if size is None:
            self.counter += 1
            return int(low) + mix_host(self.key + self.counter * _GOLDEN) % span
        shape = (size,) if isinstance(size, int) else tuple(size)
        z = self._bits(math.prod(shape)) % xp.uint64(span)
        return (z.astype(xp.int64) + int(low)).reshape(shape)


__all__ = ["CounterGenerator", "mix", "mix_host"]
