// Shared by the stand-alone benchmark programs (gemm_engine_bench, gemm_probe, cluster_probe,
// gather_probe): CUDA error check
// and a device fill of random bf16 values (uniform in [-1, 1) or normal).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define CK(x)                                                                                   \
  do {                                                                                          \
    cudaError_t e_ = (x);                                                                       \
    if (e_ != cudaSuccess) {                                                                    \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

namespace bench_util {

// p[i] = bf16 (round to nearest even) of a hash of (i, seed) mapped to [-1, 1); with `normal`, a
// standard normal value instead (Box-Muller on two 24-bit fields of the hash), as torch.randn gives:
// the card's power draw, so its clocks under a long GEMM, depend on the operand values.
__global__ inline void fill_random_bf16(uint16_t* p, size_t n, uint64_t seed, bool normal = false) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    float f = float(int32_t(x & 0xFFFF) - 32768) / 32768.0f;  // [-1, 1)
    if (normal) {
      const float u1 = (float((x >> 16) & 0xFFFFFF) + 0.5f) / 16777216.0f, u2 = float((x >> 40) & 0xFFFFFF) / 16777216.0f;
      f = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
    }
    uint32_t u;
    memcpy(&u, &f, 4);
    p[i] = uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
}

}  // namespace bench_util
