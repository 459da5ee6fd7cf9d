// Timing shared by the benchmarks: CUDA events around each repetition on `stream`, 3 warm-up
// calls, median of `reps`.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>

#include "kosmos/status.h"

namespace kosmos::cli {

Status time_median_ms(cudaStream_t stream, int reps, const std::function<Status()>& fn, double* median_ms);

// Makes `waiter` wait for the work enqueued on `source` so far (through `ev`); nothing when they are
// the same stream. The two-stream baselines fork and join with it.
inline Status stream_wait(cudaStream_t waiter, cudaStream_t source, cudaEvent_t ev) {
  if (waiter == source) return Status::ok();
  if (cudaEventRecord(ev, source) != cudaSuccess || cudaStreamWaitEvent(waiter, ev) != cudaSuccess)
    return Status(StatusCode::kCudaError, "stream_wait: cudaEventRecord / cudaStreamWaitEvent failed");
  return Status::ok();
}

}  // namespace kosmos::cli
