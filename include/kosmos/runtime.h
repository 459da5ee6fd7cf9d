// kosmos::runtime — executes a Plan: on the GPU as one persistent cooperative launch, or on host
// threads (the CPU executor, reference for the protocol and the GPU-less path).
//
// Both executors: claim tasks in the plan's order with one global ticket; a claimed task waits on
// its counters (acquire), runs its body, then release-adds its signals. Counters are monotonic
// over runs (targets scaled by the epoch), so run() needs no host-side reset and is replayable
// from a CUDA graph. Every wait has a watchdog budget; on expiry the run ends everywhere and the
// returned Status names rank, SM/worker, task, counter, expected and observed values.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "kosmos/plan.h"
#include "kosmos/runtime_types.h"
#include "kosmos/status.h"

namespace kosmos::runtime {

// Formats an error record as the message the host call returns.
std::string describe(const ErrorRecord& e, const plan::Plan& plan);
// After a failed run with peers in other processes (GpuExecutor::finish, CpuExecutor::run): the
// text appended to that run's error, and the error every later run() returns.
inline constexpr const char* kFailedAcrossProcessesNote =
    " (peers run in other processes: this executor runs no more; re-create the layer on every rank)";
Status refused_after_failure_across_processes(const std::string& failure);

// ---- CPU executor --------------------------------------------------------------------------------
struct CpuOptions {
  uint32_t num_workers = 4;          // virtual CTAs, one host thread each
  double watchdog_seconds = 10.0;
  bool stress = false;               // random delays and a random valid claim order
  uint64_t seed = 1;
  uint32_t max_delay_us = 20;        // stress: random sleep before claims, inside waits, before signals
  bool trace = false;
  bool audit = false;
  // Every task claims its worker's next task as it starts (GpuOptions::claim_ahead = 2: the
  // scheduler's worst case for the claim-ahead rule).
  bool claim_ahead = false;
};

class CpuExecutor;
// Body of a task kind on the host (kinds beyond the built-in ones, e.g. GEMM tiles).
struct HostTaskContext {
  const CpuExecutor* executor;
  uint32_t worker;
  // Spins until the task's rank's counter reaches `target` of this run (the GEMM tile's per-k-block
  // hook). Returns false if the run is ending on an error.
  std::function<bool(uint32_t counter, uint32_t target)> wait;
};
using HostTaskFn = std::function<void(const plan::Task&, HostTaskContext&)>;

class CpuExecutor {
 public:
  static Status create(const plan::Plan& plan, const CpuOptions& options, std::unique_ptr<CpuExecutor>* out);
  ~CpuExecutor();

  Status bind_buffer(uint32_t buffer, uint32_t rank, void* ptr);  // external buffers
  void* buffer(uint32_t buffer, uint32_t rank) const;
  void set_host_body(plan::TaskKind kind, HostTaskFn fn);

  // Multi-process protocol on one machine (tests of the distributed path): counters of rank r live
  // at counter_arrays[r] (shared with the other "processes"' executors); only ranks marked local
  // are zeroed here (now and on recovery).
  Status use_shared_counters(const std::vector<std::atomic<uint64_t>*>& counter_arrays, const std::vector<bool>& local_ranks);
  Status run();          // blocks until the run finished or failed
  void abort();          // from any thread: the current run ends with kAborted
  uint64_t epoch() const { return epoch_; }
  uint64_t counter(uint32_t rank, uint32_t c) const;
  const std::vector<TraceRecord>& trace() const { return trace_; }
  const std::vector<AuditRecord>& audit() const { return audit_; }
  const plan::Plan& plan() const { return plan_; }

 private:
  CpuExecutor() = default;
  void worker_loop(uint32_t worker, const std::vector<uint32_t>& order);
  bool wait_counter(const plan::Task& t, uint32_t worker, uint32_t counter, uint32_t target);
  void run_builtin(const plan::Task& t, uint32_t worker);
  void fail(const ErrorRecord& rec);

  plan::Plan plan_;
  CpuOptions options_;
  std::atomic<uint64_t>& counter_ref(uint32_t rank, uint32_t c) const { return counter_arrays_[rank][c]; }
  std::unique_ptr<std::atomic<uint64_t>[]> counters_;  // [world][num_counters], unless shared
  std::vector<std::atomic<uint64_t>*> counter_arrays_;  // [world] -> that rank's counters
  std::vector<bool> local_ranks_;
  std::string failed_across_processes_;  // a run with peers elsewhere failed: no more runs
  std::vector<std::vector<uint8_t>> owned_;  // [buffer*world + rank]
  std::vector<void*> buffers_;               // [buffer*world + rank]
  std::vector<HostTaskFn> bodies_;
  std::atomic<uint32_t> ticket_{0};
  std::atomic<uint64_t> seq_{0};
  std::atomic<bool> abort_{false};
  std::atomic<bool> host_abort_{false};
  std::atomic<bool> failed_{false};
  ErrorRecord error_{};
  uint64_t epoch_ = 0;
  std::vector<TraceRecord> trace_;
  std::vector<AuditRecord> audit_;
  std::vector<uint32_t> order_;
  uint64_t run_count_ = 0;
};

// ---- GPU executor --------------------------------------------------------------------------------
// A compiled persistent kernel: the runtime loop instantiated with a set of task bodies. The
// built-in variant runs nop/spin/copy/checksum; ops with more kinds (GEMM tiles) bring their own.
struct KernelVariant {
  const char* name;
  const void* kernel;         // __global__ function taking (KernelParams)
  int threads;                // CTA size
  size_t dynamic_smem_bytes;  // per CTA
  bool (*supports)(plan::TaskKind);
  // The same kernel taking (KernelParamsSmall), or null: launched instead whenever the body
  // parameters set on the executor fit its smaller blob (a cheaper launch).
  const void* kernel_small_params = nullptr;
};
const KernelVariant& builtin_kernel_variant();

struct GpuOptions {
  double watchdog_seconds = 10.0;
  bool trace = false;
  bool audit = false;
  int max_ctas = 0;  // 0: every SM x occupancy (all co-resident)
  const KernelVariant* variant = nullptr;  // nullptr: built-in
  // When a CTA claims its next task: 0 after the current one ends; 1 (default) GEMM tiles claim it
  // once their last load is issued, under their last k-blocks and epilogue; 2 every task claims its
  // successor as it starts (the worst case for the scheduler; tests). The environment variable
  // KOSMOS_CLAIM_AHEAD=0|1|2, when set, overrides this (A/B measurements).
  uint32_t claim_ahead = 1;
  // Ring carry (with claim_ahead = 1): a GEMM tile whose CTA's next task is a ready GEMM tile of the
  // same tile shape and operand majors loads that tile's first k blocks (up to a ring) under its own
  // last k blocks and epilogue, and hands the ring over; the tile's warp 1 claims that next task
  // (docs/design/gemm.md, "Ring carry"). 2 (default): in every launch; 1: in launches of GEMM tiles
  // alone (kosmos::Gemm, a composition's GEMM launches; the default until the thirtieth session,
  // when the claim still ran on the producer thread and fused layers lost 3-5 % with the carry);
  // 0: never. KOSMOS_RING_CARRY=0|1|2, when set, overrides this (A/B measurements).
  uint32_t ring_carry = 2;
  // Who releases a finished task's signals after the CTA barrier: 0 thread 0, a fence then a
  // red.release per signal (a MEMBAR each); 1 thread 0, one MEMBAR in all (a lone signal's
  // red.release, else one fence then relaxed adds); 2 (default) as 1 from warp 1's first thread
  // while thread 0 starts the next task. Measured on the H100 (twenty-ninth session, fused MoE
  // layers at T = 4096, processes alternated): 2 faster than 0 in all six pairs, 0.4-1.3 %.
  // KOSMOS_PUBLISH=0|1|2 overrides it.
  uint32_t publish = 2;
};

class GpuExecutor {
 public:
  static Status create(const plan::Plan& plan, const GpuOptions& options, std::unique_ptr<GpuExecutor>* out);
  ~GpuExecutor();

  Status bind_buffer(uint32_t buffer, uint32_t rank, void* device_ptr);
  void* buffer(uint32_t buffer, uint32_t rank) const;
  // Op-specific, grid-invariant kernel parameters (e.g. GEMM tensor maps), copied by value into
  // the launch parameters of the following runs (host only; capturable). At most 16 KB.
  Status set_body_params(const void* data, size_t bytes, cudaStream_t stream = nullptr);

  Status run(cudaStream_t stream);     // enqueues one run; never synchronises; capturable
  Status finish(cudaStream_t stream);  // synchronises, reports a watchdog/abort error, recovers
  // Multi-GPU: counters of rank r live at counter_arrays[r] (symmetric memory; peers' arrays are
  // LSA pointers); signals and fences switch to .sys scope. Arrays of local ranks are zeroed.
  Status use_transport(const std::vector<uint64_t*>& counter_arrays, const std::vector<bool>& local_ranks);
  Status abort();                      // host abort flag: running waits give up promptly
  Status clear_abort();

  int grid_size() const { return grid_; }
  int ctas_per_sm() const { return ctas_per_sm_; }
  int num_sms() const { return num_sms_; }
  Status read_trace(std::vector<TraceRecord>* out) const;
  Status read_audit(std::vector<AuditRecord>* out) const;
  Status read_epoch(uint64_t* out) const;
  Status read_counter(uint32_t rank, uint32_t counter, uint64_t* out) const;
  const plan::Plan& plan() const { return plan_; }

 private:
  GpuExecutor() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  plan::Plan plan_;
  int grid_ = 0, ctas_per_sm_ = 0, num_sms_ = 0;
};

// Device facts for `kosmos info` and the benchmarks' JSON.
struct DeviceInfo {
  bool available = false;
  std::string name, driver, runtime;
  int sms = 0, cc_major = 0, cc_minor = 0, clock_mhz = 0, mem_clock_mhz = 0, mem_bus_bits = 0;
  size_t memory_bytes = 0, l2_bytes = 0;
  // Peak DRAM bandwidth from the memory clock and bus width (two transfers per clock), bytes/s; 0
  // when the device did not report them.
  double peak_mem_bytes_per_s() const { return 2.0 * mem_clock_mhz * 1e6 * mem_bus_bits / 8.0; }
  std::string error;
};
DeviceInfo query_device(int device = 0);

}  // namespace kosmos::runtime
