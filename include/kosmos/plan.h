// kosmos::plan — plain-old-data task graphs, built and validated on the host (no CUDA calls).
//
// A Plan is a list of Tasks in an execution order that is a topological order of the graph the
// counters induce. Each task waits on counters of ITS OWN rank (wait until value >= target) and
// signals counters on any rank (add amount). Targets are per run: a run with epoch e waits for
// e * total(rank, counter) + target, where total is the sum of all amounts signalled into that
// counter in one run. So counters are monotonic across runs and never reset by the host.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "kosmos/status.h"

#if defined(__CUDACC__)
#define KOSMOS_HOST_DEVICE __host__ __device__
#else
#define KOSMOS_HOST_DEVICE
#endif

namespace kosmos::plan {

enum class TaskKind : uint16_t {
  kNop = 0,        // does nothing (scheduling tests, pure dependency joins)
  kSpin = 1,       // busy-waits SpinArgs::ns nanoseconds
  kCopy = 2,       // copies CopyArgs::bytes between two buffers (any ranks)
  kChecksum = 3,   // writes a 64-bit checksum of a buffer range into another buffer
  kGemmTile = 16,  // one output tile of a GEMM (kernels/gemm); payload GemmTileArgs
  kReduceTile = 17,  // fixed-order sum of `world` bf16 tiles into one or all ranks; ReduceArgs
  kMoeRoute = 18,    // MoE: count a rank's (token, slot) entries per expert (kernels/moe_tasks)
  kMoeOffsets = 19,  // MoE: a rank's receive layout (group sizes and offsets) from all counts
  kMoeDispatch = 20, // MoE: push token rows (and router weights) to the experts' ranks
  kMoeCombine = 21,  // MoE: per token, sum its k expert outputs in slot order
  kMoeSwigluBackward = 22,  // MoE backward: SwiGLU gradient of received rows, router-weight gradient, zero padding
  kNumKinds,
};
const char* to_string(TaskKind kind);
bool is_known(TaskKind kind);

// Wait until this task's rank's counter `counter` >= epoch * total + target.
// kWaitAll as target: everything signalled into the counter this run (target = total).
// kDeferredWait or-ed into target: the task body waits (e.g. a GEMM tile per k-block, inside its
// pipeline); the runtime loop skips it, the planner still orders by it, the CPU executor waits
// it before the body.
inline constexpr uint32_t kDeferredWait = 1u << 31;
inline constexpr uint32_t kWaitAll = kDeferredWait - 1;
struct Wait {
  uint32_t counter;
  uint32_t target;
  KOSMOS_HOST_DEVICE uint32_t value() const { return target & ~kDeferredWait; }
  KOSMOS_HOST_DEVICE bool deferred() const { return (target & kDeferredWait) != 0; }
};
static_assert(sizeof(Wait) == 8);

// After the task's stores are visible: counters[rank][counter] += amount (release).
struct Signal {
  uint32_t counter;
  uint16_t rank;
  uint16_t amount;
};
static_assert(sizeof(Signal) == 8);

inline constexpr int kTaskArgWords = 10;

struct alignas(16) Task {
  TaskKind kind;
  uint16_t rank;          // rank whose CTAs run this task (virtual ranks share one launch)
  uint16_t num_waits;
  uint16_t num_signals;
  uint32_t first_wait;    // index into Plan::waits
  uint32_t first_signal;  // index into Plan::signals
  uint32_t id;            // index in the order the builder added it: the task's stable name
  uint32_t reserved;
  uint32_t arg[kTaskArgWords];  // kind-specific payload, see *Args below

  template <class Args>
  KOSMOS_HOST_DEVICE Args args() const {
    static_assert(sizeof(Args) <= sizeof(arg) && std::is_trivially_copyable_v<Args>);
    Args a;
    std::memcpy(&a, arg, sizeof(Args));
    return a;
  }
};
static_assert(sizeof(Task) == 64, "Task must stay one 64-byte descriptor");
static_assert(alignof(Task) == 16);

// ---- payloads ----------------------------------------------------------------------------------
struct SpinArgs {
  uint64_t ns;
};
// Buffers are named by (buffer id, rank); offsets and sizes in bytes.
struct CopyArgs {
  uint16_t src_buffer, src_rank, dst_buffer, dst_rank;
  uint64_t src_offset, dst_offset, bytes;
};
static_assert(sizeof(CopyArgs) <= kTaskArgWords * 4);
// out (8 bytes at out_offset) = sum over 32-bit words w_i of (w_i * (2*i + 1)) mod 2^64, i counted
// from `offset`. Position-weighted so a misplaced word changes the result.
struct ChecksumArgs {
  uint16_t src_buffer, src_rank, out_buffer, out_rank;
  uint64_t offset, bytes, out_offset;
};
static_assert(sizeof(ChecksumArgs) <= kTaskArgWords * 4);

// ---- buffers -----------------------------------------------------------------------------------
struct BufferDesc {
  std::string name;
  uint64_t bytes_per_rank = 0;
  bool external = false;  // bound by the caller (bind_buffer) rather than allocated by the executor
};

// ---- the plan ----------------------------------------------------------------------------------
struct Plan {
  std::string name;
  uint32_t world = 1;
  uint32_t num_counters = 0;            // per rank
  std::vector<Task> tasks;              // execution order (topological)
  std::vector<Wait> waits;
  std::vector<Signal> signals;
  std::vector<uint64_t> counter_totals;  // [world][num_counters]: sum of amounts per run
  std::vector<uint64_t> external_totals; // [world][num_counters]: the part arriving from outside
  std::vector<BufferDesc> buffers;

  uint64_t total(uint32_t rank, uint32_t counter) const {
    return counter_totals[size_t(rank) * num_counters + counter];
  }
  const Wait* waits_of(const Task& t) const { return waits.data() + t.first_wait; }
  const Signal* signals_of(const Task& t) const { return signals.data() + t.first_signal; }
};

// A valid execution order of `plan` chosen with a seeded random tie-break among ready tasks
// (for the stress modes). Returns indices into plan.tasks.
std::vector<uint32_t> random_topological_order(const Plan& plan, uint64_t seed);

// The part of a multi-rank plan that one process runs (one process per GPU): the tasks of `rank`
// in the same relative order (a restriction of one global topological order, so the deadlock
// argument still holds across processes); signals that other ranks' tasks send into this
// rank's counters become external arrivals. Counter totals are unchanged.
Plan restrict_to_rank(const Plan& plan, uint32_t rank);

// Human-readable dump (kosmos plan --dump).
std::string dump(const Plan& plan, size_t max_tasks = SIZE_MAX);

// ---- building ----------------------------------------------------------------------------------
class PlanBuilder {
 public:
  explicit PlanBuilder(uint32_t world = 1, std::string name = "plan");

  uint32_t add_buffer(std::string name, uint64_t bytes_per_rank, bool external = false);
  uint32_t add_counter();                   // same id on every rank
  uint32_t add_counters(uint32_t count);    // returns the first id

  template <class Args>
  uint32_t add_task(TaskKind kind, uint32_t rank, const Args& args) {
    static_assert(sizeof(Args) <= sizeof(Task::arg) && std::is_trivially_copyable_v<Args>);
    uint32_t id = add_task(kind, rank);
    std::memcpy(pending_[id].task.arg, &args, sizeof(Args));
    return id;
  }
  uint32_t add_task(TaskKind kind, uint32_t rank);
  void set_args(uint32_t task, const uint32_t (&args)[kTaskArgWords]) {
    std::memcpy(pending_.at(task).task.arg, args, sizeof(args));
  }
  void wait(uint32_t task, uint32_t counter, uint32_t target);
  void signal(uint32_t task, uint32_t rank, uint32_t counter, uint32_t amount = 1);
  // Declares that `amount` per run arrives on (rank, counter) from outside this plan: a peer
  // process's plan (multi-process runs hold only their own rank's tasks) or the host. Counted in
  // the counter's per-run total; if it never arrives, waiting tasks end in the watchdog error.
  void external_signal(uint32_t rank, uint32_t counter, uint32_t amount);

  uint32_t num_tasks() const { return uint32_t(pending_.size()); }

  // Validates and orders. Rejects, naming the task and counter: unknown kinds, ranks out of range,
  // counter ids out of range, waits on counters nothing signals, targets above a counter's total,
  // and cycles (including waits that can only be satisfied by the task itself or by later work).
  Status build(Plan* out) const;

 private:
  struct Pending {
    Task task{};
    std::vector<Wait> waits;
    std::vector<Signal> signals;
  };
  uint32_t world_;
  std::string name_;
  uint32_t num_counters_ = 0;
  std::vector<BufferDesc> buffers_;
  std::vector<Pending> pending_;
  std::vector<Signal> external_;
};

// ---- random DAGs for the scheduling tests and runtime-bench --------------------------------------
struct RandomDagOptions {
  uint32_t num_tasks = 1000;
  uint32_t max_fan_in = 8;
  uint32_t world = 1;
  uint32_t window = 64;        // dependencies are drawn from the previous `window` tasks (0 = any)
  uint64_t max_spin_ns = 0;    // > 0: tasks are kSpin with a random duration up to this
  bool shuffle_insertion = true;  // add tasks to the builder in a random order (the planner must sort)
};
Status make_random_dag(const RandomDagOptions& options, uint64_t seed, Plan* out);

}  // namespace kosmos::plan
