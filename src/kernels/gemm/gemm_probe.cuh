// Diagnostic only (never in the product build): per-tile phase timestamps of gemm_tile, recorded
// when the including translation unit defines KOSMOS_GEMM_PROBE (benchmarks/gemm_probe.cu).
// Per CTA and per role (0 = consumer thread 128, 1 = producer thread 0) a tile sequence number
// counts the tiles that role has started; marks are SM clock cycles (clock64).
#pragma once

#include <cstdint>

namespace kosmos::kernels::gemm::probe {

inline constexpr int kMaxCtas = 160;
inline constexpr int kMaxTiles = 64;
// consumer: start, first data, mainloop done, epilogue done; producer: first TMA, last TMA (clock64);
// consumer start and epilogue done again in %globaltimer ns (comparable across SMs).
inline constexpr int kMarks = 8;

__device__ long long g_marks[kMaxCtas][kMaxTiles][kMarks];
__device__ int g_seq[kMaxCtas][2];
__device__ long long g_kernel_ns[kMaxCtas][2];  // %globaltimer at kernel entry and at exit, per CTA

__device__ __forceinline__ void mark_kernel(int which) {  // 0: entry, 1: exit (thread 0)
  long long ns;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
  if (blockIdx.x < kMaxCtas) g_kernel_ns[blockIdx.x][which] = ns;
}

__device__ __forceinline__ void mark(int role, int which) {
  if (blockIdx.x >= kMaxCtas) return;
  const int s = g_seq[blockIdx.x][role];
  if (s >= kMaxTiles) return;
  g_marks[blockIdx.x][s][which] = clock64();
  if (which == 0 || which == 3) {
    long long ns;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
    g_marks[blockIdx.x][s][which == 0 ? 6 : 7] = ns;
  }
}
__device__ __forceinline__ void next(int role) { ++g_seq[blockIdx.x][role]; }

}  // namespace kosmos::kernels::gemm::probe
