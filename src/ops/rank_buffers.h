// Every rank's buffers of a layer (TP, MoE), and the set-up steps the layers share.
//
// Memory comes from one of three places: host memory (CPU executor, virtual ranks), device memory
// (virtual ranks on one GPU; freed here), or a transport's symmetric memory (one rank per process;
// owned and freed by the transport). A buffer of 0 bytes is absent (nullptr on every rank).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kosmos/distributed.h"
#include "kosmos/status.h"

namespace kosmos::ops {

class RankBuffers {
 public:
  RankBuffers() = default;
  RankBuffers(const RankBuffers&) = delete;
  RankBuffers& operator=(const RankBuffers&) = delete;
  ~RankBuffers();

  // bytes_of(b): per-rank size of buffer b; name_of(b): for error messages.
  Status allocate(uint32_t num_buffers, uint32_t world, bool cpu, const DistributedContext* dist,
                  const std::function<size_t(uint32_t)>& bytes_of, const std::function<std::string(uint32_t)>& name_of);
  void* at(uint32_t buffer, uint32_t rank) const { return mem_.at(size_t(buffer) * world_ + rank); }

 private:
  uint32_t world_ = 0;
  std::vector<void*> mem_;                      // [buffer * world + rank]
  std::vector<std::vector<uint8_t>> host_mem_;  // CPU executor
  std::vector<void*> device_owned_;             // cudaMalloc'd here
};

// CTAs the op kernel will run with: the GPU's SM count (capped by max_ctas > 0), or 132 for plans
// built for the CPU executor (the task granularity then matches the GPU's).
int op_ctas(bool cpu, int max_ctas);

// The checks every plan_distributed does before building anything.
Status check_distributed(const DistributedContext& dist, int world, const char* who);

}  // namespace kosmos::ops
