// Attention's masked softmax for training and its backward (src/model/kernels/softmax.rs:
// `MaskedSoftmax`, `SoftmaxGrad`), f32, one warp per row of `lk` keys (blockDim (32, rows per
// block)); lane j takes keys j, j + 32, …. The exp is the CPU's (math.cuh); a row's sums are the
// warp's tree of its lanes' sums, where the CPU sums in order (equal to rounding).
#include "math.cuh"

// y = softmax(x + bias) per row; the bias of row r is row r / rows_per_bias of `bias` ([B, 1, 1, Lk]
// against scores [B, H, Lq, Lk]: rows_per_bias = H·Lq).
extern "C" __global__ void xsent_masked_softmax_f32(
    const float* x, const float* bias, float* y, unsigned long long rows, unsigned int lk,
    unsigned long long rows_per_bias) {
    unsigned long long r = xsent_warp_row();
    if (r >= rows) return;  // the whole warp: its lanes share r
    const float* xr = x + r * lk;
    const float* br = bias + (r / rows_per_bias) * lk;
    float* yr = y + r * lk;
    float m = -INFINITY;
    for (unsigned int i = threadIdx.x; i < lk; i += 32) m = fmaxf(m, xr[i] + br[i]);
    m = xsent_warp_max(m);
    float s = 0.0f;
    for (unsigned int i = threadIdx.x; i < lk; i += 32) {
        float e = xsent_exp((xr[i] + br[i]) - m);
        yr[i] = e;
        s += e;
    }
    float inv = 1.0f / xsent_warp_sum(s);
    for (unsigned int i = threadIdx.x; i < lk; i += 32) yr[i] = yr[i] * inv;
}

// dx = y ⊙ (g − Σ g⊙y) per row of n.
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
