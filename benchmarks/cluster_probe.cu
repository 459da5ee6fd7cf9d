// cluster_probe: can the persistent runtime run its CTAs in 2-CTA clusters? The question behind
// docs/design/runtime.md, "Paired claims": the faster Hopper GEMMs (cuBLAS's nvjet kernels,
// torch._grouped_mm's CUTLASS kernel) run the engine's 128x256 tile in clusters of two and multicast
// the operand the pair shares. Before the runtime is changed for that, this probe answers, on the
// machine at hand:
//   1. how many clusters of 1, 2 and 4 CTAs fit at once at the op kernel's shape (384 threads, the
//      GEMM engine's dynamic shared memory), i.e. how many SMs a clustered persistent launch keeps;
//   2. whether one launch may be cooperative (all CTAs co-resident, which the runtime's
//      self-scheduling needs) AND clustered; the kernel checks both: each CTA writes its rank into
//      its partner's shared memory (DSMEM) across a cluster barrier, and every CTA waits on a
//      grid-wide arrival counter, which only returns if all CTAs run at the same time (a watchdog
//      bounds the wait, so a launch that is not co-resident reports instead of hanging).
// Usage: cluster_probe [--smem BYTES]   (default: the engine's kGemmSmemBytesMax)
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "bench_util.cuh"
#include "kernels/gemm/gemm_tile.cuh"

namespace cg = cooperative_groups;

namespace {

constexpr int kThreads = 384;

struct ProbeOut {
  int partner_rank_seen;  // what the CTA's partner wrote into this CTA's shared memory
  int cluster_rank;
  int smid;
  int arrived;  // 1: saw every CTA arrive at the grid-wide counter within the budget
};

__device__ unsigned int g_arrivals;

__global__ void __launch_bounds__(kThreads, 1) probe_kernel(ProbeOut* out, unsigned int ctas) {
  extern __shared__ int smem[];
  cg::cluster_group cluster = cg::this_cluster();
  const unsigned int rank = cluster.block_rank();
  if (threadIdx.x == 0) smem[0] = -1;
  cluster.sync();
  if (threadIdx.x == 0) {
    int* partner = cluster.map_shared_rank(smem, rank ^ 1u);
    *partner = static_cast<int>(rank);
  }
  cluster.sync();
  if (threadIdx.x == 0) {
    ProbeOut o{};
    o.partner_rank_seen = smem[0];
    o.cluster_rank = static_cast<int>(rank);
    asm volatile("mov.u32 %0, %%smid;" : "=r"(o.smid));
    atomicAdd(&g_arrivals, 1u);
    unsigned long long t0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    o.arrived = 1;
    while (atomicAdd(&g_arrivals, 0u) < ctas) {
      unsigned long long t;
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
      if (t - t0 > 2000000000ull) {  // 2 s: not co-resident
        o.arrived = 0;
        break;
      }
    }
    out[blockIdx.x] = o;
  }
}

}  // namespace

int main(int argc, char** argv) {
  size_t smem = kosmos::kernels::gemm::kGemmSmemBytesMax;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--smem") == 0 && i + 1 < argc) {
      smem = std::strtoull(argv[++i], nullptr, 10);
    } else {
      std::fprintf(stderr, "usage: cluster_probe [--smem BYTES]\n");
      return 2;
    }
  }
  int count = 0, sms = 0;
  cudaDeviceProp prop{};
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("cluster_probe: no CUDA device visible: nothing probed\n");
    return 0;
  }
  CK(cudaGetDeviceProperties(&prop, 0));
  sms = prop.multiProcessorCount;
  if (prop.major < 9) {
    std::printf("cluster_probe: %s (sm_%d%d) has no thread block clusters: nothing probed\n", prop.name, prop.major,
                prop.minor);
    return 0;
  }
  CK(cudaFuncSetAttribute(probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  CK(cudaFuncSetAttribute(probe_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  std::printf("%s, %d SMs; probe kernel: %d threads, %zu B dynamic shared memory\n", prop.name, sms, kThreads, smem);
  int clusters2 = 0;
  for (int cs : {1, 2, 4}) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(unsigned(cs));
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = smem;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = unsigned(cs);
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    int n = 0;
    CK(cudaOccupancyMaxActiveClusters(&n, probe_kernel, &cfg));
    std::printf("  clusters of %d: at most %d at once = %d CTAs on %d SMs%s\n", cs, n, n * cs, sms,
                n * cs < sms ? " (some SMs get none)" : "");
    if (cs == 2) clusters2 = n;
  }
  if (clusters2 == 0) {
    std::printf("cooperative + clusters of 2: no cluster fits: not launched\n");
    return 1;
  }
  const unsigned int ctas = 2u * unsigned(clusters2);
  ProbeOut* d_out = nullptr;
  CK(cudaMalloc(&d_out, ctas * sizeof(ProbeOut)));
  CK(cudaMemset(d_out, 0xff, ctas * sizeof(ProbeOut)));
  const unsigned int zero = 0;
  CK(cudaMemcpyToSymbol(g_arrivals, &zero, sizeof(zero)));
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(ctas);
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 2;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  attr[1].id = cudaLaunchAttributeCooperative;
  attr[1].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 2;
  const cudaError_t le = cudaLaunchKernelEx(&cfg, probe_kernel, d_out, ctas);
  if (le != cudaSuccess) {
    std::printf("cooperative + clusters of 2, %u CTAs: launch refused: %s\n", ctas, cudaGetErrorString(le));
    return 1;
  }
  CK(cudaDeviceSynchronize());
  ProbeOut* h = static_cast<ProbeOut*>(std::malloc(ctas * sizeof(ProbeOut)));
  CK(cudaMemcpy(h, d_out, ctas * sizeof(ProbeOut), cudaMemcpyDeviceToHost));
  int bad_dsmem = 0, not_arrived = 0, same_sm = 0;
  for (unsigned int b = 0; b < ctas; ++b) {
    if (h[b].partner_rank_seen != (h[b].cluster_rank ^ 1)) ++bad_dsmem;
    if (h[b].arrived != 1) ++not_arrived;
    if (b + 1 < ctas && (b % 2) == 0 && h[b].smid == h[b + 1].smid) ++same_sm;
  }
  std::printf(
      "cooperative + clusters of 2, %u CTAs: launched; DSMEM exchange %s (%d wrong), grid-wide arrival %s (%d "
      "CTAs timed out), pairs on one SM: %d\n",
      ctas, bad_dsmem ? "FAILED" : "ok", bad_dsmem, not_arrived ? "FAILED" : "ok", not_arrived, same_sm);
  std::free(h);
  cudaFree(d_out);
  return (bad_dsmem || not_arrived) ? 1 : 0;
}
