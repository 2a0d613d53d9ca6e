// xsent's CUDA kernels (src/gpu/*.cu, included as they are) run on the CPU: a shared library
// for tests/gpu_emulated.rs. `xsent_emu_launch` takes a launch as cuLaunchKernel does (grid,
// block, an array of pointers to the arguments) plus the arguments' types, which it checks
// against the kernel's signature.
#include "emu.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "adamw.cu"
#include "dropout.cu"
#include "gelu.cu"
#include "heads.cu"
#include "layer_norm.cu"
#include "linear.cu"
#include "softmax.cu"

namespace xsent_emu {

thread_local Thread self;
thread_local dim3 block_idx;
dim3 block_dim, grid_dim;

void fail(const char* what) {
    fprintf(stderr, "CUDA emulation: %s\n", what);
    fflush(stderr);
    abort();
}

void Barrier::wait(const char* what) {
    std::unique_lock<std::mutex> l(mu);
    unsigned long long g = generation;
    if (++waiting == count) {
        waiting = 0;
        generation++;
        cv.notify_all();
        return;
    }
    if (!cv.wait_for(l, std::chrono::seconds(60), [&] { return generation != g; })) {
        fprintf(stderr, "CUDA emulation: %s: some threads never arrived (60 s)\n", what);
        fail("a barrier that not every thread reaches");
    }
}

void Barrier::leave() {
    std::lock_guard<std::mutex> l(mu);
    count--;
    if (count > 0 && waiting == count) {
        waiting = 0;
        generation++;
        cv.notify_all();
    }
}

// A parameter type's letter: p pointer, Q u64, I u32, f f32, d f64.
template <class T>
constexpr char code() {
    if constexpr (std::is_pointer_v<T>) return 'p';
    else if constexpr (std::is_same_v<T, unsigned long long>) return 'Q';
    else if constexpr (std::is_same_v<T, unsigned int>) return 'I';
    else if constexpr (std::is_same_v<T, float>) return 'f';
    else if constexpr (std::is_same_v<T, double>) return 'd';
    else static_assert(sizeof(T) == 0, "a kernel parameter type the emulation does not know");
}

struct Entry {
    const char* name;
    std::string sig;
    std::function<void(void**)> call;
};

template <class... A, size_t... I>
void invoke(void (*k)(A...), void** p, std::index_sequence<I...>) {
    k(*static_cast<std::remove_cv_t<A>*>(p[I])...);
}

template <class... A>
Entry entry(const char* name, void (*k)(A...)) {
    return Entry{name, std::string{code<A>()...}, [k](void** p) { invoke(k, p, std::index_sequence_for<A...>{}); }};
}

#define XSENT_EMU_KERNEL(k) entry(#k, &k)

const std::vector<Entry>& registry() {
    static const std::vector<Entry> r = {
        XSENT_EMU_KERNEL(xsent_adamw_f32),
        XSENT_EMU_KERNEL(xsent_sumsq_many_f32),
        XSENT_EMU_KERNEL(xsent_adamw_many_f32),
        XSENT_EMU_KERNEL(xsent_dropout_f32),
        XSENT_EMU_KERNEL(xsent_dropout_bf16),
        XSENT_EMU_KERNEL(xsent_gelu_f32),
        XSENT_EMU_KERNEL(xsent_gelu_grad_f32),
        XSENT_EMU_KERNEL(xsent_gelu_bf16),
        XSENT_EMU_KERNEL(xsent_gelu_grad_bf16),
        XSENT_EMU_KERNEL(xsent_heads_f32),
        XSENT_EMU_KERNEL(xsent_heads_bf16),
        XSENT_EMU_KERNEL(xsent_layer_norm_f32),
        XSENT_EMU_KERNEL(xsent_layer_norm_bf16),
        XSENT_EMU_KERNEL(xsent_layer_norm_grad_x_f32),
        XSENT_EMU_KERNEL(xsent_layer_norm_grad_x_bf16),
        XSENT_EMU_KERNEL(xsent_layer_norm_g_xhat_f32),
        XSENT_EMU_KERNEL(xsent_layer_norm_g_xhat_bf16),
        XSENT_EMU_KERNEL(xsent_column_sums2_f32),
        XSENT_EMU_KERNEL(xsent_column_sums2_bf16),
        XSENT_EMU_KERNEL(xsent_column_sums_f32),
        XSENT_EMU_KERNEL(xsent_column_sums_bf16),
        XSENT_EMU_KERNEL(xsent_masked_softmax_f32),
        XSENT_EMU_KERNEL(xsent_masked_softmax_bf16),
        XSENT_EMU_KERNEL(xsent_softmax_grad_f32),
        XSENT_EMU_KERNEL(xsent_masked_softmax_grad_bf16),
    };
    return r;
}

// The grid: a host thread per CUDA thread of a block, each running the blocks in turn (blocks
// never overlap: `between` holds every thread until the last has finished a block). A thread
// that returns from the kernel leaves its block's and its warp's barriers for that block.
void run_grid(const Entry& e, void** params) {
    unsigned int n = block_dim.x * block_dim.y * block_dim.z;
    Barrier block, between;
    between.count = n;
    std::vector<std::unique_ptr<Warp>> warps;
    for (unsigned int w = 0; w * 32 < n; w++) {
        warps.push_back(std::make_unique<Warp>());
        warps.back()->lanes = n - w * 32 < 32 ? n - w * 32 : 32;
    }
    auto reset = [&] {
        block.count = n;
        block.waiting = 0;
        for (auto& w : warps) {
            w->bar.count = w->lanes;
            w->bar.waiting = 0;
            w->left = false;
        }
    };
    reset();
    std::vector<std::thread> ts;
    ts.reserve(n);
    for (unsigned int t = 0; t < n; t++) {
        ts.emplace_back([&, t] {
            self.idx = dim3{t % block_dim.x, (t / block_dim.x) % block_dim.y, t / (block_dim.x * block_dim.y)};
            self.lane = t % 32;
            self.warp = warps[t / 32].get();
            self.block = &block;
            for (unsigned int z = 0; z < grid_dim.z; z++)
                for (unsigned int y = 0; y < grid_dim.y; y++)
                    for (unsigned int x = 0; x < grid_dim.x; x++) {
                        block_idx = dim3{x, y, z};
                        e.call(params);
                        self.warp->left = true;
                        self.warp->bar.leave();
                        block.leave();
                        between.wait("the end of a block");
                        if (t == 0) reset();
                        between.wait("the start of a block");
                    }
        });
    }
    for (auto& t : ts) t.join();
}

}  // namespace xsent_emu

using namespace xsent_emu;

// The kernels' names, comma-separated.
extern "C" const char* xsent_emu_kernels() {
    static std::string names;
    if (names.empty()) {
        for (const auto& e : registry()) names += std::string(names.empty() ? "" : ",") + e.name;
    }
    return names.c_str();
}

// Runs kernel `name` over `grid` blocks of `block` threads; `sig` gives the arguments' types
// (letters as `code`). Returns 0, or else non-zero with a message in `err`.
extern "C" int xsent_emu_launch(
    const char* name, const char* sig, const unsigned int* grid, const unsigned int* block, void** params, char* err,
    size_t errlen) {
    static std::mutex launches;
    std::lock_guard<std::mutex> one_at_a_time(launches);
    const Entry* e = nullptr;
    for (const auto& x : registry())
        if (std::string(x.name) == name) e = &x;
    if (!e) {
        snprintf(err, errlen, "no kernel named %s", name);
        return 1;
    }
    if (e->sig != sig) {
        snprintf(err, errlen, "%s takes arguments (%s), given (%s)", name, e->sig.c_str(), sig);
        return 2;
    }
    unsigned long long threads = (unsigned long long)block[0] * block[1] * block[2];
    if (threads == 0 || threads > 1024 || grid[0] == 0 || grid[1] == 0 || grid[2] == 0 || grid[1] > 65535 ||
        grid[2] > 65535 || grid[0] > 2147483647u || block[2] > 64) {
        snprintf(err, errlen, "%s: a launch CUDA refuses: grid (%u, %u, %u), block (%u, %u, %u)", name, grid[0],
                 grid[1], grid[2], block[0], block[1], block[2]);
        return 3;
    }
    block_dim = dim3{block[0], block[1], block[2]};
    grid_dim = dim3{grid[0], grid[1], grid[2]};
    run_grid(*e, params);
    return 0;
}
