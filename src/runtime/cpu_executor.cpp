// CPU executor: the runtime protocol on host threads, one per virtual CTA.
//
// Same rules as the GPU loop (persistent_kernel.cuh): claims by one atomic ticket in plan order
// (optionally one claimed ahead, CpuOptions::claim_ahead), acquire-waits on counters scaled by the
// epoch, body, release-add signals. In stress mode the order is a random valid topological order
// (re-drawn each run) and workers sleep at random points (before claims, inside waits, before
// signalling) to shake out protocol bugs.
#include <algorithm>
#include <chrono>
#include <random>
#include <sstream>
#include <thread>

#include "kernels/basic_tasks.h"
#include "kosmos/runtime.h"

namespace kosmos::runtime {

using Clock = std::chrono::steady_clock;

namespace {
uint64_t now_ns() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count());
}
}  // namespace

Status refused_after_failure_across_processes(const std::string& failure) {
  return Status(StatusCode::kAborted, "run: an earlier run failed with peers in other processes (" + failure +
                                          "); their counters cannot be reset from here: re-create the layer on every rank");
}

std::string describe(const ErrorRecord& e, const plan::Plan& plan) {
  std::ostringstream os;
  if (e.kind == uint32_t(ErrorKind::kHostAbort)) os << "run aborted by the host: ";
  else os << "watchdog: ";
  os << "rank " << e.rank << ", SM/worker " << e.sm << " (CTA " << e.cta << "), task " << e.task_id << " ("
     << plan::to_string(plan::TaskKind(e.task_kind)) << ") waited " << double(e.waited_ns) * 1e-6
     << " ms on counter " << e.counter << ": expected >= " << e.expected << ", observed " << e.observed
     << " (run " << e.epoch;
  if (e.counter < plan.num_counters && e.rank < plan.world) {
    const uint64_t total = plan.total(e.rank, e.counter);
    os << "; per-run target " << (e.expected - e.epoch * total) << " of " << total << ", "
       << (e.observed - std::min(e.observed, e.epoch * total)) << " arrived this run";
    const size_t slot = size_t(e.rank) * plan.num_counters + e.counter;
    if (!plan.external_totals.empty() && plan.external_totals[slot] > 0)
      os << "; " << plan.external_totals[slot] << " of the " << total
         << " are signalled from outside this plan (another rank's process or the host)";
    // Name the tasks that signal this counter and have not (all) arrived.
    int named = 0;
    for (const plan::Task& t : plan.tasks)
      for (uint32_t s = 0; s < t.num_signals && named < 4; ++s) {
        const plan::Signal& sg = plan.signals[t.first_signal + s];
        if (sg.rank == e.rank && sg.counter == e.counter) {
          os << (named++ ? ", " : "; signalled by ") << "task " << t.id << " (" << plan::to_string(t.kind)
             << ", rank " << t.rank << ")";
        }
      }
  }
  os << ")";
  return os.str();
}

Status CpuExecutor::create(const plan::Plan& plan, const CpuOptions& options, std::unique_ptr<CpuExecutor>* out) {
  KOSMOS_CHECK(out != nullptr, "CpuExecutor::create: out is null");
  KOSMOS_CHECK(options.num_workers >= 1 && options.num_workers <= 1024, "CpuExecutor: num_workers must be in [1, 1024], got ",
               options.num_workers);
  KOSMOS_CHECK(options.watchdog_seconds > 0, "CpuExecutor: watchdog_seconds must be > 0, got ", options.watchdog_seconds);
  for (const plan::Task& t : plan.tasks) KOSMOS_RETURN_IF_ERROR(kernels::validate_builtin_task(plan, t));
  std::unique_ptr<CpuExecutor> ex(new CpuExecutor());
  ex->plan_ = plan;
  ex->options_ = options;
  const size_t slots = size_t(plan.world) * plan.num_counters;
  ex->counters_.reset(new std::atomic<uint64_t>[slots == 0 ? 1 : slots]);
  for (size_t i = 0; i < slots; ++i) ex->counters_[i].store(0);
  for (uint32_t r = 0; r < plan.world; ++r) ex->counter_arrays_.push_back(ex->counters_.get() + size_t(r) * plan.num_counters);
  ex->local_ranks_.assign(plan.world, true);
  ex->owned_.resize(plan.buffers.size() * plan.world);
  ex->buffers_.assign(plan.buffers.size() * plan.world, nullptr);
  for (size_t b = 0; b < plan.buffers.size(); ++b)
    if (!plan.buffers[b].external)
      for (uint32_t r = 0; r < plan.world; ++r) {
        auto& v = ex->owned_[b * plan.world + r];
        v.assign(plan.buffers[b].bytes_per_rank, 0);
        ex->buffers_[b * plan.world + r] = v.data();
      }
  ex->bodies_.resize(size_t(plan::TaskKind::kNumKinds));
  if (options.trace) ex->trace_.assign(plan.tasks.size(), TraceRecord{});
  if (options.audit) ex->audit_.assign(plan.tasks.size(), AuditRecord{});
  *out = std::move(ex);
  return Status::ok();
}

CpuExecutor::~CpuExecutor() = default;

Status CpuExecutor::bind_buffer(uint32_t buffer, uint32_t rank, void* ptr) {
  KOSMOS_CHECK(buffer < plan_.buffers.size(), "bind_buffer: buffer ", buffer, " does not exist");
  KOSMOS_CHECK(rank < plan_.world, "bind_buffer: rank ", rank, " out of range for world ", plan_.world);
  KOSMOS_CHECK(ptr != nullptr, "bind_buffer: null pointer for buffer '", plan_.buffers[buffer].name, "'");
  buffers_[size_t(buffer) * plan_.world + rank] = ptr;
  return Status::ok();
}

void* CpuExecutor::buffer(uint32_t buffer, uint32_t rank) const {
  return buffers_.at(size_t(buffer) * plan_.world + rank);
}

void CpuExecutor::set_host_body(plan::TaskKind kind, HostTaskFn fn) { bodies_.at(size_t(kind)) = std::move(fn); }

void CpuExecutor::abort() { host_abort_.store(true); }

uint64_t CpuExecutor::counter(uint32_t rank, uint32_t c) const {
  return counter_ref(rank, c).load();
}

void CpuExecutor::fail(const ErrorRecord& rec) {
  bool expected = false;
  if (failed_.compare_exchange_strong(expected, true)) error_ = rec;
  abort_.store(true);
}

bool CpuExecutor::wait_counter(const plan::Task& t, uint32_t worker, uint32_t counter, uint32_t target) {
  const size_t slot = size_t(t.rank) * plan_.num_counters + counter;
  const uint64_t total = plan_.counter_totals[slot];
  const uint64_t expected = epoch_ * total + (target == plan::kWaitAll ? total : target);
  std::atomic<uint64_t>& c = counter_ref(t.rank, counter);
  uint64_t v = c.load(std::memory_order_acquire);
  if (v >= expected) return true;
  const uint64_t t0 = now_ns();
  const uint64_t budget = uint64_t(options_.watchdog_seconds * 1e9);
  std::mt19937 rng(uint32_t(options_.seed * 977 + worker * 131 + t.id));
  for (uint32_t spin = 1;; ++spin) {
    v = c.load(std::memory_order_acquire);
    if (v >= expected) return true;
    if (abort_.load(std::memory_order_relaxed)) return false;
    const uint64_t waited = now_ns() - t0;
    ErrorRecord rec{};
    rec.rank = t.rank;
    rec.sm = worker;
    rec.cta = worker;
    rec.task_id = t.id;
    rec.task_kind = uint32_t(t.kind);
    rec.counter = counter;
    rec.expected = expected;
    rec.observed = v;
    rec.waited_ns = waited;
    rec.epoch = epoch_;
    if (host_abort_.load(std::memory_order_relaxed)) {
      rec.kind = uint32_t(ErrorKind::kHostAbort);
      fail(rec);
      return false;
    }
    if (waited > budget) {
      rec.kind = uint32_t(ErrorKind::kTimeout);
      fail(rec);
      return false;
    }
    if (options_.stress && (rng() & 7u) == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % (options_.max_delay_us + 1)));
    else std::this_thread::yield();
  }
}

void CpuExecutor::run_builtin(const plan::Task& t, uint32_t) {
  switch (t.kind) {
    case plan::TaskKind::kNop: break;
    case plan::TaskKind::kSpin: kernels::spin_host(t.args<plan::SpinArgs>().ns); break;
    case plan::TaskKind::kCopy: {
      auto a = t.args<plan::CopyArgs>();
      kernels::copy_host(static_cast<char*>(buffer(a.src_buffer, a.src_rank)) + a.src_offset,
                         static_cast<char*>(buffer(a.dst_buffer, a.dst_rank)) + a.dst_offset, a.bytes);
      break;
    }
    case plan::TaskKind::kChecksum: {
      auto a = t.args<plan::ChecksumArgs>();
      uint64_t sum = kernels::checksum_host(static_cast<char*>(buffer(a.src_buffer, a.src_rank)) + a.offset, a.bytes);
      std::memcpy(static_cast<char*>(buffer(a.out_buffer, a.out_rank)) + a.out_offset, &sum, 8);
      break;
    }
    default: break;
  }
}

void CpuExecutor::worker_loop(uint32_t worker, const std::vector<uint32_t>& order) {
  std::mt19937 rng(uint32_t(options_.seed * 7919 + worker + run_count_ * 104729));
  auto maybe_delay = [&] {
    if (options_.stress && (rng() & 3u) == 0)
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % (options_.max_delay_us + 1)));
  };
  const uint32_t n = uint32_t(order.size());
  constexpr uint32_t kNotClaimed = 0xFFFFFFFFu;
  uint32_t ahead = kNotClaimed;  // options_.claim_ahead: the slot claimed while the last task ran
  for (;;) {
    maybe_delay();
    if (abort_.load(std::memory_order_relaxed)) return;
    const uint32_t slot = ahead != kNotClaimed ? ahead : ticket_.fetch_add(1, std::memory_order_relaxed);
    ahead = kNotClaimed;
    if (slot >= n) return;
    const uint32_t idx = order[slot];
    const plan::Task& t = plan_.tasks[idx];
    bool ok = true;
    for (uint32_t w = 0; w < t.num_waits && ok; ++w) {
      const plan::Wait& wt = plan_.waits[t.first_wait + w];
      ok = wait_counter(t, worker, wt.counter, wt.value());  // deferred waits too: bodies here do not wait
    }
    if (!ok) return;
    if (options_.claim_ahead) {
      maybe_delay();
      ahead = ticket_.fetch_add(1, std::memory_order_relaxed);
    }
    const uint64_t start = now_ns();
    if (options_.audit) {
      audit_[idx].start_seq = seq_.fetch_add(1, std::memory_order_acq_rel);
      audit_[idx].cta = worker;
    }
    if (t.kind < plan::TaskKind::kGemmTile) {
      run_builtin(t, worker);
    } else {
      const HostTaskFn& fn = bodies_[size_t(t.kind)];
      HostTaskContext hc{this, worker, [&](uint32_t counter, uint32_t target) {
                           return wait_counter(t, worker, counter, target);
                         }};
      if (fn) fn(t, hc);
    }
    if (options_.audit) {
      audit_[idx].runs += 1;
      audit_[idx].end_seq = seq_.fetch_add(1, std::memory_order_acq_rel);
    }
    if (options_.trace) trace_[idx] = TraceRecord{t.id, uint16_t(t.kind), t.rank, worker, worker, start, now_ns()};
    maybe_delay();
    for (uint32_t s = 0; s < t.num_signals; ++s) {
      const plan::Signal& sg = plan_.signals[t.first_signal + s];
      counter_ref(sg.rank, sg.counter).fetch_add(sg.amount, std::memory_order_release);
    }
  }
}

Status CpuExecutor::use_shared_counters(const std::vector<std::atomic<uint64_t>*>& counter_arrays,
                                       const std::vector<bool>& local_ranks) {
  KOSMOS_CHECK(counter_arrays.size() == plan_.world && local_ranks.size() == plan_.world,
               "use_shared_counters: need one counter array per rank (", plan_.world, ")");
  for (uint32_t r = 0; r < plan_.world; ++r) {
    KOSMOS_CHECK(counter_arrays[r] != nullptr, "use_shared_counters: counter array of rank ", r, " is null");
    if (local_ranks[r])
      for (uint32_t c = 0; c < plan_.num_counters; ++c) counter_arrays[r][c].store(0);
  }
  counter_arrays_ = counter_arrays;
  local_ranks_ = local_ranks;
  return Status::ok();
}

Status CpuExecutor::run() {
  for (const plan::Task& t : plan_.tasks)
    KOSMOS_CHECK(t.kind < plan::TaskKind::kGemmTile || bodies_[size_t(t.kind)], "CpuExecutor: no host body for task kind ",
                 plan::to_string(t.kind), " (task ", t.id, ")");
  for (size_t i = 0; i < buffers_.size(); ++i)
    KOSMOS_CHECK(buffers_[i] != nullptr, "CpuExecutor: external buffer '", plan_.buffers[i / plan_.world].name,
                 "' of rank ", i % plan_.world, " is not bound");
  if (!failed_across_processes_.empty()) return refused_after_failure_across_processes(failed_across_processes_);
  std::vector<uint32_t> order;
  if (options_.stress) {
    order = plan::random_topological_order(plan_, options_.seed * 31 + run_count_);
  } else {
    order.resize(plan_.tasks.size());
    for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  }
  ticket_.store(0);
  abort_.store(false);
  failed_.store(false);
  host_abort_.store(false);
  std::vector<std::thread> workers;
  workers.reserve(options_.num_workers);
  for (uint32_t w = 0; w < options_.num_workers; ++w) workers.emplace_back([this, w, &order] { worker_loop(w, order); });
  for (auto& th : workers) th.join();
  ++run_count_;
  if (failed_.load()) {
    // Recover: the run's signals are partial, so counters restart from zero with the epoch. Only
    // the local ranks' counters can be: with peers elsewhere (GpuExecutor::finish, the same rule)
    // the executor refuses further runs instead.
    for (uint32_t r = 0; r < plan_.world; ++r)
      if (local_ranks_[r])
        for (uint32_t c = 0; c < plan_.num_counters; ++c) counter_ref(r, c).store(0);
    epoch_ = 0;
    const StatusCode code = error_.kind == uint32_t(ErrorKind::kHostAbort) ? StatusCode::kAborted : StatusCode::kTimeout;
    const std::string what = describe(error_, plan_);
    const bool across = std::find(local_ranks_.begin(), local_ranks_.end(), false) != local_ranks_.end();
    if (across) failed_across_processes_ = what;
    return Status(code, what + (across ? kFailedAcrossProcessesNote : ""));
  }
  ++epoch_;
  return Status::ok();
}

}  // namespace kosmos::runtime
