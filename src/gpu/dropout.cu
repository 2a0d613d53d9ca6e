// Inverted dropout with a counter-based mask: element i is dropped when the top 24 bits of
// splitmix64(seed + (i + 1) * golden) as a fraction in [0, 1) are below p, else scaled. The
// mask is a function of (seed, i), so no mask tensor exists: backward recomputes it. The CPU
// computes the same mask (src/model/dropout.rs).
#include <cuda_bf16.h>

__device__ __forceinline__ bool xsent_keep(unsigned long long seed, unsigned long long i, float p) {
    unsigned long long z = seed + (i + 1ULL) * 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z = z ^ (z >> 31);
    float u = (float)(z >> 40) * (1.0f / 16777216.0f);
    return u >= p;
}

extern "C" __global__ void xsent_dropout_f32(
    const float* x, float* out, unsigned long long n, unsigned long long seed, float p, float scale) {
    unsigned long long stride = (unsigned long long)blockDim.x * gridDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        out[i] = xsent_keep(seed, i, p) ? x[i] * scale : 0.0f;
    }
}

// bf16 training: the value widened, scaled in f32 and rounded once (the f32 kernel's bits on the
// widened values, rounded).
extern "C" __global__ void xsent_dropout_bf16(
    const __nv_bfloat16* x, __nv_bfloat16* out, unsigned long long n, unsigned long long seed, float p, float scale) {
    unsigned long long stride = (unsigned long long)blockDim.x * gridDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        out[i] = __float2bfloat16_rn(xsent_keep(seed, i, p) ? __bfloat162float(x[i]) * scale : 0.0f);
    }
}
