// GPU executor on the H200: random DAGs (audited), CUDA-graph replay, watchdog and host abort,
// the sample pipeline with virtual ranks. Skips, saying so, when no Hopper GPU is visible.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "gpu_skip.h"

#include <chrono>
#include <random>
#include <thread>

#include "../audit_check.h"
#include "kosmos/runtime.h"
#include "runtime/sample_pipeline.h"

using namespace kosmos;
using namespace kosmos::plan;
using namespace kosmos::runtime;


TEST(GpuRuntime, ThousandRandomDagsUpTo100kTasks) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(424242);
  size_t total = 0;
  for (int i = 0; i < 1000; ++i) {
    RandomDagOptions o;
    o.num_tasks = (i % 100 == 0) ? 100000
                                 : std::max(1u, uint32_t(std::exp(std::uniform_real_distribution<double>(0, std::log(100000.0))(rng))));
    o.max_fan_in = 8;
    o.world = 1 + uint32_t(rng() % 8);
    o.window = (rng() & 1) ? 300 : 0;
    o.max_spin_ns = (i % 3 == 0) ? 2000 : 0;
    o.shuffle_insertion = (i % 10 == 0);  // the planner sort of 100k shuffled tasks is slow-ish on the host
    Plan p;
    ASSERT_TRUE(make_random_dag(o, rng(), &p).is_ok());
    GpuOptions go;
    go.audit = true;
    go.watchdog_seconds = 20;
    if (rng() % 4 == 0) go.max_ctas = 1 + int(rng() % 264);  // also small grids
    go.claim_ahead = (i % 2) ? 2 : 1;  // half the plans: every task claims its successor as it starts
    go.publish = uint32_t(i / 2 % 3);  // every publish mode with both claim-ahead modes
    std::unique_ptr<GpuExecutor> ex;
    ASSERT_TRUE(GpuExecutor::create(p, go, &ex).is_ok());
    ASSERT_TRUE(ex->run(nullptr).is_ok());
    Status s = ex->finish(nullptr);
    ASSERT_TRUE(s.is_ok()) << "plan " << i << ": " << s.to_string();
    std::vector<AuditRecord> audit;
    ASSERT_TRUE(ex->read_audit(&audit).is_ok());
    ASSERT_EQ(test::check_audit(p, audit, 1), "")
        << "plan " << i << " tasks " << o.num_tasks << " grid " << ex->grid_size() << " claim_ahead " << go.claim_ahead
        << " publish " << go.publish;
    total += p.tasks.size();
  }
  std::printf("[gpu-dag] 1000 plans, %zu tasks\n", total);
}

TEST(GpuRuntime, CudaGraphReplayThousandTimes) {
  SKIP_WITHOUT_GPU();
  RandomDagOptions o;
  o.num_tasks = 5000;
  o.world = 4;
  o.max_spin_ns = 500;
  Plan p;
  ASSERT_TRUE(make_random_dag(o, 99, &p).is_ok());
  GpuOptions go;
  go.audit = true;
  std::unique_ptr<GpuExecutor> ex;
  ASSERT_TRUE(GpuExecutor::create(p, go, &ex).is_ok());
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  cudaGraph_t g;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_TRUE(ex->run(s).is_ok());
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  cudaGraphExec_t ge;
  ASSERT_EQ(cudaGraphInstantiate(&ge, g, 0), cudaSuccess);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(cudaGraphLaunch(ge, s), cudaSuccess);
  ASSERT_TRUE(ex->finish(s).is_ok());
  uint64_t epoch = 0;
  ASSERT_TRUE(ex->read_epoch(&epoch).is_ok());
  EXPECT_EQ(epoch, 1000u);
  std::vector<AuditRecord> audit;
  ASSERT_TRUE(ex->read_audit(&audit).is_ok());
  EXPECT_EQ(test::check_audit(p, audit, 1000), "");
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
}

// The run's last claim (the one that takes ticket num_tasks - 1) resets the claim state and
// advances the epoch. Fewer tasks than CTAs, as many, one more, many more; full and small grids;
// three runs each (run r's waits need the epoch of run r: a missed or doubled advance hangs or
// releases waits early, which the audit catches); with and without every task claiming ahead (then
// the last ticket is taken while other CTAs still run their last task); each publish mode (with
// warp 1 releasing, thread 0 claims -- and may take the last ticket -- while the release is under way).
TEST(GpuRuntime, EpochAdvancesOncePerRunForEveryTaskCountAndGrid) {
  SKIP_WITHOUT_GPU();
  for (uint32_t n : {1u, 2u, 131u, 132u, 133u, 528u, 529u, 5000u}) {
    for (int max_ctas : {0, 1, 7})
    for (uint32_t claim_ahead : {1u, 2u})
    for (uint32_t publish : {0u, 1u, 2u}) {
      RandomDagOptions o;
      o.num_tasks = n;
      o.max_fan_in = 4;
      o.world = 2;
      Plan p;
      ASSERT_TRUE(make_random_dag(o, 31 * n + uint32_t(max_ctas), &p).is_ok());
      GpuOptions go;
      go.audit = true;
      go.max_ctas = max_ctas;
      go.claim_ahead = claim_ahead;
      go.publish = publish;
      go.watchdog_seconds = 10;
      std::unique_ptr<GpuExecutor> ex;
      ASSERT_TRUE(GpuExecutor::create(p, go, &ex).is_ok());
      for (uint64_t run = 1; run <= 3; ++run) {
        ASSERT_TRUE(ex->run(nullptr).is_ok());
        const Status st = ex->finish(nullptr);
        ASSERT_TRUE(st.is_ok()) << n << " tasks, grid " << ex->grid_size() << ", publish " << publish << ", run " << run << ": "
                                << st.to_string();
        uint64_t epoch = 0;
        ASSERT_TRUE(ex->read_epoch(&epoch).is_ok());
        ASSERT_EQ(epoch, run) << n << " tasks, grid " << ex->grid_size();
      }
      std::vector<AuditRecord> audit;
      ASSERT_TRUE(ex->read_audit(&audit).is_ok());
      ASSERT_EQ(test::check_audit(p, audit, 3), "") << n << " tasks, grid " << ex->grid_size();
    }
  }
}

TEST(GpuRuntime, SamplePipelineVirtualRanksAndGraphOfData) {
  SKIP_WITHOUT_GPU();
  for (uint32_t world : {1u, 2u, 4u, 8u}) {
    SampleResult r;
    Status s = run_sample("gpu", world, 32, (64 << 10) + 16, 1000, 3, true, &r);
    ASSERT_TRUE(s.is_ok()) << "world " << world << ": " << s.to_string();
    EXPECT_TRUE(r.verified);
  }
}

TEST(GpuRuntime, WatchdogReportsUnsatisfiableWaitWithinBudgetThenNextRunSucceeds) {
  SKIP_WITHOUT_GPU();
  PlanBuilder b(2, "peer never arrives");
  uint32_t c = b.add_counters(2);
  b.external_signal(1, c + 1, 1);
  uint32_t w = b.add_task(TaskKind::kNop, 1);
  b.wait(w, c + 1, 1);
  for (int i = 0; i < 1000; ++i) b.signal(b.add_task(TaskKind::kNop, 0), 0, c);
  Plan p;
  ASSERT_TRUE(b.build(&p).is_ok());
  GpuOptions go;
  go.watchdog_seconds = 0.5;
  std::unique_ptr<GpuExecutor> ex;
  ASSERT_TRUE(GpuExecutor::create(p, go, &ex).is_ok());
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(ex->run(nullptr).is_ok());
  Status s = ex->finish(nullptr);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(s.code(), StatusCode::kTimeout) << s.to_string();
  EXPECT_LT(secs, 1.5) << "watchdog budget 0.5 s";
  for (const char* f : {"rank 1", "task 0", "counter 1", "expected >= 1", "observed 0"})
    EXPECT_NE(s.message().find(f), std::string::npos) << f << " not in: " << s.message();
  std::printf("[watchdog] %.3f s: %s\n", secs, s.message().c_str());

  // The process and GPU stay usable: a good plan runs on a new executor right after.
  RandomDagOptions o;
  o.num_tasks = 2000;
  Plan q;
  ASSERT_TRUE(make_random_dag(o, 5, &q).is_ok());
  GpuOptions go2;
  go2.audit = true;
  std::unique_ptr<GpuExecutor> ex2;
  ASSERT_TRUE(GpuExecutor::create(q, go2, &ex2).is_ok());
  ASSERT_TRUE(ex2->run(nullptr).is_ok());
  ASSERT_TRUE(ex2->finish(nullptr).is_ok());
  std::vector<AuditRecord> audit;
  ASSERT_TRUE(ex2->read_audit(&audit).is_ok());
  EXPECT_EQ(test::check_audit(q, audit, 1), "");
  // And the failed executor recovers: the same timeout again (not a hang, not a stale success).
  ASSERT_TRUE(ex->run(nullptr).is_ok());
  EXPECT_EQ(ex->finish(nullptr).code(), StatusCode::kTimeout);
}

TEST(GpuRuntime, HostAbortEndsAWaitingRun) {
  SKIP_WITHOUT_GPU();
  PlanBuilder b(1, "abort");
  uint32_t c = b.add_counter();
  b.external_signal(0, c, 1);
  b.wait(b.add_task(TaskKind::kNop, 0), c, 1);
  Plan p;
  ASSERT_TRUE(b.build(&p).is_ok());
  GpuOptions go;
  go.watchdog_seconds = 30;
  std::unique_ptr<GpuExecutor> ex;
  ASSERT_TRUE(GpuExecutor::create(p, go, &ex).is_ok());
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(ex->run(nullptr).is_ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(ex->abort().is_ok());
  Status s = ex->finish(nullptr);
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s.to_string();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
}
