// Baseline for runtime-bench: the cost of one kernel launch per task, back to back on a stream
// (each launch orders after the previous one, like a chain of dependent tasks).
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "kosmos/cuda_check.h"
#include "runtime/launch_baseline.h"

namespace kosmos::runtime {

namespace {
__global__ void empty_task_kernel(int* sink) {
  if (sink && threadIdx.x == 1023) *sink = 0;  // never true: keeps the launch non-trivial to elide
}
}  // namespace

Status time_launch_per_task(int launches, int reps, double* us_per_launch) {
  KOSMOS_CHECK(launches > 0 && reps > 0, "time_launch_per_task: launches and reps must be > 0");
  cudaStream_t s;
  KOSMOS_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t a, b;
  KOSMOS_CUDA_CHECK(cudaEventCreate(&a));
  KOSMOS_CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 100; ++i) empty_task_kernel<<<1, 32, 0, s>>>(nullptr);
  std::vector<double> samples;
  for (int r = 0; r < reps; ++r) {
    KOSMOS_CUDA_CHECK(cudaEventRecord(a, s));
    for (int i = 0; i < launches; ++i) empty_task_kernel<<<1, 32, 0, s>>>(nullptr);
    KOSMOS_CUDA_CHECK(cudaEventRecord(b, s));
    KOSMOS_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    KOSMOS_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    samples.push_back(ms * 1e3 / launches);
  }
  KOSMOS_CUDA_CHECK(cudaGetLastError());
  std::sort(samples.begin(), samples.end());
  *us_per_launch = samples[samples.size() / 2];
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaStreamDestroy(s);
  return Status::ok();
}

}  // namespace kosmos::runtime
