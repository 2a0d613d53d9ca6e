// The two bf16 conversions gelu.cu uses, for the CPU emulation: as CUDA's cuda_bf16.hpp defines
// them (round to nearest even; a NaN becomes 0x7fff).
#pragma once

#include <stdint.h>

#include <bit>

struct __nv_bfloat16 {
    unsigned short x;
};

inline float __bfloat162float(__nv_bfloat16 b) { return std::bit_cast<float>((uint32_t)b.x << 16); }

inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    uint32_t u = std::bit_cast<uint32_t>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return __nv_bfloat16{0x7fff};
    u += 0x7fffu + ((u >> 16) & 1u);
    return __nv_bfloat16{(unsigned short)(u >> 16)};
}
