#include "ops/rank_buffers.h"

#include <cuda_runtime_api.h>

#include <algorithm>

namespace kosmos::ops {

RankBuffers::~RankBuffers() {
  for (void* p : device_owned_) cudaFree(p);
}

Status RankBuffers::allocate(uint32_t num_buffers, uint32_t world, bool cpu, const DistributedContext* dist,
                             const std::function<size_t(uint32_t)>& bytes_of,
                             const std::function<std::string(uint32_t)>& name_of) {
  world_ = world;
  mem_.assign(size_t(num_buffers) * world, nullptr);
  host_mem_.resize(size_t(num_buffers) * world);
  for (uint32_t b = 0; b < num_buffers; ++b) {
    const size_t bytes = bytes_of(b);
    if (bytes == 0) continue;
    if (dist) {  // symmetric: every rank allocates the same bytes; peers[r] maps rank r's memory
      std::vector<void*> peers;
      KOSMOS_RETURN_IF_ERROR(dist->alloc_symmetric(bytes, &peers));
      KOSMOS_CHECK(peers.size() == world, "transport returned ", peers.size(), " peer pointers for world ", world);
      for (uint32_t r = 0; r < world; ++r) mem_[b * world + r] = peers[r];
      continue;
    }
    for (uint32_t r = 0; r < world; ++r) {
      if (cpu) {
        host_mem_[b * world + r].assign(bytes + 16, 0);
        mem_[b * world + r] = host_mem_[b * world + r].data();
        continue;
      }
      void* p = nullptr;
      if (cudaMalloc(&p, bytes) != cudaSuccess) {
        cudaGetLastError();
        return Status(StatusCode::kCudaError, "cudaMalloc of " + std::to_string(bytes) + " bytes for buffer '" + name_of(b) +
                                                  "' of rank " + std::to_string(r) + " failed");
      }
      device_owned_.push_back(p);
      mem_[b * world + r] = p;
    }
  }
  return Status::ok();
}

int op_ctas(bool cpu, int max_ctas) {
  int ctas = 132;
  if (!cpu) {
    int dev = 0;
    if (cudaGetDevice(&dev) == cudaSuccess) cudaDeviceGetAttribute(&ctas, cudaDevAttrMultiProcessorCount, dev);
    cudaGetLastError();
  }
  if (max_ctas > 0) ctas = std::min(ctas, max_ctas);  // the CPU executor's plans too (tests of small machines)
  return ctas;
}

Status check_distributed(const DistributedContext& dist, int world, const char* who) {
  KOSMOS_CHECK(dist.rank >= 0 && dist.rank < world, who, "::plan_distributed: rank ", dist.rank, " out of range for world ",
               world);
  KOSMOS_CHECK(dist.alloc_symmetric && dist.barrier, who,
               "::plan_distributed: the transport must supply alloc_symmetric and barrier");
  return Status::ok();
}

}  // namespace kosmos::ops
