"""CUDA C sources of the kernel seam's GPU kernels, as text (nothing here needs CuPy):
scratchformer/kernels/cupy_kernels.py compiles and launches them, and CI compiles each
one with NVRTC for sm_80 and sm_90 on a machine without a GPU.

``DROPOUT`` draws an inverted-dropout mask in one launch with the counter-based
generator of scratchformer/device/counter.py (draw ``j`` of key ``k`` is
``mix(k + (j + 1) G)``), so it keeps what ``dropout_forward`` keeps with that generator
on NumPy or CuPy, bit for bit: ``u = top bits of the draw * 2^-bits``, kept when
``u >= p``, ``out = (x * keep) * scale``. Its NumPy mirror is the counter-based
generator itself (the implementation ``counter`` of the dropout table runs the reference
op with it; tests/kernels compare the two).
"""

from __future__ import annotations

#: the SplitMix64 finaliser, as scratchformer/device/counter.py writes it
_MIX = r"""
__device__ __forceinline__ unsigned long long sf_mix(unsigned long long z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
"""

#: x (n,) -> out (n,), keep (n,) bool; draws counter + 1 .. counter + n of ``key``
DROPOUT = (
    _MIX
    + r"""
template <typename T, int BITS>
__device__ void sf_dropout(const T* x, T* out, bool* keep, unsigned long long n,
                           unsigned long long key, unsigned long long counter, T p, T scale) {
    const T unit = (T)1 / (T)(1ULL << BITS);
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
         i < n; i += (unsigned long long)gridDim.x * blockDim.x) {
        unsigned long long z = sf_mix(key + (counter + i + 1ULL) * 0x9E3779B97F4A7C15ULL);
        T u = (T)(z >> (64 - BITS)) * unit;
        bool k = u >= p;
        keep[i] = k;
        out[i] = (x[i] * (T)k) * scale;
    }
}

extern "C" __global__ void sf_dropout_f32(const float* x, float* out, bool* keep,
                                          unsigned long long n, unsigned long long key,
                                          unsigned long long counter, float p, float scale) {
    sf_dropout<float, 24>(x, out, keep, n, key, counter, p, scale);
}

extern "C" __global__ void sf_dropout_f64(const double* x, double* out, bool* keep,
                                          unsigned long long n, unsigned long long key,
                                          unsigned long long counter, double p, double scale) {
    sf_dropout<double, 53>(x, out, keep, n, key, counter, p, scale);
}
"""
)

#: name -> (source, the kernels it defines)
SOURCES = {"dropout": (DROPOUT, ("sf_dropout_f32", "sf_dropout_f64"))}

__all__ = ["DROPOUT", "SOURCES"]
