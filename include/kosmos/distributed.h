// What a multi-GPU transport supplies to an op for one process = one rank (see transport.h for
// NCCL; tests use a CPU stand-in): symmetric allocation (every rank calls it with the same size,
// collectively; peers[r] is rank r's memory, mapped for this process) and a host-stream barrier
// across ranks.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <vector>

#include "kosmos/status.h"

namespace kosmos {

struct DistributedContext {
  int rank = 0;
  std::function<Status(size_t bytes, std::vector<void*>* peers)> alloc_symmetric;
  std::function<Status(cudaStream_t)> barrier;
};

}  // namespace kosmos
