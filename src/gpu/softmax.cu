// Attention's masked softmax for training and its backward (src/model/kernels/softmax.rs:
// `MaskedSoftmax`, `SoftmaxGrad`, `MaskedSoftmaxGradBf16`), one warp per row of `lk` keys
// (blockDim (32, rows per block)); lane j takes keys j, j + 32, …. The scores are f32, or bf16 in
// bf16 training (widened; the probabilities rounded once); the bias is f32. The exp is the CPU's
// (math.cuh); a row's sums are the warp's tree of its lanes' sums, where the CPU sums in order
// (equal to rounding).
#include "math.cuh"

// A row's maximum of x + bias, over the warp.
template <typename T>
__device__ __forceinline__ float xsent_softmax_max(const T* xr, const float* br, unsigned int lk) {
    float m = -INFINITY;
    for (unsigned int i = threadIdx.x; i < lk; i += 32) m = fmaxf(m, xsent_ld(xr, i) + br[i]);
    return xsent_warp_max(m);
}

// A row's softmax statistics: its maximum m of x + bias and 1 / Σ e^(x + bias − m). Each key's
// probability is then `xsent_exp((x + bias) − m) * inv`, computed again where it is needed: the
// bits are the same each time.
template <typename T>
__device__ __forceinline__ void xsent_softmax_row(const T* xr, const float* br, unsigned int lk, float& m, float& inv) {
    m = xsent_softmax_max(xr, br, lk);
    float s = 0.0f;
    for (unsigned int i = threadIdx.x; i < lk; i += 32) s += xsent_exp((xsent_ld(xr, i) + br[i]) - m);
    inv = 1.0f / xsent_warp_sum(s);
}

// y = softmax(x + bias) per row; the bias of row r is row r / rows_per_bias of `bias` ([B, 1, 1, Lk]
// against scores [B, H, Lq, Lk]: rows_per_bias = H·Lq).
template <typename T>
__device__ __forceinline__ void xsent_masked_softmax(
    const T* x, const float* bias, T* y, unsigned long long rows, unsigned int lk, unsigned long long rows_per_bias) {
    unsigned long long r = xsent_warp_row();
    if (r >= rows) return;  // the whole warp: its lanes share r
    const T* xr = x + r * lk;
    const float* br = bias + (r / rows_per_bias) * lk;
    T* yr = y + r * lk;
    float m, inv;
    xsent_softmax_row(xr, br, lk, m, inv);
    for (unsigned int i = threadIdx.x; i < lk; i += 32) xsent_st(yr, i, xsent_exp((xsent_ld(xr, i) + br[i]) - m) * inv);
}

// f32: each exponential is taken once, kept in y and rescaled there (y can hold it; bf16 output
// cannot, so the bf16 kernel takes it again). The same bits as `xsent_masked_softmax`: the same
// sum in the same order, then the same product.
extern "C" __global__ void xsent_masked_softmax_f32(
    const float* x, const float* bias, float* y, unsigned long long rows, unsigned int lk,
    unsigned long long rows_per_bias) {
    unsigned long long r = xsent_warp_row();
    if (r >= rows) return;  // the whole warp: its lanes share r
    const float* xr = x + r * lk;
    const float* br = bias + (r / rows_per_bias) * lk;
    float* yr = y + r * lk;
    float m = xsent_softmax_max(xr, br, lk);
    float s = 0.0f;
    for (unsigned int i = threadIdx.x; i < lk; i += 32) {
        float e = xsent_exp((xr[i] + br[i]) - m);
        yr[i] = e;
        s += e;
    }
    float inv = 1.0f / xsent_warp_sum(s);
    for (unsigned int i = threadIdx.x; i < lk; i += 32) yr[i] = yr[i] * inv;
}

extern "C" __global__ void xsent_masked_softmax_bf16(
    const __nv_bfloat16* x, const float* bias, __nv_bfloat16* y, unsigned long long rows, unsigned int lk,
    unsigned long long rows_per_bias) {
    xsent_masked_softmax(x, bias, y, rows, lk, rows_per_bias);
}

// dx = y ⊙ (g − Σ g⊙y) per row of n, from the output y.
extern "C" __global__ void xsent_softmax_grad_f32(
    const float* y, const float* g, float* dx, unsigned long long rows, unsigned int n) {
    unsigned long long r = xsent_warp_row();
    if (r >= rows) return;
    const float* yr = y + r * n;
    const float* gr = g + r * n;
    float* dr = dx + r * n;
    float s = 0.0f;
    for (unsigned int i = threadIdx.x; i < n; i += 32) s += yr[i] * gr[i];
    s = xsent_warp_sum(s);
    for (unsigned int i = threadIdx.x; i < n; i += 32) dr[i] = yr[i] * (gr[i] - s);
}

// The same from bf16 scores (bf16 training): y recomputed in f32 from x and the bias, as the
// forward computed it before rounding, g widened, dx rounded once. The f32 kernels' bits on the
// widened scores and gradient, with no f32 probabilities kept between forward and backward.
extern "C" __global__ void xsent_masked_softmax_grad_bf16(
    const __nv_bfloat16* x, const float* bias, const __nv_bfloat16* g, __nv_bfloat16* dx, unsigned long long rows,
    unsigned int lk, unsigned long long rows_per_bias) {
    unsigned long long r = xsent_warp_row();
    if (r >= rows) return;
    const __nv_bfloat16* xr = x + r * lk;
    const float* br = bias + (r / rows_per_bias) * lk;
    const __nv_bfloat16* gr = g + r * lk;
    __nv_bfloat16* dr = dx + r * lk;
    float m, inv;
    xsent_softmax_row(xr, br, lk, m, inv);
    float s = 0.0f;
    for (unsigned int i = threadIdx.x; i < lk; i += 32) {
        float y = xsent_exp((xsent_ld(xr, i) + br[i]) - m) * inv;
        s += y * xsent_ld(gr, i);
    }
    s = xsent_warp_sum(s);
    for (unsigned int i = threadIdx.x; i < lk; i += 32) {
        float y = xsent_exp((xsent_ld(xr, i) + br[i]) - m) * inv;
        xsent_st(dr, i, y * (xsent_ld(gr, i) - s));
    }
}
