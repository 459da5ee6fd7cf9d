// Plan building and validation.
//
// Ordering rule (also the deadlock-freedom argument, docs/design/runtime.md): a task is *ready*
// once, for each of its waits, the amounts signalled into that counter by tasks already placed
// reach the wait's target. We repeatedly place the ready task with the smallest builder index (or
// a random one, for the stress order). Adding a task only adds signals, so the set of ready tasks
// only grows: if this greedy stops with tasks left, no order satisfies them (a cycle), and the
// executors, which claim tasks in exactly this order, can never block on an unplaced task.
#include <algorithm>
#include <queue>
#include <random>
#include <sstream>

#include "kosmos/plan.h"

namespace kosmos::plan {

const char* to_string(TaskKind kind) {
  switch (kind) {
    case TaskKind::kNop: return "nop";
    case TaskKind::kSpin: return "spin";
    case TaskKind::kCopy: return "copy";
    case TaskKind::kChecksum: return "checksum";
    case TaskKind::kGemmTile: return "gemm_tile";
    case TaskKind::kReduceTile: return "reduce_tile";
    case TaskKind::kMoeRoute: return "moe_route";
    case TaskKind::kMoeOffsets: return "moe_offsets";
    case TaskKind::kMoeDispatch: return "moe_dispatch";
    case TaskKind::kMoeCombine: return "moe_combine";
    case TaskKind::kMoeSwigluBackward: return "moe_swiglu_backward";
    case TaskKind::kNumKinds: break;
  }
  return "unknown";
}

bool is_known(TaskKind kind) { return std::string_view(to_string(kind)) != "unknown"; }

PlanBuilder::PlanBuilder(uint32_t world, std::string name) : world_(world), name_(std::move(name)) {}

uint32_t PlanBuilder::add_buffer(std::string name, uint64_t bytes_per_rank, bool external) {
  buffers_.push_back({std::move(name), bytes_per_rank, external});
  return uint32_t(buffers_.size() - 1);
}

uint32_t PlanBuilder::add_counter() { return num_counters_++; }

uint32_t PlanBuilder::add_counters(uint32_t count) {
  uint32_t first = num_counters_;
  num_counters_ += count;
  return first;
}

uint32_t PlanBuilder::add_task(TaskKind kind, uint32_t rank) {
  Pending p;
  p.task.kind = kind;
  p.task.rank = uint16_t(rank);
  p.task.reserved = rank;  // full value kept for validation; overwritten by build()
  p.task.id = uint32_t(pending_.size());
  pending_.push_back(std::move(p));
  return uint32_t(pending_.size() - 1);
}

void PlanBuilder::wait(uint32_t task, uint32_t counter, uint32_t target) {
  pending_.at(task).waits.push_back({counter, target});
}

void PlanBuilder::signal(uint32_t task, uint32_t rank, uint32_t counter, uint32_t amount) {
  // rank/amount are range-checked in build(); keep the full values until then.
  Signal s{counter, uint16_t(std::min<uint32_t>(rank, 0xFFFF)), uint16_t(std::min<uint32_t>(amount, 0xFFFF))};
  if (rank > 0xFFFF) s.rank = 0xFFFF;
  if (amount > 0xFFFF || amount == 0) s.amount = 0;  // 0 marks "out of range" for build()
  pending_.at(task).signals.push_back(s);
}

void PlanBuilder::external_signal(uint32_t rank, uint32_t counter, uint32_t amount) {
  Signal s{counter, uint16_t(std::min<uint32_t>(rank, 0xFFFF)), uint16_t(amount > 0xFFFF ? 0 : amount)};
  external_.push_back(s);
}

namespace {

std::string task_name(const Task& t) {
  std::ostringstream os;
  os << "task " << t.id << " (" << to_string(t.kind) << ", rank " << t.rank << ")";
  return os.str();
}

// Greedy topological order. `pick` chooses among ready builder indices.
template <class Queue>
std::vector<uint32_t> greedy_order(const std::vector<Task>& tasks, const std::vector<Wait>& waits,
                                   const std::vector<Signal>& signals, uint32_t num_counters,
                                   const std::vector<uint64_t>* external_totals, Queue& ready,
                                   std::vector<uint32_t>* stuck_missing) {
  const size_t n = tasks.size();
  // waiters[rank*C + c] = list of (task, wait index)
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> waiters;
  uint32_t world = 0;
  for (const Task& t : tasks) world = std::max<uint32_t>(world, t.rank + 1u);
  for (const Task& t : tasks)
    for (uint32_t s = 0; s < t.num_signals; ++s) world = std::max<uint32_t>(world, signals[t.first_signal + s].rank + 1u);
  waiters.resize(size_t(world) * num_counters);
  std::vector<uint64_t> value(size_t(world) * num_counters, 0);
  if (external_totals)  // arrivals from outside the plan may come at any time: count them as available
    for (size_t i = 0; i < value.size() && i < external_totals->size(); ++i) value[i] = (*external_totals)[i];
  std::vector<uint32_t> missing(n, 0);  // waits not yet satisfied
  for (uint32_t i = 0; i < n; ++i) {
    const Task& t = tasks[i];
    for (uint32_t w = 0; w < t.num_waits; ++w) {
      const Wait& wt = waits[t.first_wait + w];
      if (wt.value() <= value[size_t(t.rank) * num_counters + wt.counter]) continue;
      ++missing[i];
      waiters[size_t(t.rank) * num_counters + wt.counter].push_back({i, t.first_wait + w});
    }
    if (missing[i] == 0) ready.push(i);
  }
  std::vector<uint32_t> order;
  order.reserve(n);
  while (!ready.empty()) {
    uint32_t i = ready.top();
    ready.pop();
    order.push_back(i);
    const Task& t = tasks[i];
    for (uint32_t s = 0; s < t.num_signals; ++s) {
      const Signal& sg = signals[t.first_signal + s];
      size_t slot = size_t(sg.rank) * num_counters + sg.counter;
      uint64_t before = value[slot];
      value[slot] += sg.amount;
      for (auto [j, w] : waiters[slot]) {
        uint64_t target = waits[w].value();
        if (before < target && value[slot] >= target && --missing[j] == 0) ready.push(j);
      }
    }
  }
  if (stuck_missing) *stuck_missing = std::move(missing);
  return order;
}

struct MinQueue {
  std::priority_queue<uint32_t, std::vector<uint32_t>, std::greater<>> q;
  void push(uint32_t i) { q.push(i); }
  uint32_t top() const { return q.top(); }
  void pop() { q.pop(); }
  bool empty() const { return q.empty(); }
};

struct RandomQueue {
  std::vector<uint32_t> v;
  std::mt19937_64 rng;
  size_t pick = 0;
  void push(uint32_t i) { v.push_back(i); }
  uint32_t top() {
    pick = std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng);
    return v[pick];
  }
  void pop() {
    std::swap(v[pick], v.back());
    v.pop_back();
  }
  bool empty() const { return v.empty(); }
};

}  // namespace

Status PlanBuilder::build(Plan* out) const {
  KOSMOS_CHECK(out != nullptr, "build: out is null");
  KOSMOS_CHECK_CODE(world_ >= 1 && world_ <= 0xFFFF, StatusCode::kInvalidPlan,
                    "plan '", name_, "': world must be in [1, 65535], got ", world_);
  const uint32_t C = num_counters_;
  std::vector<Task> tasks;
  std::vector<Wait> waits;
  std::vector<Signal> signals;
  tasks.reserve(pending_.size());
  for (const Pending& p : pending_) {
    Task t = p.task;
    const uint32_t full_rank = t.reserved;
    t.reserved = 0;
    KOSMOS_CHECK_CODE(is_known(t.kind), StatusCode::kInvalidPlan, task_name(t), ": unknown task kind ",
                      int(t.kind));
    KOSMOS_CHECK_CODE(full_rank < world_, StatusCode::kInvalidPlan, "task ", t.id, " (", to_string(t.kind),
                      "): rank ", full_rank, " out of range for world ", world_);
    KOSMOS_CHECK_CODE(p.waits.size() <= 0xFFFF && p.signals.size() <= 0xFFFF, StatusCode::kInvalidPlan,
                      task_name(t), ": too many waits/signals");
    t.first_wait = uint32_t(waits.size());
    t.num_waits = uint16_t(p.waits.size());
    for (const Wait& w : p.waits) {
      KOSMOS_CHECK_CODE(w.counter < C, StatusCode::kInvalidPlan, task_name(t), " waits on counter ", w.counter,
                        ", but the plan has only ", C, " counters");
      waits.push_back(w);
    }
    t.first_signal = uint32_t(signals.size());
    t.num_signals = uint16_t(p.signals.size());
    for (const Signal& s : p.signals) {
      KOSMOS_CHECK_CODE(s.rank < world_ && s.rank != 0xFFFF, StatusCode::kInvalidPlan, task_name(t),
                        " signals counter ", s.counter, " on rank ", s.rank == 0xFFFF ? std::string(">=65535") : std::to_string(s.rank),
                        ", out of range for world ", world_);
      KOSMOS_CHECK_CODE(s.counter < C, StatusCode::kInvalidPlan, task_name(t), " signals counter ", s.counter,
                        ", but the plan has only ", C, " counters");
      KOSMOS_CHECK_CODE(s.amount != 0, StatusCode::kInvalidPlan, task_name(t), " signals counter ", s.counter,
                        " with an amount outside [1, 65535]");
      signals.push_back(s);
    }
    tasks.push_back(t);
  }

  // Per-run totals; waits on counters nothing signals; unreachable targets.
  std::vector<uint64_t> totals(size_t(world_) * C, 0);
  for (const Signal& s : signals) totals[size_t(s.rank) * C + s.counter] += s.amount;
  for (const Signal& s : external_) {
    KOSMOS_CHECK_CODE(s.rank < world_ && s.counter < C && s.amount != 0, StatusCode::kInvalidPlan, "external signal (rank ",
                      s.rank, ", counter ", s.counter, ", amount ", s.amount, ") out of range (world ", world_, ", ", C,
                      " counters, amount in [1, 65535])");
    totals[size_t(s.rank) * C + s.counter] += s.amount;
  }
  for (const Task& t : tasks) {
    for (uint32_t w = 0; w < t.num_waits; ++w) {
      Wait& wt = waits[t.first_wait + w];
      uint64_t total = totals[size_t(t.rank) * C + wt.counter];
      if (wt.value() == kWaitAll) {
        KOSMOS_CHECK_CODE(total < kWaitAll, StatusCode::kInvalidPlan, task_name(t), " waits for all of counter ", wt.counter,
                          ", whose per-run total ", total, " is too large");
        wt.target = uint32_t(total) | (wt.target & kDeferredWait);
      }
      KOSMOS_CHECK_CODE(total > 0 || wt.value() == 0, StatusCode::kInvalidPlan, task_name(t), " waits on counter ",
                        wt.counter, " of rank ", t.rank, " (target ", wt.value(), "), which no task signals");
      KOSMOS_CHECK_CODE(wt.value() <= total, StatusCode::kInvalidPlan, task_name(t), " waits for counter ", wt.counter,
                        " of rank ", t.rank, " to reach ", wt.value(), ", which can never be reached: all tasks together signal ",
                        total, " per run");
    }
  }

  std::vector<uint64_t> external_totals(size_t(world_) * C, 0);
  for (const Signal& s : external_) external_totals[size_t(s.rank) * C + s.counter] += s.amount;
  MinQueue ready;
  std::vector<uint32_t> missing;
  std::vector<uint32_t> order = greedy_order(tasks, waits, signals, C, &external_totals, ready, &missing);
  if (order.size() != tasks.size()) {
    // Describe one cycle: from a stuck task follow an unsatisfied wait to a stuck signaller.
    std::vector<uint8_t> placed(tasks.size(), 0);
    for (uint32_t i : order) placed[i] = 1;
    uint32_t cur = 0;
    while (placed[cur]) ++cur;
    std::vector<int64_t> seen_at(tasks.size(), -1);
    std::vector<std::string> steps;
    while (seen_at[cur] < 0) {
      seen_at[cur] = int64_t(steps.size());
      const Task& t = tasks[cur];
      // first wait whose signallers include an unplaced task
      uint32_t next = cur;
      std::string step;
      for (uint32_t w = 0; w < t.num_waits && next == cur; ++w) {
        const Wait& wt = waits[t.first_wait + w];
        for (uint32_t j = 0; j < tasks.size(); ++j) {
          if (placed[j]) continue;
          const Task& s = tasks[j];
          bool hits = false;
          for (uint32_t k = 0; k < s.num_signals; ++k) {
            const Signal& sg = signals[s.first_signal + k];
            hits |= sg.rank == t.rank && sg.counter == wt.counter;
          }
          if (hits) {
            next = j;
            step = task_name(t) + " waits on counter " + std::to_string(wt.counter) + " (target " +
                   std::to_string(wt.value()) + ") signalled by " + task_name(s);
            break;
          }
        }
      }
      if (next == cur && step.empty()) break;  // cannot happen: a stuck task has a stuck signaller
      steps.push_back(step);
      cur = next;
    }
    std::ostringstream os;
    os << "plan '" << name_ << "' has a dependency cycle (" << tasks.size() - order.size()
       << " tasks can never run): ";
    for (size_t k = size_t(std::max<int64_t>(seen_at[cur], 0)); k < steps.size(); ++k) os << (k ? "; " : "") << steps[k];
    return Status(StatusCode::kInvalidPlan, os.str());
  }

  Plan plan;
  plan.name = name_;
  plan.world = world_;
  plan.num_counters = C;
  plan.counter_totals = std::move(totals);
  plan.external_totals = std::move(external_totals);
  plan.buffers = buffers_;
  plan.tasks.reserve(tasks.size());
  for (uint32_t i : order) plan.tasks.push_back(tasks[i]);
  plan.waits = std::move(waits);
  plan.signals = std::move(signals);
  *out = std::move(plan);
  return Status::ok();
}

Plan restrict_to_rank(const Plan& plan, uint32_t rank) {
  Plan out;
  out.name = plan.name + "@rank" + std::to_string(rank);
  out.world = plan.world;
  out.num_counters = plan.num_counters;
  out.counter_totals = plan.counter_totals;
  out.buffers = plan.buffers;
  out.external_totals.assign(plan.counter_totals.size(), 0);
  // Arrivals into this rank's counters from outside the kept tasks are external.
  for (uint32_t c = 0; c < plan.num_counters; ++c) {
    const size_t slot = size_t(rank) * plan.num_counters + c;
    out.external_totals[slot] = plan.counter_totals[slot];
  }
  for (const Task& t : plan.tasks) {
    if (t.rank != rank) continue;
    Task k = t;
    k.first_wait = uint32_t(out.waits.size());
    k.first_signal = uint32_t(out.signals.size());
    for (uint32_t w = 0; w < t.num_waits; ++w) out.waits.push_back(plan.waits[t.first_wait + w]);
    for (uint32_t s = 0; s < t.num_signals; ++s) {
      const Signal& sg = plan.signals[t.first_signal + s];
      out.signals.push_back(sg);
      if (sg.rank == rank) out.external_totals[size_t(rank) * plan.num_counters + sg.counter] -= sg.amount;
    }
    out.tasks.push_back(k);
  }
  return out;
}

std::vector<uint32_t> random_topological_order(const Plan& plan, uint64_t seed) {
  RandomQueue ready;
  ready.rng.seed(seed);
  return greedy_order(plan.tasks, plan.waits, plan.signals, plan.num_counters, &plan.external_totals, ready, nullptr);
}

}  // namespace kosmos::plan
