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
  // The k blocks [.., next_kb) of row block last_m map to counter `last` (met): the producer's
  // common case returns at the second test, without the counter's index -- integer divisions by the
  // rule's m_rows / k_rows -- recomputed before every k block's loads (thirty-seventh session:
  // DeepSeek-V3's fused GEMM1 tiles, 112 k blocks each under a per-slot rule, took 7-8 % more
  // cycles than in their own launch, whose tiles have no rule; docs/perf-notes.md).
  int last_m = -1, next_kb = 0;
  bool all_arrived = false;
  // Returns true when it waited on a counter (the caller then fences the async proxy). Called by the
  // producer thread before every k block's loads, k blocks in increasing order within a tile. A later
  // tile of the task with the same m_block (a run along N; a grouped-K run inside one group) starts
  // again at k block 0: its counters below next_kb were acquired by this thread already (here, or by
  // next_ready before carried loads), and counters only grow.
  __device__ __forceinline__ bool operator()(int m_block, int k_block) {
    if (rule.counter_base == GemmWaitRule::kNoWait || all_arrived) return false;
    if (m_block == last_m && k_block < next_kb) return false;
    if (rule.join_counter != GemmWaitRule::kNoWait && last == 0xFFFFFFFFu &&
        ctx->counter_complete(*task, rule.join_counter)) {
      all_arrived = true;  // every counter of the rule is complete: no more loads in this task
      return true;
    }
    const uint32_t c = gemm_wait_counter(rule, m_block, k_block);
    last_m = m_block;
    next_kb = gemm_wait_slice_end(rule, k_block);
    if (c == last) return false;
    last = c;
    ctx->wait_counter(*task, c, plan::kWaitAll);  // on abort it returns; the run is failing anyway
    return true;
  }
  // After the producer thread (thread 0) issued the task's last load: claim the CTA's next task
  // under the consumers' remaining k-blocks and epilogue (TaskContext::claim_next). With the ring
  // carry the claim helper (warp 1) claims instead: then only tell it to start, if claim_soon has
  // not already.
  __device__ __forceinline__ void loads_issued() const {
    if (carries()) helper_go();
    else ctx->claim_next();
  }
  // Whether another task waits for this one's outputs (it signals counters): then its TMA stores
  // must have been written, not only read from shared memory, before the runtime's release.
  __device__ __forceinline__ bool outputs_awaited() const {
    return task->num_signals > 0 && !(ctx->p->diag & runtime::kDiagNoWriteWait);
  }

  // ---- The ring carry (gemm_tile.cuh; docs/design/gemm.md, "Ring carry") ----------------------
  // Whether this launch carries: bodies may claim ahead (their context has the claim) and the
  // executor turned the carry on for it (GpuOptions::ring_carry: GEMM-only launches by default).
  __device__ __forceinline__ bool carries() const { return ctx->ahead != nullptr && ctx->p->ring_carry != 0; }
  __device__ __forceinline__ uint32_t slot() const { return uint32_t(task - ctx->p->tasks); }
  // Every thread, at the call's entry: the record the CTA's previous task left for this one, or null.
  __device__ __forceinline__ const void* carried_in() const {
    if (!carries()) return nullptr;
    const runtime::BodyCarry& c = ctx->ahead->carry;
    const uint32_t s = slot();
    return c.slot[0] == s ? c.words[0] : c.slot[1] == s ? c.words[1] : nullptr;
  }
  // The claim helper (twenty-ninth session's lead, thirtieth's change): with the carry, the CTA's
  // next task is claimed by warp 1, not by the producer thread. The claim -- the ticket's atomic,
  // the task, its waits and one acquire load each, its signal list -- and the next tile's slot
  // search are a chain of six or more dependent L2 round trips; run by the producer thread after
  // its last load, the chain outlasted the consumers' last k blocks and epilogue in fused layers
  // (whose tasks have waits and signals) and held the body's closing barrier (carried GEMM2 tiles
  // ~3 us longer). Warp 1 is idle during the tile: the producer thread tells it to start
  // kGemmClaimLead k blocks before its last load (claim_soon; loads_issued if the tile had fewer),
  // and after its last load waits for the answer (helper_wait), which is usually there.
  // handoff_reset: thread 0, at the body's start (before its first barrier).
  __device__ __forceinline__ void handoff_reset() const {
    if (!carries()) return;
    runtime::BodyCarry& c = ctx->ahead->carry;
    *reinterpret_cast<volatile uint32_t*>(&c.go) = 0u;
    *reinterpret_cast<volatile uint32_t*>(&c.done) = 0u;
  }
  __device__ __forceinline__ void helper_go() const {
    *reinterpret_cast<volatile uint32_t*>(&ctx->ahead->carry.go) = 1u;
  }
  // The producer thread, once, kGemmClaimLead k blocks before its last load: start the helper.
  __device__ __forceinline__ void claim_soon() {
    if (carries()) helper_go();  // (carries: a context with the claim, claim_ahead = 1)
  }
  // Warp 1's lane 0: waits for go, then claims the CTA's next task (the ticket, the task and its
  // waits once without spinning: TaskContext::claim_next).
  __device__ __forceinline__ void helper_claim() const {
    const volatile uint32_t* go = &ctx->ahead->carry.go;
    while (*go == 0u) __nanosleep(32);
    ctx->claim_next();
  }
  // Warp 1's lane 0: the answer (next_problem / next_flags, and the tile in carry_out()'s record),
  // then done. flags: kNextCarry (a carry candidate), kNextFence, kNextAlongN.
  static constexpr uint32_t kNextCarry = 1u, kNextFence = 2u, kNextAlongN = 4u;
  __device__ __forceinline__ void helper_post(uint32_t problem, uint32_t flags) const {
    runtime::BodyCarry& c = ctx->ahead->carry;
    c.next_problem = problem;
    c.next_flags = flags;
    __threadfence_block();
    *reinterpret_cast<volatile uint32_t*>(&c.done) = 1u;
  }
  // The producer thread, after its last load: waits for the helper's answer; returns its flags.
  __device__ __forceinline__ uint32_t helper_wait() const {
    const volatile uint32_t* done = &ctx->ahead->carry.done;
    while (*done == 0u) {
    }
    __threadfence_block();
    return ctx->ahead->carry.next_flags;
  }
  __device__ __forceinline__ uint32_t helper_problem() const { return ctx->ahead->carry.next_problem; }
  // Every lane of warp 1, after helper_claim and a __syncwarp: the CTA's next task's args
  // when it was claimed ahead, is ready, and is a GEMM tile of this launch. What the carry keeps of
  // it (NextTask) is three words: the producer runs at 56 registers, and the task, its problem and
  // its rule are re-derived where needed (shared memory and parameter space) rather than held.
  struct NextTask {
    uint32_t problem;
    uint32_t last;  // the last counter next_ready found complete
    bool fence;     // an acquire (the claim's waits, next_ready's) precedes the carried loads
  };
  __device__ __forceinline__ const plan::Task& next_task() const { return ctx->p->tasks[ctx->ahead->slot]; }
  __device__ __forceinline__ const kernels::gemm::GemmParams& problem(uint32_t i) const {
    return reinterpret_cast<const GemmBodyParams*>(ctx->body)->problems[i];
  }
  __device__ __forceinline__ bool next_gemm(kernels::gemm::GemmTileArgs& a, NextTask& nx) const {
    const uint32_t s = ctx->ahead->slot;
    if (s == runtime::kNotClaimed || s == runtime::kNoSlot || !ctx->ahead->ready) return false;
    const plan::Task& t = ctx->p->tasks[s];
    if (t.kind != plan::TaskKind::kGemmTile) return false;
    a = t.args<kernels::gemm::GemmTileArgs>();
    nx.problem = a.problem;
    nx.last = 0xFFFFFFFFu;
    nx.fence = t.num_waits > 0;
    return true;
  }
  // The producer thread: whether k block (m_block, k_block) of the next task's first tile may be
  // loaded now -- the counter operator() would wait on is complete (one acquire load, no spinning;
  // none once the rule's join counter was seen complete in this launch: counters only grow).
  __device__ __forceinline__ bool next_ready(NextTask& nx, int m_block, int k_block) const {
    const GemmWaitRule& r = reinterpret_cast<const GemmBodyParams*>(ctx->body)->rules[nx.problem];
    if (r.counter_base == GemmWaitRule::kNoWait) return true;
    nx.fence = true;
    uint64_t& joined = ctx->ahead->carry.flags;
    const uint64_t bit = nx.problem < 64 ? 1ull << nx.problem : 0ull;
    if (r.join_counter != GemmWaitRule::kNoWait) {
      if (joined & bit) return true;
      if (ctx->counter_complete(next_task(), r.join_counter)) {
        joined |= bit;
        return true;
      }
    }
    const uint32_t c = gemm_wait_counter(r, m_block, k_block);
    if (c == nx.last) return true;
    if (!ctx->counter_complete(next_task(), c)) return false;
    nx.last = c;
    return true;
  }
  // The producer thread: the record for the next task (the one this task's is not), then, once its
  // loads are issued, its owner.
  __device__ __forceinline__ int out_index() const { return ctx->ahead->carry.slot[0] == slot() ? 1 : 0; }
  __device__ __forceinline__ void* carry_out() const { return ctx->ahead->carry.words[out_index()]; }
  __device__ __forceinline__ void carry_commit() const { ctx->ahead->carry.slot[out_index()] = ctx->ahead->slot; }
};
static_assert(sizeof(kernels::gemm::detail::RingCarry) <= sizeof(runtime::BodyCarry::words[0]),
              "the ring carry's record fits the runtime's body carry");

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
