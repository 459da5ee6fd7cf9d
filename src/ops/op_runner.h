// OpRunner: plan once, run many. Holds a plan whose tasks include GEMM tiles and reduce tiles,
// the GEMM problems (in terms of the plan's buffers), and an executor (GPU or CPU). Binding a
// buffer marks the problems dirty; the next run() re-resolves pointers and re-encodes the TMA
// descriptors (host work only), so run() itself allocates nothing and never synchronises.
#pragma once

#include <memory>
#include <vector>

#include "kernels/gemm/gemm_host.h"
#include "kosmos/distributed.h"
#include "kosmos/runtime.h"
#include "ops/gemm_body.h"
#include "ops/gemm_raster.h"

namespace kosmos::ops {

enum class ExecutorKind { kCpu, kGpu };

inline constexpr uint32_t kNoBuffer = 0xFFFFFFFFu;

// One GEMM of the plan. Shapes, layouts and epilogue live in `desc` (its pointers are ignored and
// filled from the buffers at run time); the operands are (buffer, rank, byte offset) of the plan.
struct GemmProblemSpec {
  kernels::gemm::GemmDesc desc;
  uint32_t rank = 0;
  uint32_t a_buffer = kNoBuffer, b_buffer = kNoBuffer, c_buffer = kNoBuffer, row_scale_buffer = kNoBuffer;
  uint32_t c_rank = kNoBuffer;  // rank whose C buffer receives the tile (kNoBuffer: `rank`)
  uint32_t c_aux_buffer = kNoBuffer;  // kGemmEpiSavePreact: where the pre-activation goes (rank `rank`)
  uint64_t a_offset = 0, b_offset = 0, c_offset = 0, row_scale_offset = 0, c_aux_offset = 0;
  GemmWaitRule rule;
};

struct RunnerOptions {
  ExecutorKind executor = ExecutorKind::kGpu;
  double watchdog_seconds = 10.0;
  bool trace = false;
  uint32_t cpu_workers = 4;
  int max_ctas = 0;
};

class OpRunner {
 public:
  static Status create(const plan::Plan& plan, std::vector<GemmProblemSpec> problems, const RunnerOptions& options,
                       std::unique_ptr<OpRunner>* out);

  Status bind(uint32_t buffer, uint32_t rank, void* ptr);
  // Replaces the non-buffer fields of a problem's descriptor (e.g. grouped GEMM's device arrays of
  // group sizes and offsets); shapes must not change. Takes effect at the next run.
  Status update_problem(uint32_t problem, const kernels::gemm::GemmDesc& desc);
  void* buffer(uint32_t buffer, uint32_t rank) const;
  Status run(cudaStream_t stream = nullptr);     // GPU: enqueue; CPU: runs to completion
  Status finish(cudaStream_t stream = nullptr);  // GPU: sync + watchdog status; CPU: no-op
  Status read_trace(std::vector<runtime::TraceRecord>* out) const;
  const plan::Plan& plan() const { return plan_; }
  ExecutorKind executor() const { return options_.executor; }
  runtime::GpuExecutor* gpu() const { return gpu_.get(); }
  runtime::CpuExecutor* cpu() const { return cpu_.get(); }

 private:
  Status prepare(cudaStream_t stream);  // resolve pointers, make GEMM params, upload them into the kernel's body blob
  plan::Plan plan_;
  std::vector<GemmProblemSpec> problems_;
  std::vector<kernels::gemm::GemmDesc> resolved_;  // with pointers, for the CPU bodies
  std::vector<kernels::gemm::GemmParams> params_;
  RunnerOptions options_;
  std::unique_ptr<runtime::GpuExecutor> gpu_;
  std::unique_ptr<runtime::CpuExecutor> cpu_;
  bool dirty_ = true;
};


// One rank per process: allocates the runner's counters in symmetric memory through `dist` and
// points its executor at them (.sys scope on the GPU; shared atomics on the CPU executor).
Status use_symmetric_counters(OpRunner& runner, const DistributedContext& dist, bool cpu);

}  // namespace kosmos::ops
