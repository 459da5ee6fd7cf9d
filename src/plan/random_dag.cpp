// Random DAG plans: the scheduling protocol's stress tests and runtime-bench.
//
// Task i signals its own counter i (amount 1); each dependency j of i becomes a wait c_j >= 1.
// Dependencies come from the previous `window` tasks so chains cross CTAs; the builder receives
// the tasks in a shuffled order so the planner's sort is exercised too.
#include <algorithm>
#include <numeric>
#include <random>

#include "kosmos/plan.h"

namespace kosmos::plan {

Status make_random_dag(const RandomDagOptions& o, uint64_t seed, Plan* out) {
  KOSMOS_CHECK(o.num_tasks >= 1, "random dag: num_tasks must be >= 1");
  KOSMOS_CHECK(o.world >= 1, "random dag: world must be >= 1");
  std::mt19937_64 rng(seed);
  const uint32_t n = o.num_tasks;
  std::vector<std::vector<uint32_t>> deps(n);
  for (uint32_t i = 1; i < n; ++i) {
    uint32_t fan_in = std::uniform_int_distribution<uint32_t>(0, std::min(o.max_fan_in, i))(rng);
    uint32_t lo = (o.window == 0 || i <= o.window) ? 0 : i - o.window;
    for (uint32_t k = 0; k < fan_in; ++k) {
      uint32_t j = std::uniform_int_distribution<uint32_t>(lo, i - 1)(rng);
      if (std::find(deps[i].begin(), deps[i].end(), j) == deps[i].end()) deps[i].push_back(j);
    }
  }
  std::vector<uint32_t> rank(n);
  for (auto& r : rank) r = std::uniform_int_distribution<uint32_t>(0, o.world - 1)(rng);
  std::vector<uint32_t> insertion(n);
  std::iota(insertion.begin(), insertion.end(), 0u);
  if (o.shuffle_insertion) std::shuffle(insertion.begin(), insertion.end(), rng);

  PlanBuilder b(o.world, "random_dag");
  b.add_counters(n);
  std::vector<uint64_t> spin(n, 0);
  if (o.max_spin_ns) for (auto& s : spin) s = std::uniform_int_distribution<uint64_t>(0, o.max_spin_ns)(rng);
  for (uint32_t i : insertion) {
    uint32_t t = o.max_spin_ns ? b.add_task(TaskKind::kSpin, rank[i], SpinArgs{spin[i]}) : b.add_task(TaskKind::kNop, rank[i]);
    // Counter i lives on rank[i]'s consumers: a cross-rank edge signals the waiter's rank.
    for (uint32_t j : deps[i]) b.wait(t, j, 1);
  }
  // Signals after all tasks exist: task for original index i is at builder position pos[i].
  std::vector<uint32_t> pos(n);
  for (uint32_t p = 0; p < n; ++p) pos[insertion[p]] = p;
  // Every consumer of i waits on counter i of its own rank: signal each distinct consumer rank once.
  std::vector<std::vector<uint32_t>> consumer_ranks(n);
  for (uint32_t k = 0; k < n; ++k)
    for (uint32_t j : deps[k])
      if (std::find(consumer_ranks[j].begin(), consumer_ranks[j].end(), rank[k]) == consumer_ranks[j].end())
        consumer_ranks[j].push_back(rank[k]);
  for (uint32_t i = 0; i < n; ++i)
    for (uint32_t r : consumer_ranks[i]) b.signal(pos[i], r, i, 1);
  return b.build(out);
}

}  // namespace kosmos::plan
