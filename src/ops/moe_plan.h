// Internal to the MoE layer (src/ops/moe_*.cpp): one direction of the layer as a list of tasks
// tagged with their phase, from which moe_layer.cpp builds the fused plan (every wait and signal,
// one launch) and the unfused composition (one launch per phase, no counters, no GEMM wait rules).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kosmos/moe.h"
#include "kosmos/plan.h"
#include "ops/op_runner.h"
#include "ops/rank_buffers.h"

namespace kosmos::ops::moe {

struct TaskRec {
  plan::TaskKind kind = plan::TaskKind::kNop;
  uint32_t rank = 0;
  uint32_t args[plan::kTaskArgWords] = {};
  std::vector<plan::Wait> waits;
  std::vector<plan::Signal> signals;
  int phase = 0;
};

struct DirectionPlan {
  std::string name;  // plan name ("moe_forward", "moe_backward")
  std::vector<TaskRec> tasks;
  std::vector<GemmProblemSpec> problems;
  uint32_t num_counters = 0;
  int num_phases = 0;
  std::string summary;
};

// The backward pass of `cfg` (cfg.backward set, validated) over the layer's buffers `mem`; `ctas`
// sizes the tasks (as for the forward). Design: docs/design/moe.md.
Status plan_backward(const MoeConfig& cfg, const RankBuffers& mem, int ctas, DirectionPlan* out);

// rows of every receive-side buffer of the backward: W T k rows plus up to 63 padding rows per
// local expert (group offsets padded to the GEMM k block).
inline int64_t backward_rows(const MoeConfig& c) {
  return int64_t(c.world) * c.tokens * c.top_k + int64_t(c.num_experts / c.world) * (kernels::gemm::kGemmBlockK - 1);
}

}  // namespace kosmos::ops::moe
