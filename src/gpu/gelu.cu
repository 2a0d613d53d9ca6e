// GELU (erf) for training, forward and backward, f32 and bf16: the CPU kernels' arithmetic
// (src/model/kernels/gelu.rs: `gelu`, `gelu_grad`) in f32; bf16 values are widened, computed in
// f32 and rounded to nearest even once.
#include <cuda_bf16.h>
#include "math.cuh"

__device__ __forceinline__ float xsent_gelu(float x) {
    return 0.5f * x * (1.0f + xsent_erf(x * 0.70710678118654752440f));
}

// g · (Φ(x) + x·φ(x))
__device__ __forceinline__ float xsent_gelu_grad(float x, float g) {
    float cdf = 0.5f * (1.0f + xsent_erf(x * 0.70710678118654752440f));
    return g * (cdf + x * 0.3989423f * xsent_exp(-0.5f * x * x));
}

extern "C" __global__ void xsent_gelu_f32(const float* x, float* y, unsigned long long n) {
    XSENT_GRID_STRIDE(i, n) { y[i] = xsent_gelu(x[i]); }
}

extern "C" __global__ void xsent_gelu_grad_f32(const float* x, const float* g, float* dx, unsigned long long n) {
    XSENT_GRID_STRIDE(i, n) { dx[i] = xsent_gelu_grad(x[i], g[i]); }
}

extern "C" __global__ void xsent_gelu_bf16(const __nv_bfloat16* x, __nv_bfloat16* y, unsigned long long n) {
    XSENT_GRID_STRIDE(i, n) { y[i] = __float2bfloat16_rn(xsent_gelu(__bfloat162float(x[i]))); }
}

extern "C" __global__ void xsent_gelu_grad_bf16(
    const __nv_bfloat16* x, const __nv_bfloat16* g, __nv_bfloat16* dx, unsigned long long n) {
    XSENT_GRID_STRIDE(i, n) {
        dx[i] = __float2bfloat16_rn(xsent_gelu_grad(__bfloat162float(x[i]), __bfloat162float(g[i])));
    }
}
