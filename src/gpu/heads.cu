// Attention's head split and merge (src/model/kernels/heads.rs: `Heads`), f32 and bf16: a
// gather, one thread per output element (grid stride). Split writes [B, heads, L, d] from
// [B·L, heads·d], merge the inverse; the input is read through its strides in elements per
// sequence, head, token and element of a head (any layout: a column slice, a transposed view).
// With `scaled` each value is multiplied by `scale` as candle's CPU affine op computes
// `x · scale + 0` (the query's 1/√d before the split: the same bits as that op followed by the
// copy; `xsent_affine_st`). Unscaled values are copied as they are.
#include <cuda_bf16.h>
#include "math.cuh"

// The input's strides per sequence, head, token and element of a head.
struct XsentHeadsStrides {
    unsigned long long b, h, t, e;
};

// The index in the input of output element i: the output is [B, heads, L, d] (split) or
// [B, L, heads, d] (merge).
__device__ __forceinline__ unsigned long long xsent_heads_from(
    unsigned long long i, unsigned long long l, unsigned long long nh, unsigned long long d, unsigned int merge,
    XsentHeadsStrides s) {
    unsigned long long e = i % d, r = i / d, b, h, t;
    if (merge) {
        h = r % nh;
        t = (r / nh) % l;
        b = r / (nh * l);
    } else {
        t = r % l;
        h = (r / l) % nh;
        b = r / (l * nh);
    }
    return b * s.b + h * s.h + t * s.t + e * s.e;
}

// y[i] = x · scale + 0 as candle's affine op: in f32 one product; in bf16 the product rounded to
// bf16, then `+ 0` (which turns −0 into 0) and rounded again (exact), as half's and CUDA's bf16
// `*` and `+` each round. The product of two bf16 values is exact in f32, so rounding it once
// equals candle's bf16 multiply.
__device__ __forceinline__ void xsent_affine_st(float* y, unsigned long long i, float x, float scale) {
    y[i] = x * scale + 0.0f;
}
__device__ __forceinline__ void xsent_affine_st(__nv_bfloat16* y, unsigned long long i, float x, float scale) {
    y[i] = __float2bfloat16_rn(__bfloat162float(__float2bfloat16_rn(x * scale)) + 0.0f);
}

template <typename T>
__device__ __forceinline__ void xsent_heads(
    const T* x, T* y, unsigned long long n, unsigned long long l, unsigned long long nh, unsigned long long d,
    XsentHeadsStrides s, unsigned int merge, unsigned int scaled, float scale) {
    XSENT_GRID_STRIDE(i, n) {
        unsigned long long from = xsent_heads_from(i, l, nh, d, merge, s);
        if (scaled) {
            xsent_affine_st(y, i, xsent_ld(x, from), scale);
        } else {
            y[i] = x[from];
        }
    }
}

// x: the input from its layout's start; n = B·L·heads·d; sb, sh, st, se: the input's strides.
extern "C" __global__ void xsent_heads_f32(
    const float* x, float* y, unsigned long long n, unsigned long long l, unsigned long long nh, unsigned long long d,
    unsigned long long sb, unsigned long long sh, unsigned long long st, unsigned long long se, unsigned int merge,
    unsigned int scaled, float scale) {
    xsent_heads(x, y, n, l, nh, d, XsentHeadsStrides{sb, sh, st, se}, merge, scaled, scale);
}

extern "C" __global__ void xsent_heads_bf16(
    const __nv_bfloat16* x, __nv_bfloat16* y, unsigned long long n, unsigned long long l, unsigned long long nh,
    unsigned long long d, unsigned long long sb, unsigned long long sh, unsigned long long st, unsigned long long se,
    unsigned int merge, unsigned int scaled, float scale) {
    xsent_heads(x, y, n, l, nh, d, XsentHeadsStrides{sb, sh, st, se}, merge, scaled, scale);
}
