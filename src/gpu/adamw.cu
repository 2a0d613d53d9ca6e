// AdamW for one f32 parameter, in place: parameter, first and second moments updated in one
// pass. The arithmetic is the CPU kernel's (src/train/optim.rs), in the same order; build.rs
// compiles it with -fmad=false, so no multiply-add is fused and the values are the CPU's.
extern "C" __global__ void xsent_adamw_f32(
    float* p, const float* g, float* m, float* v, unsigned long long n,
    float lr, float b1, float b2, float bc1, float bc2, float eps, float decay, float grad_scale) {
    unsigned long long stride = (unsigned long long)blockDim.x * gridDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float gi = g[i] * grad_scale;
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float update = (mi / bc1) / (sqrtf(vi / bc2) + eps);
        p[i] = p[i] * (1.0f - lr * decay) - lr * update;
    }
}
