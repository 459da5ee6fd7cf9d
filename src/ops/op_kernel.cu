// The op kernel variant: the persistent runtime loop with GEMM tiles and reduce tiles as task
// bodies (384 threads = 3 warpgroups, the GEMM engine's shape; ~193 KB dynamic shared memory for
// the GEMM ring). Built-in kinds (copy, checksum, ...) run on the same CTA shape.
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

namespace {

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

bool op_supports(plan::TaskKind k) {
  return k < plan::TaskKind::kGemmTile || k == plan::TaskKind::kGemmTile || k == plan::TaskKind::kReduceTile ||
         kernels::is_moe_kind(k);
}

}  // namespace

const runtime::KernelVariant& op_kernel_variant(bool merged_tails) {
  using Plain = OpBody<false>;
  static const runtime::KernelVariant v{
      "ops", reinterpret_cast<const void*>(&runtime::persistent_kernel<Plain>), Plain::kThreads, Plain::kSmemBytes,
      &op_supports,
      reinterpret_cast<const void*>(&runtime::persistent_kernel<Plain, runtime::kSmallBodyParamBytes>)};
  // With merged tails: the large parameter blob only (one kernel less to compile; measured ~4 us
  // more per launch than the small blob on an H100).
  using Merged = OpBody<true>;
  static const runtime::KernelVariant m{"ops (merged tails)", reinterpret_cast<const void*>(&runtime::persistent_kernel<Merged>),
                                        Merged::kThreads, Merged::kSmemBytes, &op_supports, nullptr};
  return merged_tails ? m : v;
}

}  // namespace kosmos::ops

#ifdef KOSMOS_GEMM_PROBE
// Diagnostic build of this translation unit (gemm_probe): host access to its own probe marks.
namespace kosmos::ops::probe_access {
cudaError_t reset() {
  static int zero[kernels::gemm::probe::kMaxCtas][2];
  return cudaMemcpyToSymbol(kernels::gemm::probe::g_seq, zero, sizeof(zero));
}
cudaError_t read(void* marks, void* seq, void* kernel_ns) {
  cudaError_t e = cudaMemcpyFromSymbol(marks, kernels::gemm::probe::g_marks, sizeof(kernels::gemm::probe::g_marks));
  if (e == cudaSuccess) e = cudaMemcpyFromSymbol(seq, kernels::gemm::probe::g_seq, sizeof(kernels::gemm::probe::g_seq));
  if (e == cudaSuccess)
    e = cudaMemcpyFromSymbol(kernel_ns, kernels::gemm::probe::g_kernel_ns, sizeof(kernels::gemm::probe::g_kernel_ns));
  return e;
}
}  // namespace kosmos::ops::probe_access
#endif
