// LayerNorm for training, forward and backward (src/model/kernels/layer_norm.rs:
// `LayerNormTrain`, `LayerNormGradX`, `LayerNormGradWB`) with the CPU kernels' arithmetic: each
// row's mean and variance in f64 (two passes), x̂ rounded to f32, the affine map and the input's
// gradient in f32, the weight's and bias's gradients summed over rows in f64. The activation, its
// gradient and the output are f32, or bf16 in bf16 training (widened, computed in f32, rounded
// once: the f32 kernel's bits on the widened values); the weights and their gradients are f32.
// The row kernels give one warp to a row (blockDim (32, rows per block)), lane j taking columns
// j, j + 32, …; a row's sums are the warp's tree of its lanes' sums, where the CPU sums in order
// (equal to rounding).
#include "math.cuh"

// Mean and 1/√(var + eps) of a row of n.
template <typename T>
__device__ __forceinline__ void xsent_row_stats(const T* row, unsigned int n, float eps, double* mean, double* rstd) {
    double s = 0.0;
    for (unsigned int i = threadIdx.x; i < n; i += 32) s += (double)xsent_ld(row, i);
    double m = xsent_warp_sum(s) / (double)n;
    double v = 0.0;
    for (unsigned int i = threadIdx.x; i < n; i += 32) {
        double d = (double)xsent_ld(row, i) - m;
        v += d * d;
    }
    v = xsent_warp_sum(v) / (double)n;
    *mean = m;
    *rstd = 1.0 / sqrt(v + (double)eps);
}

// x̂ of one value, rounded to f32 as the CPU's `normalise_row` does.
__device__ __forceinline__ float xsent_xhat(float x, double mean, double rstd) {
    return (float)(((double)x - mean) * rstd);
}

// y = x̂ · w + b per row.
template <typename T>
__device__ __forceinline__ void xsent_layer_norm(
    const T* x, const float* w, const float* b, T* y, unsigned long long rows, unsigned int n, float eps) {
    unsigned long long r = xsent_warp_row();
    if (r >= rows) return;  // the whole warp: its lanes share r
    const T* xr = x + r * n;
    T* yr = y + r * n;
    double mean, rstd;
    xsent_row_stats(xr, n, eps, &mean, &rstd);
    for (unsigned int i = threadIdx.x; i < n; i += 32) {
        float xh = xsent_xhat(xsent_ld(xr, i), mean, rstd);
        xsent_st(yr, i, xh * w[i] + b[i]);
    }
}

extern "C" __global__ void xsent_layer_norm_f32(
    const float* x, const float* w, const float* b, float* y, unsigned long long rows, unsigned int n, float eps) {
    xsent_layer_norm(x, w, b, y, rows, n, eps);
}

extern "C" __global__ void xsent_layer_norm_bf16(
    const __nv_bfloat16* x, const float* w, const float* b, __nv_bfloat16* y, unsigned long long rows, unsigned int n,
    float eps) {
    xsent_layer_norm(x, w, b, y, rows, n, eps);
}

// Per row, with d = g ⊙ w: dx = rstd · (d − mean(d) − x̂ · mean(d ⊙ x̂)).
template <typename T>
__device__ __forceinline__ void xsent_layer_norm_grad_x(
    const T* x, const float* w, const T* g, T* dx, unsigned long long rows, unsigned int n, float eps) {
    unsigned long long r = xsent_warp_row();
    if (r >= rows) return;
    const T* xr = x + r * n;
    const T* gr = g + r * n;
    double mean, rstd;
    xsent_row_stats(xr, n, eps, &mean, &rstd);
    double sd = 0.0, sdx = 0.0;
    for (unsigned int i = threadIdx.x; i < n; i += 32) {
        float xh = xsent_xhat(xsent_ld(xr, i), mean, rstd);
        float d = xsent_ld(gr, i) * w[i];
        sd += (double)d;
        sdx += (double)(d * xh);
    }
    float md = (float)(xsent_warp_sum(sd) / (double)n);
    float mdx = (float)(xsent_warp_sum(sdx) / (double)n);
    float rs = (float)rstd;
    T* dr = dx + r * n;
    for (unsigned int i = threadIdx.x; i < n; i += 32) {
        float xh = xsent_xhat(xsent_ld(xr, i), mean, rstd);
        float d = xsent_ld(gr, i) * w[i];
        xsent_st(dr, i, rs * (d - md - xh * mdx));
    }
}

extern "C" __global__ void xsent_layer_norm_grad_x_f32(
    const float* x, const float* w, const float* g, float* dx, unsigned long long rows, unsigned int n, float eps) {
    xsent_layer_norm_grad_x(x, w, g, dx, rows, n, eps);
}

extern "C" __global__ void xsent_layer_norm_grad_x_bf16(
    const __nv_bfloat16* x, const float* w, const __nv_bfloat16* g, __nv_bfloat16* dx, unsigned long long rows,
    unsigned int n, float eps) {
    xsent_layer_norm_grad_x(x, w, g, dx, rows, n, eps);
}

// g ⊙ x̂ per row, in f32 (summed over rows by the column kernel: the weight's gradient).
template <typename T>
__device__ __forceinline__ void xsent_layer_norm_g_xhat(
    const T* x, const T* g, float* gxhat, unsigned long long rows, unsigned int n, float eps) {
    unsigned long long r = xsent_warp_row();
    if (r >= rows) return;
    const T* xr = x + r * n;
    const T* gr = g + r * n;
    double mean, rstd;
    xsent_row_stats(xr, n, eps, &mean, &rstd);
    float* hr = gxhat + r * n;
    for (unsigned int i = threadIdx.x; i < n; i += 32) {
        float xh = xsent_xhat(xsent_ld(xr, i), mean, rstd);
        hr[i] = xsent_ld(gr, i) * xh;
    }
}

extern "C" __global__ void xsent_layer_norm_g_xhat_f32(
    const float* x, const float* g, float* gxhat, unsigned long long rows, unsigned int n, float eps) {
    xsent_layer_norm_g_xhat(x, g, gxhat, rows, n, eps);
}

extern "C" __global__ void xsent_layer_norm_g_xhat_bf16(
    const __nv_bfloat16* x, const __nv_bfloat16* g, float* gxhat, unsigned long long rows, unsigned int n, float eps) {
    xsent_layer_norm_g_xhat(x, g, gxhat, rows, n, eps);
}

// Column sums of a (f32) and b (f32 or bf16), both [rows, n], in f64, into out[0..n) and
// out[n..2n): blockDim (32, 32), block x takes columns 32x…32x+31; thread (j, k) sums rows k,
// k + 32, … of its column, then thread (j, 0) adds the 32 partial sums in order (the same order
// every run).
template <typename B>
__device__ __forceinline__ void xsent_column_sums2(
    const float* a, const B* b, float* out, unsigned long long rows, unsigned int n) {
    __shared__ double pa[32][33];
    __shared__ double pb[32][33];
    unsigned int c = blockIdx.x * 32 + threadIdx.x;
    double sa = 0.0, sb = 0.0;
    if (c < n) {
        for (unsigned long long r = threadIdx.y; r < rows; r += 32) {
            sa += (double)a[r * n + c];
            sb += (double)xsent_ld(b, r * n + c);
        }
    }
    pa[threadIdx.y][threadIdx.x] = sa;
    pb[threadIdx.y][threadIdx.x] = sb;
    __syncthreads();
    if (threadIdx.y == 0 && c < n) {
        double ta = 0.0, tb = 0.0;
        for (int k = 0; k < 32; k++) {
            ta += pa[k][threadIdx.x];
            tb += pb[k][threadIdx.x];
        }
        out[c] = (float)ta;
        out[n + c] = (float)tb;
    }
}

extern "C" __global__ void xsent_column_sums2_f32(
    const float* a, const float* b, float* out, unsigned long long rows, unsigned int n) {
    xsent_column_sums2(a, b, out, rows, n);
}

extern "C" __global__ void xsent_column_sums2_bf16(
    const float* a, const __nv_bfloat16* b, float* out, unsigned long long rows, unsigned int n) {
    xsent_column_sums2(a, b, out, rows, n);
}
