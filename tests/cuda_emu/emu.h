// The CUDA built-ins xsent's kernels use, for running them on the CPU (tests/gpu_emulated.rs):
// each thread of a block is a host thread; blocks run one after another. __syncthreads is a
// barrier over the block's threads, the warp shuffles an exchange through a warp's slots with a
// barrier over its 32 lanes, __shared__ a static (blocks never run at once, launches are
// serialised). Strict where the hardware is undefined: a full-mask shuffle in a warp with a lane
// missing or gone, or a barrier some thread never reaches, stops the process with a message.
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <atomic>
#include <bit>
#include <condition_variable>
#include <mutex>

struct dim3 {
    unsigned int x, y, z;
};

namespace xsent_emu {

// A barrier over `count` threads that can leave it (a thread that returns from the kernel).
struct Barrier {
    std::mutex mu;
    std::condition_variable cv;
    unsigned int count = 0, waiting = 0;
    unsigned long long generation = 0;
    void wait(const char* what);
    void leave();
};

struct Warp {
    Barrier bar;
    unsigned int lanes = 0;  // lanes present (a block whose size is not a multiple of 32 has fewer)
    std::atomic<bool> left{false};  // a lane has returned from the kernel
    uint64_t slot[32];
};

struct Thread {
    dim3 idx;
    unsigned int lane;
    Warp* warp;
    Barrier* block;
};

extern thread_local Thread self;
extern thread_local dim3 block_idx;
extern dim3 block_dim, grid_dim;

[[noreturn]] void fail(const char* what);

template <class T>
T shuffle(unsigned int mask, T v, unsigned int src, const char* what) {
    static_assert(sizeof(T) <= 8, "a shuffle moves at most 8 bytes");
    if (mask != 0xffffffffu) fail("a shuffle with a partial mask (not emulated)");
    Warp* w = self.warp;
    if (w->lanes != 32 || w->left) fail("a full-mask shuffle in a warp with a lane missing or returned");
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof(T));
    w->slot[self.lane] = bits;
    w->bar.wait(what);
    if (w->left) fail("a full-mask shuffle in a warp with a lane missing or returned");
    uint64_t got = w->slot[src];
    w->bar.wait(what);
    T out;
    memcpy(&out, &got, sizeof(T));
    return out;
}

}  // namespace xsent_emu

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define threadIdx (xsent_emu::self.idx)
#define blockIdx (xsent_emu::block_idx)
#define blockDim (xsent_emu::block_dim)
#define gridDim (xsent_emu::grid_dim)

inline void __syncthreads() { xsent_emu::self.block->wait("__syncthreads"); }

template <class T>
inline T __shfl_xor_sync(unsigned int mask, T v, int o) {
    return xsent_emu::shuffle(mask, v, xsent_emu::self.lane ^ (unsigned int)o, "__shfl_xor_sync");
}

// Lanes whose source lies past lane 31 keep their own value (the hardware's rule).
template <class T>
inline T __shfl_down_sync(unsigned int mask, T v, unsigned int o) {
    unsigned int src = xsent_emu::self.lane + o;
    return xsent_emu::shuffle(mask, v, src < 32 ? src : xsent_emu::self.lane, "__shfl_down_sync");
}

inline int __float_as_int(float f) { return std::bit_cast<int>(f); }
inline float __int_as_float(int i) { return std::bit_cast<float>(i); }
inline float __uint_as_float(unsigned int i) { return std::bit_cast<float>(i); }
