// Shared by the stand-alone benchmark programs (gemm_engine_bench, gemm_probe): CUDA error check
// and a device fill of uniform [-1, 1) bf16 values.
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

// p[i] = bf16 (round to nearest even) of a hash of (i, seed) mapped to [-1, 1).
__global__ inline void fill_random_bf16(uint16_t* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    const float f = float(int32_t(x & 0xFFFF) - 32768) / 32768.0f;  // [-1, 1)
    uint32_t u;
    memcpy(&u, &f, 4);
    p[i] = uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
}

}  // namespace bench_util
