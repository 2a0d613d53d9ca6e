// AdamW in place: element i's parameter, first and second moments updated in one pass, shared by
// the kernels below. The arithmetic is the CPU kernel's (src/train/optim.rs), in the same order;
// build.rs compiles it with -fmad=false, so no multiply-add is fused and the values are the CPU's.
__device__ __forceinline__ void adamw_element(
    float* p, const float* g, float* m, float* v, unsigned long long i,
    float lr, float b1, float b2, float bc1, float bc2, float eps, float decay, float grad_scale) {
    float gi = g[i] * grad_scale;
    float mi = b1 * m[i] + (1.0f - b1) * gi;
    float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float update = (mi / bc1) / (sqrtf(vi / bc2) + eps);
    p[i] = p[i] * (1.0f - lr * decay) - lr * update;
}

// AdamW for one f32 parameter.
extern "C" __global__ void xsent_adamw_f32(
    float* p, const float* g, float* m, float* v, unsigned long long n,
    float lr, float b1, float b2, float bc1, float bc2, float eps, float decay, float grad_scale) {
    unsigned long long stride = (unsigned long long)blockDim.x * gridDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        adamw_element(p, g, m, v, i, lr, b1, b2, bc1, bc2, eps, decay, grad_scale);
    }
}

// The optimiser over many tensors in one launch each (src/gpu/optim.rs builds the table): one
// block per chunk of `chunk` elements of one tensor. The table holds, for T tensors, T
// addresses per field, then per chunk c its tensor and first element at [fields·T + 2c].

// Σx² of each chunk of the gradients, in f64 (x² in f32, as the CPU): partial[c]. Table fields:
// gradient, length.
extern "C" __global__ void xsent_sumsq_many_f32(
    const unsigned long long* table, unsigned long long tensors, unsigned long long chunk, double* partial) {
    const unsigned long long* ch = table + 2ull * tensors + 2ull * blockIdx.x;
    unsigned long long t = ch[0], start = ch[1];
    const float* g = (const float*)table[t];
    unsigned long long n = table[tensors + t];
    unsigned long long end = start + chunk < n ? start + chunk : n;
    double acc = 0.0;
    for (unsigned long long i = start + threadIdx.x; i < end; i += blockDim.x) {
        float x = g[i];
        acc += (double)(x * x);
    }
    // The block's sum: each warp's by a shuffle tree, then the warps' sums by warp 0's (a fixed
    // order: the same partials run to run).
    __shared__ double warps[32];
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
    if ((threadIdx.x & 31) == 0) warps[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x < 32) {
        acc = threadIdx.x < (blockDim.x >> 5) ? warps[threadIdx.x] : 0.0;
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
        if (threadIdx.x == 0) partial[blockIdx.x] = acc;
    }
}

// AdamW over many parameters: xsent_adamw_f32's arithmetic (adamw_element). Table fields:
// parameter, gradient, first moment, second moment, length, then the tensor's learning rate
// (low 32 bits) and weight decay (high 32 bits) as f32 bits.
extern "C" __global__ void xsent_adamw_many_f32(
    const unsigned long long* table, unsigned long long tensors, unsigned long long chunk,
    float b1, float b2, float bc1, float bc2, float eps, float grad_scale) {
    const unsigned long long* ch = table + 6ull * tensors + 2ull * blockIdx.x;
    unsigned long long t = ch[0], start = ch[1];
    float* p = (float*)table[t];
    const float* g = (const float*)table[tensors + t];
    float* m = (float*)table[2ull * tensors + t];
    float* v = (float*)table[3ull * tensors + t];
    unsigned long long n = table[4ull * tensors + t];
    unsigned long long hyper = table[5ull * tensors + t];
    float lr = __uint_as_float((unsigned int)(hyper & 0xffffffffull));
    float decay = __uint_as_float((unsigned int)(hyper >> 32));
    unsigned long long end = start + chunk < n ? start + chunk : n;
    for (unsigned long long i = start + threadIdx.x; i < end; i += blockDim.x) {
        adamw_element(p, g, m, v, i, lr, b1, b2, bc1, bc2, eps, decay, grad_scale);
    }
}
