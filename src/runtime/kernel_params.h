// Launch parameters of the persistent kernel (grid-invariant, passed as __grid_constant__).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kosmos/plan.h"
#include "kosmos/runtime_types.h"

namespace kosmos::runtime {

// Room for op-specific parameters (e.g. GEMM tensor maps, 128 B each). Kernel parameters may be
// up to 32 KB on sm_90 with CUDA 12.1+. Every launch copies the whole parameter block, so a
// variant may also be compiled with a small blob (kSmallBodyParamBytes) and the executor launches
// that one whenever the op's body data fits (measured on the H200: a single launch with 16 KB of
// parameters took ~1.8 us longer than with 64 B). 28 KB since the GEMM problems carry a C and a
// merged-tail A tensor map (40 x 640 B, ops::kMaxGemmProblems; a launch's parameters may take 32,764 B).
inline constexpr size_t kBodyParamBytes = 28672;
inline constexpr size_t kSmallBodyParamBytes = 2048;

struct KernelParamsHeader {
  const plan::Task* tasks;      // [num_tasks] in claim order
  const plan::Wait* waits;
  const plan::Signal* signals;
  uint64_t* const* counters;    // [world] -> that rank's [num_counters] array (a peer's across GPUs)
  uint64_t* counters_flat;      // one process, all ranks local: [world][num_counters] (null: use the table)
  const uint64_t* totals;       // [world][num_counters] per-run sums
  RunState* state;
  ErrorRecord* error;
  const volatile uint32_t* host_abort;  // mapped pinned host memory
  void* const* buffers;         // [num_buffers][world]
  TraceRecord* trace;           // [num_tasks] or null
  AuditRecord* audit;           // [num_tasks] or null
  uint32_t num_tasks;
  uint32_t world;
  uint32_t num_counters;
  uint32_t num_buffers;
  uint64_t watchdog_ns;
  uint32_t sys_scope;           // 1: counters/buffers span GPUs, use .sys fences and atomics
  uint32_t claim_ahead;         // ClaimAhead: 0 off, 1 bodies may claim their CTA's next task, 2 every task does (tests)
  uint32_t ring_carry;          // 1: a GEMM tile loads its CTA's next (claimed-ahead, ready) GEMM tile's first k blocks
  uint32_t publish;             // PublishMode: who releases a finished task's signals, and how
  uint32_t diag;                // measurement switches (kDiag*; KOSMOS_DIAG), 0 in normal runs
};

// KernelParamsHeader::diag bits -- for measurements only, never set by the library:
// kDiagNoWriteWait: a GEMM tile whose outputs are awaited waits only for its TMA stores' reads
// (as one nobody waits for), not their writes, before the release. The executor sets it only in
// launches without waits (MoeConfig::unfused_keep_signals: signals nobody waits for; the launch's
// end completes the writes), where it is safe: it times the write wait's share of the release.
inline constexpr uint32_t kDiagNoWriteWait = 1u;

// The launch parameters: the header, then op-specific parameters (e.g. GEMM tensor maps) by value:
// TMA descriptors in param space. (Measured 2026-12-02: moving them to global memory made the GEMM
// op slower, 0.81x vs 0.87x of cuBLAS geomean, so they stay here; see docs/perf-notes.md.)
// Both sizes share the layout of their prefix, so the executor keeps one KernelParams and a
// launch of the small variant passes its first sizeof(KernelParamsSmall) bytes.
template <size_t kBodyBytes>
struct KernelParamsWith : KernelParamsHeader {
  alignas(128) unsigned char body[kBodyBytes];
};
using KernelParams = KernelParamsWith<kBodyParamBytes>;
using KernelParamsSmall = KernelParamsWith<kSmallBodyParamBytes>;
// Both end with their 128-aligned body after the same header, so the body starts at one offset:
static_assert(sizeof(KernelParams) <= 32764, "a launch takes at most 32,764 B of parameters");
static_assert(sizeof(KernelParams) - sizeof(KernelParamsSmall) == kBodyParamBytes - kSmallBodyParamBytes,
              "one prefix layout for both sizes");

}  // namespace kosmos::runtime
