// Records shared by the host and the device executors (plain-old-data, same layout everywhere).
#pragma once

#include <cstdint>

namespace kosmos::runtime {

// One executed task (opt-in trace). Times are nanoseconds: %globaltimer on the GPU, steady_clock
// on the CPU executor. `sm` is the SM id on the GPU and the worker index on the CPU. `cycles`: the
// SM's clock cycles over the same span (%clock64; 0 on the CPU), so cycles / ns is the SM clock the
// task ran at (the GEMM phases run power-throttled, thirty-fifth session).
struct TraceRecord {
  uint32_t task_id;
  uint16_t kind;
  uint16_t rank;
  uint32_t sm;
  uint32_t cta;
  uint64_t start_ns;
  uint64_t end_ns;
  uint64_t cycles = 0;
};
static_assert(sizeof(TraceRecord) == 40);

// Per task (opt-in audit, for the protocol tests): how often it ran, and stamps from one global
// sequence taken after its waits completed (start) and before it signalled (end).
struct AuditRecord {
  uint32_t runs;
  uint32_t cta;
  uint64_t start_seq;
  uint64_t end_seq;
  uint64_t reserved;
};
static_assert(sizeof(AuditRecord) == 32);

enum class ErrorKind : uint32_t { kNone = 0, kTimeout = 1, kHostAbort = 2 };

// Written once per run by the first CTA that gives up (device) or worker (CPU).
struct ErrorRecord {
  uint32_t kind;      // ErrorKind
  uint32_t rank;      // rank of the waiting task
  uint32_t sm;
  uint32_t cta;
  uint32_t task_id;
  uint32_t task_kind;
  uint32_t counter;   // counter waited on (or ~0u)
  uint32_t reserved;
  uint64_t expected;  // value waited for, absolute (epoch * total + target)
  uint64_t observed;  // last value read
  uint64_t waited_ns;
  uint64_t epoch;
};

// Scheduler state in device memory; persists across runs (never reset by the host, except to
// recover after an aborted run).
struct RunState {
  uint32_t ticket;    // next position in the task order to claim
  uint32_t unused;    // (was a count of CTAs that left the loop; the last claim resets instead)
  uint64_t epoch;     // completed runs
  uint64_t audit_seq;
  uint32_t abort;     // set by a CTA whose wait timed out; every CTA polls it
  uint32_t reserved;
};

}  // namespace kosmos::runtime
