// Inverted dropout in one launch, the mask drawn from the counter-based generator:
// x (n,) -> out (n,), keep (n,) bool, from draws counter + 1 .. counter + n of key.
// It keeps what dropout_forward keeps with that generator on NumPy or CuPy, bit for
// bit: u = top BITS bits of the draw * 2^-BITS, kept when u >= p, out = (x * keep) * scale.
// Its NumPy mirror is the counter-based generator itself (the "counter" entry of the
// dropout table runs the reference op with it).
#include "counter.cuh"

template <typename T, int BITS>
__device__ void sf_dropout(const T* x, T* out, bool* keep, unsigned long long n,
                           unsigned long long key, unsigned long long counter, T p, T scale) {
    const T unit = (T)1 / (T)(1ULL << BITS);
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
         i < n; i += (unsigned long long)gridDim.x * blockDim.x) {
        T u = (T)(sf_draw(key, counter + i) >> (64 - BITS)) * unit;
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
