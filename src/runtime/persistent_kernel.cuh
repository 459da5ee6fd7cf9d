// The persistent runtime loop: one cooperative launch, every CTA schedules itself.
//
// Per CTA (all threads; thread 0 is the scheduler thread):
//   loop:
//     thread 0: slot = claimed ahead ? that slot
//                    : first claim ? blockIdx.x : gridDim.x + atomicAdd(ticket, 1)
//                                                 -- claim the next task in plan order
//               stop if slot >= num_tasks or the abort flag is set
//     thread 0: for each wait: spin ld.acquire(counter) >= epoch * total + target  (watchdog)
//     __syncthreads                               -- the acquire now covers the whole CTA
//     all:      body (built-in kind, or Body::run for op kinds)
//     __syncthreads                               -- all payload stores precede the release below
//     thread 0: fence.acq_rel.{gpu|sys}; red.release.{gpu|sys}.add on every signalled counter
//   exit: the last CTA out (done == grid - 1) resets ticket/done and advances the epoch.
//
// Deadlock freedom (docs/design/runtime.md): the plan order is topological, claims follow it, and
// all CTAs are co-resident (cooperative launch), so the lowest unfinished claimed task always has
// its dependencies finished and makes progress.
//
// Claim-ahead: a body's thread 0 (or one helper thread for it) may call TaskContext::claim_next()
// once, when what is left of its task no longer needs it (the GEMM producer: after its last TMA
// load; the GEMM tile's warp 1 with the ring carry, a few k blocks before it). It takes the CTA's next
// ticket then, and checks that task's waits once without spinning, so that the claim's atomic and
// the dependent loads of the task, its waits and their counters overlap the body's tail instead of
// sitting between two tasks. Still deadlock-free: a CTA holds at most one claimed-ahead task, and
// only while its current task -- which has the lower slot -- runs; so the lowest unfinished claimed
// task is never one held ahead (its holder's current task would be lower and unfinished), and it
// makes progress as before. With the ring carry a GEMM tile's warp 1 claims for thread 0
// (claim_next, a few k blocks before the producer's last load) and the body hands the claimed task
// state in shared memory (AheadClaim::carry, the ring carry: docs/design/runtime.md); the argument
// is the same.
//
// Shared memory: a few scalars static; the dynamic part belongs to the task bodies.
#pragma once

#include <cstdint>

#include "runtime/kernel_params.h"
#include "runtime/sync.cuh"

namespace kosmos::runtime {

inline constexpr uint32_t kNoSlot = 0xFFFFFFFFu;
inline constexpr uint32_t kNotClaimed = 0xFFFFFFFEu;  // AheadClaim::slot: nothing claimed ahead

// KernelParamsHeader::claim_ahead
enum ClaimAhead : uint32_t {
  kClaimAheadOff = 0,
  kClaimAheadBodies = 1,  // bodies that call TaskContext::claim_next() (the GEMM tile) claim early
  kClaimAheadAlways = 2,  // every task claims its successor as it starts (the worst case; tests)
};

// KernelParamsHeader::publish: the release of a finished task's signals (after the CTA barrier).
enum PublishMode : uint32_t {
  kPublishThread0Release = 0,  // thread 0: fence.acq_rel, then red.release per signal
  kPublishThread0Relaxed = 1,  // thread 0: one MEMBAR in all -- red.release alone for one signal, else
                               // fence.acq_rel then red.relaxed per signal
  kPublishWarp1Relaxed = 2,    // warp 1 lane 0 (a thread that issues no TMA loads): as 1, while
                               // thread 0 goes on to the next task
};

// Signals of a task the CTA keeps in shared memory (more are read from global memory).
inline constexpr uint32_t kCachedSignals = 8;

// A task's signal list as the CTA keeps it (shared memory): read once, at claim time, so that the
// release after the body needs no dependent global loads (the task, then its signals: two L2 round
// trips on every dependency hop).
struct SignalList {
  uint32_t num, first;
  plan::Signal cached[kCachedSignals];  // the first kCachedSignals of signals[first, first + num)

  __device__ __forceinline__ void load(const KernelParamsHeader& p, const plan::Task& t) {
    num = t.num_signals;
    first = t.first_signal;
    for (uint32_t s = 0; s < num && s < kCachedSignals; ++s) cached[s] = p.signals[first + s];
  }
  __device__ __forceinline__ void copy(const SignalList& o) {
    num = o.num;
    first = o.first;
    for (uint32_t s = 0; s < num && s < kCachedSignals; ++s) cached[s] = o.cached[s];
  }
  __device__ __forceinline__ plan::Signal at(const KernelParamsHeader& p, uint32_t s) const {
    return s < kCachedSignals ? cached[s] : p.signals[first + s];
  }
};

// What a body hands to the CTA's next task (shared memory; opaque to the runtime): the GEMM tile's
// ring carry (gemm_tile.cuh, "Ring carry"). Two records, so that a body reads its own while it
// writes its successor's: record r is for task slot[r] (kNotClaimed: none).
inline constexpr uint32_t kBodyCarryWords = 16;
struct BodyCarry {
  uint32_t slot[2];
  alignas(8) uint32_t words[2][kBodyCarryWords];
  uint64_t flags;  // bodies' launch-long facts (the GEMM tile: problems whose operand joins were seen complete)
  // A body's handoff between two of its warps within one task (the GEMM tile: the producer thread
  // asks its claim helper, warp 1, to claim the next task -- go --, and waits for its answer --
  // done, next --; gemm_tile.cuh, "Ring carry"). Volatile accesses; reset by the body at its start.
  uint32_t go, done, next_problem, next_flags;
};

// The CTA's claimed-ahead task (shared memory; written and read by thread 0 only, except `carry` --
// and, in a launch with the ring carry, a GEMM tile's claim helper (warp 1, lane 0) claims for
// thread 0: it writes these fields during the body, before thread 0 reads them after the body's
// barrier).
struct AheadClaim {
  uint32_t slot;   // kNotClaimed, kNoSlot (claimed: the run has no more tasks) or a slot
  uint32_t ready;  // every non-deferred wait of `slot` was already satisfied when it was claimed
  SignalList signals;  // `slot`'s, read at claim time under the body's tail
  BodyCarry carry;
};

// Takes the next ticket and turns it into a slot (kNoSlot past the end). A complete run takes
// exactly num_tasks tickets: every CTA that ran a task makes one failing claim at its end, and the
// others were taken by successful claims. So the claim that takes ticket num_tasks - 1 is the run's
// last: every other CTA has made its last claim (and read the epoch at entry; with claim-ahead some
// may still run their last task, which reads neither again), and this one resets the ticket and
// advances the epoch for the next launch. An aborted run stops claiming early and is reset by the
// host's recovery (GpuExecutor::finish).
__device__ __forceinline__ uint32_t slot_of_ticket(const KernelParamsHeader& p, uint64_t epoch, uint32_t ticket) {
  if (ticket == p.num_tasks - 1) {
    p.state->ticket = 0;
    if (ld_relaxed_gpu(&p.state->abort) == 0u) p.state->epoch = epoch + 1;
  }
  const uint32_t slot = gridDim.x + ticket;
  return slot < p.num_tasks ? slot : kNoSlot;
}
__device__ __forceinline__ uint32_t claim_ticket(const KernelParamsHeader& p, uint64_t epoch) {
  return slot_of_ticket(p, epoch, atomicAdd(&p.state->ticket, 1u));
}

// What a task body sees of the runtime.
struct TaskContext {
  const KernelParamsHeader* p;
  const unsigned char* body;  // the launch's op-specific parameters (param space)
  uint64_t epoch;
  // (The SM and CTA, which only the error record names, are read there: held here they were live
  // through every body, and the GEMM producer's 56 registers spilled them once the ring carry came.)
  int thread_idx;
  AheadClaim* ahead = nullptr;  // shared memory; bodies only (null elsewhere)

  // Counters of one process's ranks are one flat array (no table load on the hop's critical path).
  __device__ __forceinline__ uint64_t* counter_ptr(uint32_t rank, uint32_t counter) const {
    return p->counters_flat ? p->counters_flat + size_t(rank) * p->num_counters + counter : p->counters[rank] + counter;
  }
  __device__ __forceinline__ void* buffer(uint32_t buffer, uint32_t rank) const {
    return p->buffers[size_t(buffer) * p->world + rank];
  }
  // Record a timeout (first one wins) and raise the abort flag.
  __device__ __forceinline__ void record_timeout(const plan::Task& t, uint32_t counter, uint64_t expected, uint64_t observed,
                                 uint64_t waited_ns, ErrorKind kind) const {
    if (atomicCAS(&p->error->kind, 0u, uint32_t(kind)) == 0u) {
      ErrorRecord& e = *p->error;
      e.rank = t.rank;
      e.sm = smid();
      e.cta = blockIdx.x;
      e.task_id = t.id;
      e.task_kind = uint32_t(t.kind);
      e.counter = counter;
      e.expected = expected;
      e.observed = observed;
      e.waited_ns = waited_ns;
      e.epoch = epoch;
    }
    __threadfence();
    atomicExch(&p->state->abort, 1u);
  }
  __device__ __forceinline__ bool aborted() const { return ld_relaxed_gpu(&p->state->abort) != 0u; }

  // The value counter (of task t's rank) reaches this run once `target` has been signalled into it
  // (plan::kWaitAll: everything signalled into it this run).
  __device__ __forceinline__ uint64_t counter_expected(const plan::Task& t, uint32_t counter, uint32_t target) const {
    const uint64_t total = p->totals[size_t(t.rank) * p->num_counters + counter];
    return epoch * total + (target == plan::kWaitAll ? total : target);
  }
  __device__ __forceinline__ uint64_t load_counter(const uint64_t* c) const {
    return p->sys_scope ? ld_acquire_sys(c) : ld_acquire_gpu(c);
  }

  // One acquire load, no spinning: whether counter (of task t's rank) has reached `target` of this
  // run (counter_complete: everything signalled into it this run).
  __device__ __forceinline__ bool counter_reached(const plan::Task& t, uint32_t counter, uint32_t target) const {
    return load_counter(counter_ptr(t.rank, counter)) >= counter_expected(t, counter, target);
  }
  __device__ __forceinline__ bool counter_complete(const plan::Task& t, uint32_t counter) const {
    return counter_reached(t, counter, plan::kWaitAll);
  }

  // Whether every non-deferred wait of task t is already met (one acquire load each, in order,
  // stopping at the first unmet; no spinning).
  __device__ __forceinline__ bool waits_met(const plan::Task& t) const {
    for (uint32_t w = 0; w < t.num_waits; ++w) {
      const plan::Wait wt = p->waits[t.first_wait + w];
      if (!wt.deferred() && !counter_reached(t, wt.counter, wt.value())) return false;
    }
    return true;
  }

  // Thread 0 of a body (or, with the ring carry, the GEMM tile's claim helper, warp 1: a thread that
  // issues no loads, so it may wait for the atomic -- the producer thread that waited for it stopped
  // issuing loads for an L2 round trip, and the ring ran dry: 4 % on a 10 us GEMM), at most once
  // per task: claims the CTA's next task now (see the header). Non-blocking: one atomic, the task's
  // wait list and one acquire load per wait, no spinning.
  __device__ __forceinline__ void claim_next() const {
    if (ahead == nullptr) return;
    if (p->claim_ahead == kClaimAheadOff || aborted()) return;
    const uint32_t slot = claim_ticket(*p, epoch);
    uint32_t ready = 1;
    if (slot != kNoSlot) ready = waits_met(p->tasks[slot]);
    if (slot != kNoSlot) {
      const plan::Task& next = p->tasks[slot];
      ahead->signals.load(*p, next);
    }
    ahead->slot = slot;
    ahead->ready = ready;
  }

  // Release a finished task's outputs: one fence, then a release-add on every counter it signals
  // (.sys when the plan spans GPUs). The caller has synchronised with every thread that wrote them
  // (a CTA barrier after the body).
  __device__ __forceinline__ void publish(const SignalList& list) const {
    const uint32_t num = list.num;
    if (num == 0) return;
    // Mode 0: a fence, then a release-add each. Modes 1 / 2: one MEMBAR in all -- a lone signal's
    // release-add is the whole release pattern (no fence, no L1 invalidation); several get one
    // fence, then relaxed adds.
    const bool relaxed = p->publish != kPublishThread0Release;
    const bool lone = relaxed && num == 1;
    if (!lone) {
      if (p->sys_scope) fence_acq_rel_sys(); else fence_acq_rel_gpu();
    }
    for (uint32_t s = 0; s < num; ++s) {
      const plan::Signal sg = list.at(*p, s);
      uint64_t* c = counter_ptr(sg.rank, sg.counter);
      if (relaxed && !lone) {
        if (p->sys_scope) red_add_relaxed_sys(c, sg.amount); else red_add_relaxed_gpu(c, sg.amount);
      } else {
        if (p->sys_scope) red_add_release_sys(c, sg.amount); else red_add_release_gpu(c, sg.amount);
      }
    }
  }

  // Called by ONE thread. Spins until counter (of task t's rank) >= epoch*total + target.
  // Returns false when the run is ending (timeout here, or abort raised elsewhere).
  __device__ __forceinline__ bool wait_counter(const plan::Task& t, uint32_t counter, uint32_t target) const {
    const uint64_t expected = counter_expected(t, counter, target);
    const uint64_t* c = counter_ptr(t.rank, counter);
    uint64_t v = load_counter(c);
    if (v >= expected) return true;
    const uint64_t t0 = globaltimer_ns();
    for (uint32_t spin = 1;; ++spin) {
      v = load_counter(c);
      if (v >= expected) return true;
      if ((spin & 63u) == 0u) {
        if (aborted()) return false;
        const uint64_t waited = globaltimer_ns() - t0;
        if ((spin & 4095u) == 0u && *p->host_abort) {
          record_timeout(t, counter, expected, v, waited, ErrorKind::kHostAbort);
          return false;
        }
        if (waited > p->watchdog_ns) {
          record_timeout(t, counter, expected, v, waited, ErrorKind::kTimeout);
          return false;
        }
        if (spin > 4096u) __nanosleep(100);
      }
    }
  }
};

// ---- built-in task bodies (all threads of the CTA) ---------------------------------------------
__device__ __forceinline__ void run_spin(const plan::Task& t, const TaskContext& ctx) {
  if (ctx.thread_idx != 0) return;
  const uint64_t ns = t.args<plan::SpinArgs>().ns;
  const uint64_t t0 = globaltimer_ns();
  while (globaltimer_ns() - t0 < ns) {
  }
}

__device__ __forceinline__ void run_copy(const plan::Task& t, const TaskContext& ctx, int num_threads) {
  const auto a = t.args<plan::CopyArgs>();
  const char* src = static_cast<const char*>(ctx.buffer(a.src_buffer, a.src_rank)) + a.src_offset;
  char* dst = static_cast<char*>(ctx.buffer(a.dst_buffer, a.dst_rank)) + a.dst_offset;
  uint64_t done = 0;
  if (((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst)) & 15u) == 0u) {
    const uint64_t vecs = a.bytes / 16;
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    uint64_t i = ctx.thread_idx;
    // 4 independent 16-byte loads in flight per thread
    for (; i + 3ull * num_threads < vecs; i += 4ull * num_threads) {
      uint4 v0 = s[i], v1 = s[i + num_threads], v2 = s[i + 2ull * num_threads], v3 = s[i + 3ull * num_threads];
      d[i] = v0;
      d[i + num_threads] = v1;
      d[i + 2ull * num_threads] = v2;
      d[i + 3ull * num_threads] = v3;
    }
    for (; i < vecs; i += num_threads) d[i] = s[i];
    done = vecs * 16;
  }
  for (uint64_t i = done + ctx.thread_idx; i < a.bytes; i += num_threads) dst[i] = src[i];
}

__device__ __forceinline__ void run_checksum(const plan::Task& t, const TaskContext& ctx, int num_threads) {
  __shared__ unsigned long long partial[32];
  const auto a = t.args<plan::ChecksumArgs>();
  const uint32_t* src =
      reinterpret_cast<const uint32_t*>(static_cast<const char*>(ctx.buffer(a.src_buffer, a.src_rank)) + a.offset);
  const uint64_t words = a.bytes / 4;
  unsigned long long sum = 0;
  for (uint64_t i = ctx.thread_idx; i < words; i += num_threads) sum += uint64_t(src[i]) * (2 * i + 1);
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, o);
  const int warp_idx = ctx.thread_idx / 32, lane_idx = ctx.thread_idx % 32;
  if (lane_idx == 0) partial[warp_idx] = sum;
  __syncthreads();
  if (ctx.thread_idx == 0) {
    unsigned long long total = 0;
    for (int w = 0; w < num_threads / 32; ++w) total += partial[w];
    *reinterpret_cast<unsigned long long*>(static_cast<char*>(ctx.buffer(a.out_buffer, a.out_rank)) + a.out_offset) =
        total;
  }
}

// Body: struct with `static constexpr int kThreads`, `static constexpr size_t kSmemBytes`, and
// `__device__ static void run(const plan::Task&, const TaskContext&, char* smem)` for op kinds.
template <class Body, size_t kBodyBytes = kBodyParamBytes>
__global__ void __launch_bounds__(Body::kThreads, 1)
    persistent_kernel(const __grid_constant__ KernelParamsWith<kBodyBytes> p) {
  extern __shared__ __align__(1024) char smem[];
  // The scheduler thread's state lives in shared memory, not in registers: nothing of the task
  // loop stays live across a body, so the bodies (the GEMM consumers above all) get every register
  // the compiler would otherwise have spilled for it (a spill in the GEMM mainloop cost ~6 %).
  __shared__ uint32_t s_slot;
  __shared__ uint32_t s_ok;
  __shared__ uint32_t s_claims;
  __shared__ uint64_t s_epoch;
  __shared__ uint64_t s_start_ns, s_start_cycles;
  // The running task's signals, read at claim time (before it waits for its inputs, so off the
  // critical path of a dependency chain) so that after the body the release needs no dependent
  // global loads: reading the task and then its signal list from global memory after the body put
  // two L2 round trips on every dependency hop (the hop went from 1.31 to 1.7-2.3 us when the task
  // stopped being copied into registers).
  // Two, by claim parity: with kPublishWarp1Relaxed warp 1 releases task i's list while thread 0
  // already writes task i + 1's.
  __shared__ SignalList s_current[2];
  __shared__ AheadClaim s_ahead;
#ifdef KOSMOS_GEMM_PROBE  // diagnostic build (gemm_probe): kernel entry/exit times per CTA
  if (threadIdx.x == 0) kernels::gemm::probe::mark_kernel(0);
#endif
  if (threadIdx.x == 0) {
    // The first claim is slot blockIdx.x (below): start fetching that task now, under the epoch
    // load, rather than one dependent round trip after it.
    if (blockIdx.x < p.num_tasks) asm volatile("prefetch.global.L1 [%0];" ::"l"(p.tasks + blockIdx.x));
    s_epoch = *reinterpret_cast<volatile uint64_t*>(&p.state->epoch);
    s_claims = 0;
    s_ahead.slot = kNotClaimed;
    s_ahead.carry.slot[0] = s_ahead.carry.slot[1] = kNotClaimed;
    s_ahead.carry.flags = 0;
  }
  __syncthreads();

  for (;;) {
    // Read afresh in every task (tid_now: volatile): a thread index kept from the kernel's entry,
    // and what the compiler derives from it there (a "thread 0" predicate, the checksum body's
    // per-warp shared address), lived through every body and were spilled once the GEMM producer's
    // 56 registers grew the ring carry.
    const int thread_idx = tid_now();
    if (thread_idx == 0) {
      const TaskContext ctx{&p, p.body, s_epoch, 0};
      uint32_t slot = kNoSlot;
      const uint32_t claims = s_claims++;
      if ((claims & 255u) == 255u && *p.host_abort) {
        plan::Task none{};
        none.id = kNoSlot;
        ctx.record_timeout(none, kNoSlot, 0, 0, 0, ErrorKind::kHostAbort);
      }
      const uint32_t ahead_slot = s_ahead.slot, ahead_ready = s_ahead.ready;  // not the whole struct
      s_ahead.slot = kNotClaimed;
      if (ahead_slot != kNotClaimed) {
        slot = ahead_slot;  // claim_next checked the abort flag before it claimed (one L2 load less here)
      } else if (!ctx.aborted()) {
        // The first claim of every CTA is slot blockIdx.x, the rest come from the ticket offset by
        // the grid: the same claims as if CTA i had won ticket i, without an atomic round trip on
        // the critical path of a one-wave plan.
        if (claims == 0) slot = blockIdx.x < p.num_tasks ? blockIdx.x : kNoSlot;
        else slot = claim_ticket(p, s_epoch);
      }
      s_slot = slot;
      bool ok = slot != kNoSlot;
      if (ok) {
        // A reference into global memory, not a copy: keeps 64 bytes of registers free.
        const plan::Task& task = p.tasks[slot];
        const bool was_ahead = ahead_slot == slot;
        SignalList& current = s_current[claims & 1u];
        if (was_ahead) current.copy(s_ahead.signals);  // read at claim time, under the previous body's tail
        else current.load(p, task);
        if (!(was_ahead && ahead_ready)) {
          for (uint32_t w = 0; w < task.num_waits && ok; ++w) {
            const plan::Wait wt = p.waits[task.first_wait + w];
            if (!wt.deferred()) ok = ctx.wait_counter(task, wt.counter, wt.value());
          }
        }
        if (ok && p.claim_ahead == kClaimAheadAlways) {
          // Test mode: the successor is claimed before this task's body even starts.
          const TaskContext ahead_ctx{&p, p.body, s_epoch, 0, &s_ahead};
          ahead_ctx.claim_next();
        }
        if (p.trace) {  // the trace's start stamps (read after the body, only when tracing)
          s_start_ns = globaltimer_ns();
          s_start_cycles = clock64();
        }
        if (ok && p.audit) {
          AuditRecord& a = p.audit[slot];
          a.start_seq = atomicAdd(reinterpret_cast<unsigned long long*>(&p.state->audit_seq), 1ull);
          a.cta = blockIdx.x;
        }
      }
      s_ok = ok;
    }
    __syncthreads();
    if (s_slot == kNoSlot) break;
    if (!s_ok) continue;  // the run is ending; abandon the task (its signals are never sent)

    {
      const TaskContext ctx{&p, p.body, s_epoch, thread_idx};
      const plan::Task& task = p.tasks[s_slot];
      switch (task.kind) {
        case plan::TaskKind::kNop: break;
        case plan::TaskKind::kSpin: run_spin(task, ctx); break;
        case plan::TaskKind::kCopy: run_copy(task, ctx, Body::kThreads); break;
        case plan::TaskKind::kChecksum: run_checksum(task, ctx, Body::kThreads); break;
        default: {
          // Laundered per task: otherwise the compiler hoists the bodies' shared-memory address
          // arithmetic (GEMM descriptors of every tile shape and layout) to kernel entry, keeps it
          // live across the task loop and spills it -- into the GEMM mainloop.
          // The thread index likewise: the values the bodies derive from it (per-thread shared
          // and global offsets of the GEMM epilogue and fragments) were computed once at kernel
          // entry, spilled (56 STL) and reloaded in every tile from local memory, which misses the
          // ~28 KB of L1 the GEMM ring leaves (ncu: 175k spill requests in one 4096x4096x1536 GEMM).
          char* body_smem = smem;
          asm volatile("" : "+l"(body_smem));
          int body_thread = thread_idx;
          asm volatile("" : "+r"(body_thread));
          const TaskContext body_ctx{&p, p.body, s_epoch, body_thread,
                                     p.claim_ahead == kClaimAheadBodies ? &s_ahead : nullptr};
          Body::run(task, body_ctx, body_smem);
          break;
        }
      }
    }
    // The finished task and its signal list, read before the barrier: thread 0 changes s_slot and
    // s_claims only at its next claim, after it.
    const uint32_t done_slot = s_slot;
    const uint32_t list_idx = (s_claims - 1u) & 1u;
    // The releasing thread: thread 0, or warp 1 (when the body has one), whose MEMBAR then waits for
    // no TMA load of thread 0's (the ring carry's loads of the next tile are in flight here). It
    // also takes the audit's end (before the release that lets the task's dependants start).
    const int publisher = p.publish == kPublishWarp1Relaxed && Body::kThreads > 32 ? 32 : 0;
    __syncthreads();

    // Read again rather than kept from the loop top: held through the body, the "thread 0" predicate
    // was spilled in the merged-tail variant (a word of packed predicates reloaded in its tiles).
    const int tid = tid_now();
    if (tid == 0 && p.trace) {  // thread 0 timed the start
      const plan::Task& task = p.tasks[done_slot];
      p.trace[done_slot] = TraceRecord{task.id,    uint16_t(task.kind), task.rank, smid(), blockIdx.x, s_start_ns,
                                       globaltimer_ns(), uint64_t(clock64()) - s_start_cycles};
    }
    if (tid == publisher) {
      if (p.audit) {
        AuditRecord& a = p.audit[done_slot];
        a.runs += 1;
        a.end_seq = atomicAdd(reinterpret_cast<unsigned long long*>(&p.state->audit_seq), 1ull);
      }
      const TaskContext ctx{&p, p.body, s_epoch, tid};
      ctx.publish(s_current[list_idx]);
    }
  }

  // Exit: nothing to do; the run's last claim reset the claim state (above). (Until the fourth
  // session every CTA counted itself out on a second atomic and the last one reset the state
  // between fences: from the last tile's end to the last CTA's exit took 2.5 us, now 1.4 us, by
  // gemm_probe on the H200.)
#ifdef KOSMOS_GEMM_PROBE
  if (threadIdx.x == 0) kernels::gemm::probe::mark_kernel(1);
#endif
}

// The built-in variant: no op kinds.
struct BuiltinBody {
  static constexpr int kThreads = 256;
  static constexpr size_t kSmemBytes = 0;
  __device__ static void run(const plan::Task&, const TaskContext&, char*) {}
};

}  // namespace kosmos::runtime
