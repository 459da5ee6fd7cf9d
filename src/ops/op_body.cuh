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
  // under the consumers' remaining k-blocks and epilogue (TaskContext::claim_next), or complete the
  // claim claim_soon began.
  static constexpr uint32_t kNoTicket = 0xFFFFFFFFu;
  uint32_t ticket = kNoTicket;  // claim_soon's atomic; its result is first read here
  __device__ __forceinline__ void loads_issued() const {
    if (ticket != kNoTicket) ctx->finish_ticket(ticket);
    ctx->claim_next();
  }
  // A store thread (lane 0 of a consumer warp), at the end of the task: whether it must wait for its
  // TMA stores' writes before the runtime's release -- another task waits for them (this one
  // signals counters) and they are not left to the next task (late write waits: the producer
  // carried a successor with no waits left in its body; the runtime then holds this task's signals
  // until that task's store threads waited for these writes, before_stores).
  __device__ __forceinline__ bool outputs_awaited() const {
    if (task->num_signals == 0) return false;
    volatile runtime::LateWrites& late = runtime::s_late;
    if (late.enabled && late.ok_task == task) {
      late.unwaited_task = task;
      return false;
    }
    return true;
  }
  // A store thread, before its first store of the task: when the runtime holds an earlier task's
  // signals, waits for every earlier bulk write of its own (that task's; long done by now, a
  // mainloop later) and orders them before the release that follows this task.
  __device__ __forceinline__ static void before_stores() {
    if (static_cast<volatile runtime::LateWrites&>(runtime::s_late).pending) {
      asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
      runtime::fence_proxy_async_global();
    }
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
  // The producer thread, once, kGemmClaimLead k blocks before its last load: the claim's atomic now,
  // not waited for (TaskContext::issue_ticket; loads_issued completes the claim).
  __device__ __forceinline__ void claim_soon() {
    if (carries()) ticket = ctx->issue_ticket();  // (carries: a context with the claim, claim_ahead = 1)
  }
  // The producer thread, after its last load: whether the claimed task is ready now (its
  // non-deferred waits, once more without spinning when they were not at the claim).
  __device__ __forceinline__ void check_next() const { ctx->ahead_ready_now(); }
  // Every lane of the producer warp, after check_next and a __syncwarp: the CTA's next task's args
  // when it was claimed ahead, is ready, and is a GEMM tile of this launch. What the carry keeps of
  // it (NextTask) is three words: the producer runs at 56 registers, and the task, its problem and
  // its rule are re-derived where needed (shared memory and parameter space) rather than held.
  struct NextTask {
    uint32_t problem;
    uint32_t last;  // the last counter next_ready found complete
    bool fence;     // an acquire (the claim's waits, next_ready's) precedes the carried loads
    // What next_ready learnt of the body's waits (late write waits, carry_commit): kWaitsLeft, or
    // none left at all (the rule waits for nothing, or its join counter is complete), or none left
    // on the counter of the first tile's m block (a rule over M only, that counter complete).
    uint8_t settled;
  };
  static constexpr uint8_t kWaitsLeft = 0, kNoWaitsLeft = 1, kFirstCounterDone = 2;
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
    nx.settled = kWaitsLeft;
    return true;
  }
  // The producer thread: whether k block (m_block, k_block) of the next task's first tile may be
  // loaded now -- the counter operator() would wait on is complete (one acquire load, no spinning;
  // none once the rule's join counter was seen complete in this launch: counters only grow).
  __device__ __forceinline__ bool next_ready(NextTask& nx, int m_block, int k_block) const {
    const GemmWaitRule& r = reinterpret_cast<const GemmBodyParams*>(ctx->body)->rules[nx.problem];
    if (r.counter_base == GemmWaitRule::kNoWait) {
      nx.settled = kNoWaitsLeft;
      return true;
    }
    nx.fence = true;
    uint64_t& joined = ctx->ahead->carry.flags;
    const uint64_t bit = nx.problem < 64 ? 1ull << nx.problem : 0ull;
    if (r.join_counter != GemmWaitRule::kNoWait) {
      if ((joined & bit) || ctx->counter_complete(next_task(), r.join_counter)) {
        joined |= bit;
        nx.settled = kNoWaitsLeft;
        return true;
      }
    }
    const uint32_t c = r.counter_base + (r.m_rows ? uint32_t(m_block) * kernels::gemm::kGemmBlockM / r.m_rows : 0u) +
                       (r.k_rows ? uint32_t(k_block) * kernels::gemm::kGemmBlockK / r.k_rows : 0u);
    if (c == nx.last) return true;
    if (!ctx->counter_complete(next_task(), c)) return false;
    nx.last = c;
    if (k_block == 0 && r.k_rows == 0) nx.settled = kFirstCounterDone;
    return true;
  }
  // The producer thread: the record for the next task (the one this task's is not), then, once its
  // loads are issued, its owner.
  __device__ __forceinline__ int out_index() const { return ctx->ahead->carry.slot[0] == slot() ? 1 : 0; }
  __device__ __forceinline__ void* carry_out() const { return ctx->ahead->carry.words[out_index()]; }
  // one_counter: the carried task's tiles wait on one counter of the rule at most (a single tile, or
  // a run along N), which next_ready found complete. Then, when this task's outputs are awaited and
  // late write waits are on, its store threads may leave their writes to the successor: nothing
  // inside that body waits, so it finishes without this task's signals (deadlock-free).
  __device__ __forceinline__ void carry_commit(const NextTask& nx, bool one_counter) const {
    ctx->ahead->carry.slot[out_index()] = ctx->ahead->slot;
    // (The store threads check whether late write waits are on and this task's outputs awaited.)
    volatile runtime::LateWrites& late = runtime::s_late;
    if (nx.settled == kNoWaitsLeft || (nx.settled == kFirstCounterDone && one_counter)) late.ok_task = task;
  }
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
