// CPU executor: the scheduling protocol under random DAGs, delays and claim orders; the watchdog;
// host abort; built-in task kinds against host references. Also DeviceInfo's bandwidth formula.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "../audit_check.h"
#include "kernels/basic_tasks.h"
#include "kosmos/runtime.h"
#include "runtime/sample_pipeline.h"

using namespace kosmos;
using namespace kosmos::plan;
using namespace kosmos::runtime;

// A random DAG for the stress tests: log-uniform size in [1, max_tasks] (max_tasks when `full`),
// fan-in up to 8, 1-4 ranks, half of them with a claim window of 16.
static RandomDagOptions stress_dag_options(std::mt19937_64& rng, uint32_t max_tasks, bool full) {
  RandomDagOptions o;
  o.num_tasks = full ? max_tasks
                     : std::max(1u, uint32_t(std::exp(std::uniform_real_distribution<double>(0, std::log(double(max_tasks)))(rng))));
  o.max_fan_in = 8;
  o.world = 1 + uint32_t(rng() % 4);
  o.window = (rng() & 1) ? 16 : 0;
  return o;
}

// >= 10,000 random DAG plans: up to 10k tasks, fan-in up to 8, 2-64 virtual CTAs, random delays
// and random valid claim orders. Every task runs exactly once and after its dependencies.
TEST(CpuExecutor, TenThousandRandomDagsStress) {
  std::mt19937_64 rng(20261202);
  const int kPlans = 10000;
  size_t total_tasks = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kPlans; ++i) {
    // every 500th plan has the full 10k tasks
    const RandomDagOptions o = stress_dag_options(rng, 10000, i % 500 == 0);
    Plan p;
    ASSERT_TRUE(make_random_dag(o, rng(), &p).is_ok());
    CpuOptions co;
    co.num_workers = 2 + uint32_t(rng() % 63);
    co.stress = true;
    co.seed = rng();
    co.max_delay_us = (i % 100 == 0) ? 50 : 2;
    co.audit = true;
    co.watchdog_seconds = 60;
    std::unique_ptr<CpuExecutor> ex;
    ASSERT_TRUE(CpuExecutor::create(p, co, &ex).is_ok());
    Status s = ex->run();
    ASSERT_TRUE(s.is_ok()) << "plan " << i << ": " << s.to_string();
    std::string err = test::check_audit(p, ex->audit(), 1);
    ASSERT_EQ(err, "") << "plan " << i << " (" << o.num_tasks << " tasks, " << co.num_workers << " workers)";
    total_tasks += p.tasks.size();
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[stress] %d plans, %zu tasks, %.1f s\n", kPlans, total_tasks, secs);
}

// The claim-ahead rule at its worst (every task claims its worker's next one before its body
// runs): still every task exactly once, after its dependencies, and no deadlock. With more tasks
// held ahead than there are workers free this is the case the deadlock argument has to cover.
TEST(CpuExecutor, ClaimAheadRandomDagsStress) {
  std::mt19937_64 rng(20261203);
  for (int i = 0; i < 2000; ++i) {
    const RandomDagOptions o = stress_dag_options(rng, 3000, false);
    Plan p;
    ASSERT_TRUE(make_random_dag(o, rng(), &p).is_ok());
    CpuOptions co;
    co.num_workers = 2 + uint32_t(rng() % 31);
    co.stress = true;
    co.claim_ahead = true;
    co.seed = rng();
    co.max_delay_us = 2;
    co.audit = true;
    co.watchdog_seconds = 60;
    std::unique_ptr<CpuExecutor> ex;
    ASSERT_TRUE(CpuExecutor::create(p, co, &ex).is_ok());
    for (int run = 1; run <= 2; ++run) {
      Status s = ex->run();
      ASSERT_TRUE(s.is_ok()) << "plan " << i << " run " << run << ": " << s.to_string();
    }
    ASSERT_EQ(test::check_audit(p, ex->audit(), 2), "")
        << "plan " << i << " (" << o.num_tasks << " tasks, " << co.num_workers << " workers)";
  }
}

TEST(CpuExecutor, RepeatedRunsAdvanceEpochWithoutReset) {
  RandomDagOptions o;
  o.num_tasks = 300;
  Plan p;
  ASSERT_TRUE(make_random_dag(o, 7, &p).is_ok());
  CpuOptions co;
  co.num_workers = 8;
  co.audit = true;
  std::unique_ptr<CpuExecutor> ex;
  ASSERT_TRUE(CpuExecutor::create(p, co, &ex).is_ok());
  for (int r = 0; r < 20; ++r) ASSERT_TRUE(ex->run().is_ok());
  EXPECT_EQ(ex->epoch(), 20u);
  EXPECT_EQ(test::check_audit(p, ex->audit(), 20), "");
  // counter i was signalled once per run by its producer for each consumer rank
  EXPECT_EQ(ex->counter(0, 0) % 20, 0u);
}

TEST(CpuExecutor, WatchdogNamesTheMissingArrivalAndNextRunSucceeds) {
  PlanBuilder b(2, "peer never arrives");
  uint32_t c = b.add_counters(2);
  b.external_signal(1, c + 1, 1);  // a peer process that never launches
  uint32_t w = b.add_task(TaskKind::kNop, 1);
  b.wait(w, c + 1, 1);
  b.signal(b.add_task(TaskKind::kNop, 0), 0, c);
  Plan p;
  ASSERT_TRUE(b.build(&p).is_ok());
  CpuOptions co;
  co.num_workers = 3;
  co.watchdog_seconds = 0.2;
  std::unique_ptr<CpuExecutor> ex;
  ASSERT_TRUE(CpuExecutor::create(p, co, &ex).is_ok());
  auto t0 = std::chrono::steady_clock::now();
  Status s = ex->run();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(s.code(), StatusCode::kTimeout) << s.to_string();
  EXPECT_LT(secs, 2.0);
  for (const char* f : {"rank 1", "task 0", "counter 1", "expected >= 1", "observed 0"})
    EXPECT_NE(s.message().find(f), std::string::npos) << f << " not in: " << s.message();

  // A plan without the missing peer runs fine on a fresh executor; the failed one is reusable too.
  PlanBuilder ok(1, "ok");
  uint32_t k = ok.add_counter();
  uint32_t a = ok.add_task(TaskKind::kNop, 0);
  ok.signal(a, 0, k);
  ok.wait(ok.add_task(TaskKind::kNop, 0), k, 1);
  Plan q;
  ASSERT_TRUE(ok.build(&q).is_ok());
  std::unique_ptr<CpuExecutor> ex2;
  ASSERT_TRUE(CpuExecutor::create(q, co, &ex2).is_ok());
  EXPECT_TRUE(ex2->run().is_ok());
  EXPECT_EQ(ex->run().code(), StatusCode::kTimeout);  // still no peer: same error again, no hang
}

TEST(CpuExecutor, HostAbortEndsAWaitingRun) {
  PlanBuilder b(1, "abort");
  uint32_t c = b.add_counter();
  b.external_signal(0, c, 1);
  b.wait(b.add_task(TaskKind::kNop, 0), c, 1);
  Plan p;
  ASSERT_TRUE(b.build(&p).is_ok());
  CpuOptions co;
  co.num_workers = 2;
  co.watchdog_seconds = 30;
  std::unique_ptr<CpuExecutor> ex;
  ASSERT_TRUE(CpuExecutor::create(p, co, &ex).is_ok());
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ex->abort();
  });
  auto t0 = std::chrono::steady_clock::now();
  Status s = ex->run();
  killer.join();
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s.to_string();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
}

TEST(CpuExecutor, SamplePipelineCopiesAndChecksumsAcrossRanks) {
  for (uint32_t world : {1u, 2u, 3u, 8u}) {
    runtime::SampleResult r;
    Status s = runtime::run_sample("cpu", world, 7, 4096 + 16, 100, 3, true, &r);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    EXPECT_TRUE(r.verified);
    EXPECT_EQ(r.trace.size(), size_t(world) * 7 * 3);
  }
}

TEST(CpuExecutor, RejectsBadPayloadsBeforeRunning) {
  PlanBuilder b(1, "bad copy");
  uint32_t buf = b.add_buffer("x", 64);
  b.add_task(TaskKind::kCopy, 0, CopyArgs{uint16_t(buf), 0, uint16_t(buf), 0, 0, 32, 64});
  Plan p;
  ASSERT_TRUE(b.build(&p).is_ok());
  std::unique_ptr<CpuExecutor> ex;
  Status s = CpuExecutor::create(p, CpuOptions{}, &ex);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("destination range [32, 96) exceeds buffer 0 'x' of 64 bytes"), std::string::npos) << s.message();
}

TEST(CpuExecutor, ChecksumIsPositionWeighted) {
  uint32_t a[4] = {1, 2, 3, 4}, b[4] = {2, 1, 3, 4};
  EXPECT_NE(kernels::checksum_host(a, 16), kernels::checksum_host(b, 16));
  EXPECT_EQ(kernels::checksum_host(a, 16), 1 * 1 + 2 * 3 + 3 * 5 + 4 * 7u);
}

// The peak DRAM bandwidth the MoE bench's second floor divides by: two transfers per memory clock
// over the bus width. An H100 SXM reports 2,619 MHz and 5,120 bits (NVIDIA's datasheet: 3.35 TB/s);
// a device that reports neither gives 0 (the bench then prints no peak floor). query_device on a
// machine without a GPU reports none.
TEST(DeviceInfo, PeakBandwidthFromMemoryClockAndBusWidth) {
  DeviceInfo h100;
  h100.mem_clock_mhz = 2619;
  h100.mem_bus_bits = 5120;
  EXPECT_NEAR(h100.peak_mem_bytes_per_s(), 3.35e12, 0.01e12);
  EXPECT_EQ(DeviceInfo{}.peak_mem_bytes_per_s(), 0.0);
  const DeviceInfo here = query_device(0);
  if (!here.available) EXPECT_EQ(here.peak_mem_bytes_per_s(), 0.0);
}
