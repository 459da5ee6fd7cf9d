// Host bf16 helpers: round-to-nearest-even conversion, bit-exact with __float2bfloat16_rn for
// finite inputs; NaN stays a (quiet) NaN. Used by the CPU executor's GEMM tile and the tests.
#pragma once

#include <cstdint>
#include <cstring>

namespace kosmos::kernels::gemm {

struct Bf16 {
  uint16_t bits = 0;
};

inline float bf16_to_float(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>(u >> 16);
}

}  // namespace kosmos::kernels::gemm
