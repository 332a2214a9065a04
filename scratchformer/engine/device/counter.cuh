// The counter-based generator of scratchformer/device/counter.py, for the seam's CUDA
// kernels: draw j of key k is sf_mix(k + (j + 1) * G), G = 0x9E3779B97F4A7C15 (the
// golden-ratio step of SplitMix64), with SplitMix64's finaliser below. Any thread can
// draw any entry's number directly: no generator state, the same bits on every GPU.
#pragma once

__device__ __forceinline__ unsigned long long sf_mix(unsigned long long z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

__device__ __forceinline__ unsigned long long sf_draw(unsigned long long key,
                                                      unsigned long long j) {
    return sf_mix(key + (j + 1ULL) * 0x9E3779B97F4A7C15ULL);
}
