// The CPU kernels' erf and exp (src/model/kernels/gelu.rs `erf_f32`, softmax.rs `exp_f32`) for
// the GPU: the same operations in the same order, compiled with -fmad=false (build.rs), so each
// gives the CPU's bits.
#pragma once

#include <cuda_bf16.h>

// Element i of an f32 or bf16 array as f32 (bf16 widened, exactly), and f32 v stored as f32 or
// rounded to the nearest bf16 (ties to even): the kernels that take bf16 activations compute in
// f32 and round once, as the f32 kernel on the widened values would.
__device__ __forceinline__ float xsent_ld(const float* p, unsigned long long i) { return p[i]; }
__device__ __forceinline__ float xsent_ld(const __nv_bfloat16* p, unsigned long long i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void xsent_st(float* p, unsigned long long i, float v) { p[i] = v; }
__device__ __forceinline__ void xsent_st(__nv_bfloat16* p, unsigned long long i, float v) { p[i] = __float2bfloat16_rn(v); }

// Rust's `clamp`: a NaN stays NaN (fminf/fmaxf would drop it).
__device__ __forceinline__ float xsent_clamp(float x, float lo, float hi) {
    return x < lo ? lo : (x > hi ? hi : x);
}

// erf on [-4, 4] as a rational function (Eigen's and XLA's f32 approximation), ±1 outside.
__device__ __forceinline__ float xsent_erf(float x) {
    x = xsent_clamp(x, -4.0f, 4.0f);
    float x2 = x * x;
    float p = x2 * -2.7261423e-10f + 2.7706814e-8f;
    p = x2 * p + -2.101024e-6f;
    p = x2 * p + -5.6925064e-5f;
    p = x2 * p + -7.3499063e-4f;
    p = x2 * p + -2.9546e-3f;
    p = x2 * p + -1.6096033e-2f;
    p = p * x;
    float q = x2 * -1.4566072e-5f + -2.1337406e-4f;
    q = x2 * q + -1.682827e-3f;
    q = x2 * q + -7.373329e-3f;
    q = x2 * q + -1.426474e-2f;
    return p / q;
}

// v rounded half away from zero, by truncation (as the CPU code does it).
__device__ __forceinline__ float xsent_round_half_away(float v) {
    float t = truncf(v);
    return fabsf(v - t) >= 0.5f ? t + copysignf(1.0f, v) : t;
}

// e^x by x = n·ln2 + r and a degree-6 polynomial for e^r; 0 below -87.3.
__device__ __forceinline__ float xsent_exp(float x) {
    bool underflow = x < -87.3f;
    x = xsent_clamp(x, -87.3f, 88.7f);
    float n = xsent_round_half_away(x * 1.44269504088896340736f);
    float r = x - n * 0.69314575f - n * 1.4286068e-6f;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const float magic = 12582912.0f;
    int ni = __float_as_int(n + magic) - __float_as_int(magic);
    float scale = __int_as_float((int)((unsigned int)(ni + 127) << 23));
    return underflow ? 0.0f : p * scale;
}

// Sums over a warp (every lane gets the total); all 32 lanes must take part.
__device__ __forceinline__ double xsent_warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float xsent_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float xsent_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// The row a warp handles in the row kernels: blockDim is (32, rows per block).
__device__ __forceinline__ unsigned long long xsent_warp_row() {
    return (unsigned long long)blockIdx.x * blockDim.y + threadIdx.y;
}

// `for` each element index i < n of a grid-stride loop (the element-wise kernels: any n fits
// any grid).
#define XSENT_GRID_STRIDE(i, n)                                                          \
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; \
         i < (n); i += (unsigned long long)blockDim.x * gridDim.x)
