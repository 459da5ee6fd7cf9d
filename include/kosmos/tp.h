// Fused tensor + sequence parallel collectives with their GEMMs, each ONE persistent launch in
// which CTAs move tiles between ranks and compute as tiles arrive (Megatron-style TP + SP).
//
// World W, rank r; bf16 operands, fp32 accumulation, bf16 outputs. Shapes (full layer M, N, K):
//   kAgGemm   X_r [M/W, K], W_r [K, N/W]        -> Y_r = AllGather(X) · W_r      [M, N/W]
//                                                 (the gathered X [M, K] stays in buffer kGathered)
//   kGemmRs   X_r [M, K/W], W_r [K/W, N]        -> Y_r = rows r of Σ_s X_s · W_s [M/W, N]
//   kGemmAr   X_r [M, K/W], W_r [K/W, N]        -> Y   = Σ_s X_s · W_s on every rank [M, N]
// Backward (dY given per rank; W_r as in the forward; saved inputs as noted):
//   kColParallelBwd  (forward was kAgGemm): dY_r [M, N/W] ->
//        dX_r [M/W, K] = ReduceScatter(dY_r · W_rᵀ)    and   dW_r [K, N/W] = AllGather(X)ᵀ · dY_r
//        (X_r [M/W, K] is gathered again inside the same launch, feeding dW's k-slices)
//   kRowParallelBwd  (forward was kGemmRs): dY_r [M/W, N] ->
//        dX_r [M, K/W] = AllGather(dY) · W_rᵀ          and   dW_r [K/W, N] = X_rᵀ · AllGather(dY)
// Cross-rank sums run in rank order 0..W-1 in fp32 (no float atomics): deterministic, and equal
// to the unfused composition (fused = false: the same tasks as two launches) bit for bit.
// W must divide M (and K for kGemmRs/kGemmAr/kRowParallelBwd, N for kAgGemm/kColParallelBwd).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kosmos/distributed.h"
#include "kosmos/plan.h"
#include "kosmos/runtime_types.h"
#include "kosmos/status.h"

namespace kosmos {

enum class TpOp { kAgGemm, kGemmRs, kGemmAr, kColParallelBwd, kRowParallelBwd };
const char* to_string(TpOp op);

// Buffers of a TP layer (per rank). Which exist depends on the op (see tp_buffer_shape).
enum class TpBuffer : uint32_t {
  kX,         // forward input shard (backward: the saved forward input X_r)
  kW,         // weight shard W_r
  kY,         // forward output (backward: unused)
  kGathered,  // AllGather result (X for kAgGemm / kColParallelBwd, dY for kRowParallelBwd)
  kPartial,   // per-rank partial products before the reduce [M, N] (kGemmRs, kGemmAr, kColParallelBwd)
  kDY,        // backward input dY_r
  kDX,        // backward output dX_r
  kDW,        // backward output dW_r
  kCount
};
const char* to_string(TpBuffer b);

struct TpConfig {
  TpOp op = TpOp::kAgGemm;
  int world = 1;
  int64_t m = 0, n = 0, k = 0;  // full-layer sizes
  bool fused = true;            // false: the unfused composition (communication, then GEMMs / reduce)
  bool cpu = false;             // CPU executor (virtual ranks on host threads)
  double watchdog_seconds = 10.0;
  bool trace = false;
  int max_ctas = 0;
};

struct TpBufferShape {
  bool exists = false;
  int64_t rows = 0, cols = 0;  // bf16 elements, row-major, dense
};
TpBufferShape tp_buffer_shape(const TpConfig& cfg, TpBuffer b);

using TpDistributed = DistributedContext;  // see kosmos/distributed.h

// The plan(s) an op runs (one fused plan, or the two phases of the unfused composition), without
// allocating anything: for inspection (`kosmos plan --kind tp ...`). `ctas` sizes the task runs.
Status tp_plans(const TpConfig& cfg, int ctas, std::vector<plan::Plan>* plans);

// One TP layer on virtual ranks (all ranks in this process, one GPU or the CPU executor). It owns
// every rank's buffers; fill inputs through buffer(), run, read outputs.
class TpLayer {
 public:
  static Status plan(const TpConfig& cfg, std::unique_ptr<TpLayer>* out);
  // One rank of a multi-GPU (or one-rank NCCL) layer: this process runs only its rank's tasks;
  // (with cfg.cpu, one thread per rank on the CPU executor: the same protocol, for tests);
  // buffers and counters live in symmetric memory, signals and fences use .sys scope, and each
  // run() is preceded by the transport's barrier, so no rank's run e+1 signals reach a peer still
  // in run e. buffer(b, r) is valid for r == rank only.
  static Status plan_distributed(const TpConfig& cfg, const TpDistributed& dist, std::unique_ptr<TpLayer>* out);
  ~TpLayer();
  void* buffer(TpBuffer b, int rank) const;  // device memory (GPU) or host memory (CPU)
  size_t buffer_bytes(TpBuffer b) const;
  Status run(cudaStream_t stream = nullptr);     // fused: one launch; unfused: two
  Status finish(cudaStream_t stream = nullptr);
  Status read_trace(std::vector<runtime::TraceRecord>* out) const;
  size_t num_tasks() const;
  std::string describe() const;  // plan summary

 private:
  static Status plan_impl(const TpConfig& cfg, const TpDistributed* dist, std::unique_ptr<TpLayer>* out);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kosmos
