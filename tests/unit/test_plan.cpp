// Planner: ordering and every invalid-plan case, each rejected with a message naming the task and
// the counter.
#include <gtest/gtest.h>

#include "kosmos/plan.h"

using namespace kosmos;
using namespace kosmos::plan;

namespace {
Status build(const PlanBuilder& b, Plan* p) { return b.build(p); }
void expect_rejected(const PlanBuilder& b, std::initializer_list<const char*> fragments) {
  Plan p;
  Status s = b.build(&p);
  ASSERT_FALSE(s.is_ok()) << "plan was accepted";
  EXPECT_EQ(s.code(), StatusCode::kInvalidPlan) << s.to_string();
  for (const char* f : fragments) EXPECT_NE(s.message().find(f), std::string::npos) << "missing '" << f << "' in: " << s.message();
}
}  // namespace

TEST(Plan, TaskDescriptorIs64BytesAnd16Aligned) {
  EXPECT_EQ(sizeof(Task), 64u);
  EXPECT_EQ(alignof(Task), 16u);
}

TEST(Plan, OrdersTopologicallyRegardlessOfInsertionOrder) {
  PlanBuilder b(1, "t");
  uint32_t c = b.add_counters(3);
  // insert consumers before producers: 2 waits on 1 waits on 0
  uint32_t t2 = b.add_task(TaskKind::kNop, 0);
  uint32_t t1 = b.add_task(TaskKind::kNop, 0);
  uint32_t t0 = b.add_task(TaskKind::kNop, 0);
  b.wait(t2, c + 1, 1);
  b.wait(t1, c + 0, 1);
  b.signal(t0, 0, c + 0);
  b.signal(t1, 0, c + 1);
  b.signal(t2, 0, c + 2);
  Plan p;
  ASSERT_TRUE(build(b, &p).is_ok());
  ASSERT_EQ(p.tasks.size(), 3u);
  EXPECT_EQ(p.tasks[0].id, t0);
  EXPECT_EQ(p.tasks[1].id, t1);
  EXPECT_EQ(p.tasks[2].id, t2);
  EXPECT_EQ(p.total(0, c + 0), 1u);
}

TEST(Plan, PartialTargetsOnACumulativeCounter) {
  // One counter counts arrivals; consumer k waits for k+1 of them.
  PlanBuilder b(1, "cumulative");
  uint32_t c = b.add_counter();
  std::vector<uint32_t> consumers;
  for (uint32_t k = 0; k < 4; ++k) {
    uint32_t t = b.add_task(TaskKind::kNop, 0);
    b.wait(t, c, k + 1);
    consumers.push_back(t);
  }
  for (uint32_t k = 0; k < 4; ++k) b.signal(b.add_task(TaskKind::kNop, 0), 0, c);
  Plan p;
  ASSERT_TRUE(build(b, &p).is_ok());
  // consumer k must come after at least k+1 producers
  uint32_t producers_seen = 0;
  for (const Task& t : p.tasks) {
    if (t.num_signals) ++producers_seen;
    else EXPECT_GE(producers_seen, p.waits[t.first_wait].target);
  }
}

TEST(PlanInvalid, Cycle) {
  PlanBuilder b(1, "cyc");
  uint32_t c = b.add_counters(2);
  uint32_t a = b.add_task(TaskKind::kNop, 0), d = b.add_task(TaskKind::kNop, 0);
  b.wait(a, c + 1, 1);
  b.signal(a, 0, c + 0);
  b.wait(d, c + 0, 1);
  b.signal(d, 0, c + 1);
  expect_rejected(b, {"cycle", "task 0", "task 1", "counter 0", "counter 1"});
}

TEST(PlanInvalid, SelfWait) {
  PlanBuilder b(1, "self");
  uint32_t c = b.add_counter();
  uint32_t a = b.add_task(TaskKind::kNop, 0);
  b.wait(a, c, 1);
  b.signal(a, 0, c);
  expect_rejected(b, {"cycle", "task 0", "counter 0"});
}

TEST(PlanInvalid, WaitOnCounterNothingSignals) {
  PlanBuilder b(1, "unsignalled");
  uint32_t c = b.add_counters(2);
  uint32_t a = b.add_task(TaskKind::kNop, 0);
  b.signal(a, 0, c);
  uint32_t w = b.add_task(TaskKind::kNop, 0);
  b.wait(w, c + 1, 1);
  expect_rejected(b, {"task 1", "counter 1", "no task signals"});
}

TEST(PlanInvalid, UnreachableTarget) {
  PlanBuilder b(1, "unreachable");
  uint32_t c = b.add_counter();
  b.signal(b.add_task(TaskKind::kNop, 0), 0, c, 2);
  uint32_t w = b.add_task(TaskKind::kNop, 0);
  b.wait(w, c, 3);
  expect_rejected(b, {"task 1", "counter 0", "never be reached", "signal 2"});
}

TEST(PlanInvalid, WaitsOnlyOnAnotherRanksSignal) {
  // Rank 1 signals counter 0 of rank 1; a rank-0 task waits on counter 0 of rank 0: nothing signals it.
  PlanBuilder b(2, "wrong rank");
  uint32_t c = b.add_counter();
  b.signal(b.add_task(TaskKind::kNop, 1), 1, c);
  b.wait(b.add_task(TaskKind::kNop, 0), c, 1);
  expect_rejected(b, {"task 1", "rank 0", "counter 0", "no task signals"});
}

TEST(PlanInvalid, TaskRankOutOfRange) {
  PlanBuilder b(2, "rank");
  b.add_task(TaskKind::kNop, 2);
  expect_rejected(b, {"task 0", "rank 2", "world 2"});
}

TEST(PlanInvalid, SignalRankOutOfRange) {
  PlanBuilder b(2, "signal rank");
  uint32_t c = b.add_counter();
  b.signal(b.add_task(TaskKind::kNop, 0), 5, c);
  expect_rejected(b, {"task 0", "counter 0", "rank 5", "world 2"});
}

TEST(PlanInvalid, CounterOutOfRange) {
  PlanBuilder b(1, "counter");
  b.add_counter();
  uint32_t t = b.add_task(TaskKind::kNop, 0);
  b.wait(t, 7, 1);
  expect_rejected(b, {"task 0", "counter 7", "only 1 counters"});
}

TEST(PlanInvalid, SignalCounterOutOfRange) {
  PlanBuilder b(1, "signal counter");
  b.signal(b.add_task(TaskKind::kNop, 0), 0, 3);
  expect_rejected(b, {"task 0", "counter 3", "only 0 counters"});
}

TEST(PlanInvalid, UnknownKind) {
  PlanBuilder b(1, "kind");
  b.add_task(TaskKind(999), 0);
  expect_rejected(b, {"task 0", "unknown task kind 999"});
}

TEST(PlanInvalid, ZeroAmountSignal) {
  PlanBuilder b(1, "amount");
  uint32_t c = b.add_counter();
  b.signal(b.add_task(TaskKind::kNop, 0), 0, c, 0);
  expect_rejected(b, {"task 0", "counter 0", "amount"});
}

TEST(Plan, ExternalSignalsCountTowardTotalsAndOrder) {
  PlanBuilder b(2, "external");
  uint32_t c = b.add_counter();
  b.external_signal(0, c, 1);  // a peer process will signal
  uint32_t t = b.add_task(TaskKind::kNop, 0);
  b.wait(t, c, 1);
  Plan p;
  ASSERT_TRUE(build(b, &p).is_ok());
  EXPECT_EQ(p.total(0, c), 1u);
}

TEST(Plan, DumpShowsGemmTileRuns) {
  PlanBuilder b(1, "gemm dump");
  const uint32_t run[kTaskArgWords] = {1, 5, 7, 3};   // problem 1, m blocks 5..7, n block 7
  const uint32_t one[kTaskArgWords] = {0, 2, 4, 1};   // a single tile
  b.set_args(b.add_task(TaskKind::kGemmTile, 0), run);
  b.set_args(b.add_task(TaskKind::kGemmTile, 0), one);
  Plan p;
  ASSERT_TRUE(build(b, &p).is_ok());
  const std::string d = dump(p);
  EXPECT_NE(d.find("problem 1 m-block 5+2 n-block 7"), std::string::npos) << d;
  EXPECT_NE(d.find("problem 0 m-block 2 n-block 4"), std::string::npos) << d;
}

TEST(Plan, RandomDagIsValidAndDumps) {
  RandomDagOptions o;
  o.num_tasks = 500;
  o.world = 3;
  Plan p;
  ASSERT_TRUE(make_random_dag(o, 42, &p).is_ok());
  EXPECT_EQ(p.tasks.size(), 500u);
  std::string d = dump(p, 5);
  EXPECT_NE(d.find("random_dag"), std::string::npos);
  EXPECT_NE(d.find("495 more tasks"), std::string::npos);
  // Every wait is satisfiable by tasks earlier in the order.
  std::vector<uint64_t> value(size_t(p.world) * p.num_counters, 0);
  for (const Task& t : p.tasks) {
    for (uint32_t w = 0; w < t.num_waits; ++w) {
      const Wait& wt = p.waits[t.first_wait + w];
      EXPECT_GE(value[size_t(t.rank) * p.num_counters + wt.counter], wt.target) << "task " << t.id;
    }
    for (uint32_t s = 0; s < t.num_signals; ++s) {
      const Signal& sg = p.signals[t.first_signal + s];
      value[size_t(sg.rank) * p.num_counters + sg.counter] += sg.amount;
    }
  }
}

TEST(Plan, RestrictToRankKeepsOrderAndMakesPeerSignalsExternal) {
  RandomDagOptions o;
  o.num_tasks = 400;
  o.world = 3;
  Plan p;
  ASSERT_TRUE(make_random_dag(o, 9, &p).is_ok());
  size_t kept = 0;
  for (uint32_t r = 0; r < 3; ++r) {
    Plan q = restrict_to_rank(p, r);
    kept += q.tasks.size();
    uint32_t last = 0;
    bool first = true;
    for (const Task& t : q.tasks) {
      EXPECT_EQ(t.rank, r);
      // relative order preserved
      size_t pos = 0;
      while (p.tasks[pos].id != t.id) ++pos;
      if (!first) EXPECT_GT(pos, last);
      last = uint32_t(pos);
      first = false;
    }
    // local signals + external == total for every counter of rank r
    for (uint32_t c = 0; c < q.num_counters; ++c) {
      uint64_t local = 0;
      for (const Signal& s : q.signals)
        if (s.rank == r && s.counter == c) local += s.amount;
      EXPECT_EQ(local + q.external_totals[size_t(r) * q.num_counters + c], q.total(r, c));
    }
  }
  EXPECT_EQ(kept, p.tasks.size());
}
