// Standalone persistent kernel around gemm_tile for the engine's own tests and benchmark (until the
// runtime integrates it): 384 threads, grid <= SM count, static round-robin over runs of tiles.
// Raster: m runs grouped `group_m_runs` at a time; inside a group, m fastest, then n (or, with
// along_n, runs along N, m-major).
#pragma once

#include "kernels/gemm/gemm_tile.cuh"
#include "runtime/sync.cuh"

namespace kosmos::kernels::gemm::testing {

// Tasks of the raster below: runs of `run` tiles down M (or along N) over every tile.
__host__ __device__ inline int engine_task_count(const GemmParams& p, int run, bool along_n) {
  return along_n ? p.num_m_tiles * ((p.num_n_tiles + run - 1) / run)
                 : ((p.num_m_tiles + run - 1) / run) * p.num_n_tiles;
}

// kMergedTails: compiled with the merged-tail tile (kGemmMergeTails); it costs the kernel a few
// spilled registers, so problems without the flag run the kernel without it (as in the op kernel).
template <bool kMergedTails>
__global__ void __launch_bounds__(384, 1)
    gemm_engine_kernel(const __grid_constant__ GemmParams p, int run, int group_m_runs, bool along_n) {
  extern __shared__ __align__(1024) char smem[];
  NoWait no_wait;
#ifdef KOSMOS_GEMM_PROBE
  if (threadIdx.x == 0) probe::mark_kernel(0);
#endif
  // The task index lives in shared memory and everything else is recomputed from the parameters
  // per task, as in the runtime (persistent_kernel.cuh): loop state kept in registers across the
  // body took registers from the consumers (ptxas spilled 16 B in the SwiGLU epilogue).
  __shared__ int s_task;
  if (threadIdx.x == 0) s_task = int(blockIdx.x);
  __syncthreads();
  for (;;) {
    const int t = s_task;
    if (t >= engine_task_count(p, run, along_n)) break;
    GemmTileArgs args{};
    if (along_n) {  // runs of `run` tiles along N (kGemmRunAlongN), m-major
      const int n_runs = (p.num_n_tiles + run - 1) / run;
      args = GemmTileArgs{0, uint32_t(t / n_runs), uint32_t((t % n_runs) * run), uint32_t(run), kGemmRunAlongN, {}};
    } else {
      const int m_runs = (p.num_m_tiles + run - 1) / run;
      const int per_group = group_m_runs * p.num_n_tiles;
      const int group = t / per_group;
      const int within = t % per_group;
      const int rows_in_group = min(group_m_runs, m_runs - group * group_m_runs);
      const int m_run = group * group_m_runs + within % rows_in_group;
      const int n_tile = within / rows_in_group;
      args = GemmTileArgs{0, uint32_t(m_run * run), uint32_t(n_tile), uint32_t(run), 0, {}};
    }
    // Laundered per tile, as the runtime does: otherwise the body's shared memory addresses are
    // hoisted out of this loop and kept live through it (spilled).
    char* body_smem = smem;
    int body_thread = int(threadIdx.x);
    asm volatile("" : "+l"(body_smem));
    asm volatile("" : "+r"(body_thread));
    gemm_tile<NoWait, kMergedTails>(p, args, body_smem, body_thread, no_wait);
    __syncthreads();
    // The thread index read again, as the runtime does: a "thread 0" predicate kept from the loop
    // top lived through the body and was spilled with the merged-tail tile.
    if (runtime::tid_now() == 0) s_task = t + int(gridDim.x);
    __syncthreads();
  }
#ifdef KOSMOS_GEMM_PROBE
  if (threadIdx.x == 0) probe::mark_kernel(1);
#endif
}

// Launches the kernel on every SM (or fewer when there is less work).
inline cudaError_t launch_gemm_engine(const GemmParams& p, int num_sms, int run = 1, int group_m_runs = 16,
                                      cudaStream_t stream = nullptr, bool along_n = false) {
  static bool configured = false;
  if (!configured) {
    for (const void* k : {reinterpret_cast<const void*>(&gemm_engine_kernel<false>),
                          reinterpret_cast<const void*>(&gemm_engine_kernel<true>)}) {
      const cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kGemmSmemBytesMax);
      if (e != cudaSuccess) return e;
    }
    configured = true;
  }
  const int total = engine_task_count(p, run, along_n);
  const int grid = total < num_sms ? total : num_sms;
  if (p.layout & kGemmMergeTails)
    gemm_engine_kernel<true><<<grid, 384, gemm_smem_bytes(p.tile_shape), stream>>>(p, run, group_m_runs, along_n);
  else
    gemm_engine_kernel<false><<<grid, 384, gemm_smem_bytes(p.tile_shape), stream>>>(p, run, group_m_runs, along_n);
  return cudaGetLastError();
}

}  // namespace kosmos::kernels::gemm::testing
