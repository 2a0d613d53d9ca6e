// The linear layer's bias gradient (src/model/kernels/linear.rs: `ColumnSums`): the column sums
// of a [rows, n] f32 or bf16 tensor in f64, as the CPU kernel sums them, rounded to f32 (and for
// bf16 then to bf16, as the CPU rounds them). blockDim (32, 32): block x takes columns
// 32x…32x+31; thread (j, k) sums rows k, k + 32, … of its column, then thread (j, 0) adds the 32
// partial sums in order (the same order every run).
#include "math.cuh"

template <typename T>
__device__ __forceinline__ void xsent_column_sums(const T* a, T* out, unsigned long long rows, unsigned int n) {
    __shared__ double part[32][33];
    unsigned int c = blockIdx.x * 32 + threadIdx.x;
    double s = 0.0;
    if (c < n) {
        for (unsigned long long r = threadIdx.y; r < rows; r += 32) s += (double)xsent_ld(a, r * n + c);
    }
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < n) {
        double t = 0.0;
        for (int k = 0; k < 32; k++) t += part[k][threadIdx.x];
        xsent_st(out, c, (float)t);
    }
}

extern "C" __global__ void xsent_column_sums_f32(const float* a, float* out, unsigned long long rows, unsigned int n) {
    xsent_column_sums(a, out, rows, n);
}

extern "C" __global__ void xsent_column_sums_bf16(
    const __nv_bfloat16* a, __nv_bfloat16* out, unsigned long long rows, unsigned int n) {
    xsent_column_sums(a, out, rows, n);
}
