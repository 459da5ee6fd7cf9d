// The op kernel's task body: GEMM tiles, reduce tiles and the MoE kinds as the persistent runtime's
// task bodies (384 threads = 3 warpgroups, the GEMM engine's shape; ~193 KB dynamic shared memory
// for the GEMM ring). Built-in kinds (copy, checksum, ...) run on the same CTA shape. Included by
// the two translation units that instantiate the kernel's variants (op_kernel.cu: plain,
// op_kernel_merged.cu: merged tails), so that the build compiles them in parallel.
#pragma once
#include "kernels/gemm/gemm_tile.cuh"
#include "kernels/moe_tasks.cuh"
#include "kernels/reduce_tile.cuh"
#include "ops/gemm_body.h"
#include "ops/op_kernel.h"
#include "runtime/kernel_params.h"
#include "runtime/persistent_kernel.cuh"

namespace kosmos::ops {

static_assert(sizeof(GemmBodyParams) <= runtime::kBodyParamBytes, "GEMM problems do not fit the body blob");
static_assert(gemm_body_bytes(2) <= runtime::kSmallBodyParamBytes, "kosmos::Gemm and the W = 1 MoE forward (2 problems) take the small launch");

namespace detail {

// The runtime hook a GEMM tile's producer thread calls before loading A k-block (m_block, k_block).
struct RuntimeGemmWaiter {
  const runtime::TaskContext* ctx;
  const plan::Task* task;
  GemmWaitRule rule;
  uint32_t last = 0xFFFFFFFFu;
  bool all_arrived = false;
  // Returns true when it waited on a counter (the caller then fences the async proxy).
  __device__ __forceinline__ bool operator()(int m_block, int k_block) {
    if (rule.counter_base == GemmWaitRule::kNoWait || all_arrived) return false;
    if (rule.join_counter != GemmWaitRule::kNoWait && last == 0xFFFFFFFFu &&
        ctx->counter_complete(*task, rule.join_counter)) {
      all_arrived = true;  // every counter of the rule is complete: no more loads in this task
      return true;
    }
    const uint32_t c = rule.counter_base +
                       (rule.m_rows ? uint32_t(m_block) * kernels::gemm::kGemmBlockM / rule.m_rows : 0u) +
                       (rule.k_rows ? uint32_t(k_block) * kernels::gemm::kGemmBlockK / rule.k_rows : 0u);
    if (c == last) return false;
    last = c;
    ctx->wait_counter(*task, c, plan::kWaitAll);  // on abort it returns; the run is failing anyway
    return true;
  }
  // After the producer thread (thread 0) issued the task's last load: claim the CTA's next task
  // under the consumers' remaining k-blocks and epilogue (TaskContext::claim_next).
  __device__ __forceinline__ void loads_issued() const { ctx->claim_next(); }
  // Whether another task waits for this one's outputs (it signals counters): then its TMA stores
  // must have been written, not only read from shared memory, before the runtime's release.
  __device__ __forceinline__ bool outputs_awaited() const { return task->num_signals > 0; }
};

// kMergedTails: the variant with the merged-tail GEMM tile (gemm_tile), for plans that merge.
template <bool kMergedTails>
struct OpBody {
  static constexpr int kThreads = kOpKernelThreads;
  static constexpr size_t kSmemBytes = kernels::gemm::kGemmSmemBytesMax;
  __device__ __forceinline__ static void run(const plan::Task& t, const runtime::TaskContext& ctx, char* smem) {
    if (t.kind == plan::TaskKind::kGemmTile) {
      // The tile reads with TMA (the async proxy) what peers wrote with ordinary stores; the
      // runtime's claim-time acquire orders the generic proxy only, so thread 0 -- which made that
      // acquire and issues the TMA loads -- fences the async proxy after it.
      if (ctx.thread_idx == 0 && t.num_waits > 0) runtime::fence_proxy_async_global();
      const auto& body = *reinterpret_cast<const GemmBodyParams*>(ctx.body);
      const auto args = t.args<kernels::gemm::GemmTileArgs>();
      RuntimeGemmWaiter waiter{&ctx, &t, body.rules[args.problem]};
      kernels::gemm::gemm_tile<RuntimeGemmWaiter, kMergedTails>(body.problems[args.problem], args, smem, ctx.thread_idx,
                                                                  waiter);
    } else if (t.kind == plan::TaskKind::kReduceTile) {
      kernels::reduce_tile_device(t, ctx, kThreads);
    } else if (kernels::is_moe_kind(t.kind)) {
      kernels::moe_task_device(t, ctx, smem, kThreads);
    }
  }
};

inline bool op_supports(plan::TaskKind k) {
  return k < plan::TaskKind::kGemmTile || k == plan::TaskKind::kGemmTile || k == plan::TaskKind::kReduceTile ||
         kernels::is_moe_kind(k);
}

// The merging variant, defined in op_kernel_merged.cu.
const runtime::KernelVariant& merged_op_kernel_variant();

}  // namespace detail
}  // namespace kosmos::ops
