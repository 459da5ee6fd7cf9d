#include "bench_timing.h"

#include <algorithm>
#include <vector>

#include "kosmos/cuda_check.h"

namespace kosmos::cli {

Status time_median_ms(cudaStream_t stream, int reps, const std::function<Status()>& fn, double* median_ms) {
  KOSMOS_CHECK(reps > 0, "time_median_ms: reps must be > 0");
  cudaEvent_t a, b;
  KOSMOS_CUDA_CHECK(cudaEventCreate(&a));
  KOSMOS_CUDA_CHECK(cudaEventCreate(&b));
  Status st;
  std::vector<double> v;
  for (int i = 0; i < 3 && st.is_ok(); ++i) st = fn();
  for (int i = 0; i < reps && st.is_ok(); ++i) {
    float ms = 0;
    if (cudaEventRecord(a, stream) != cudaSuccess || !(st = fn()).is_ok() || cudaEventRecord(b, stream) != cudaSuccess ||
        cudaEventSynchronize(b) != cudaSuccess || cudaEventElapsedTime(&ms, a, b) != cudaSuccess) {
      if (st.is_ok()) st = Status(StatusCode::kCudaError, "time_median_ms: CUDA event timing failed");
      break;
    }
    v.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  KOSMOS_RETURN_IF_ERROR(st);
  std::sort(v.begin(), v.end());
  *median_ms = v[v.size() / 2];
  return Status::ok();
}

}  // namespace kosmos::cli
