// Timing shared by the benchmarks: CUDA events around each repetition on `stream`, 3 warm-up
// calls, median of `reps`.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>

#include "kosmos/status.h"

namespace kosmos::cli {

Status time_median_ms(cudaStream_t stream, int reps, const std::function<Status()>& fn, double* median_ms);

}  // namespace kosmos::cli
