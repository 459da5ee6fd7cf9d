// The one-rank-per-process protocol of the distributed TP path, on the CPU: W threads, each with
// its own layer planned by TpLayer::plan_distributed (restrict_to_rank: only its rank's tasks,
// peers' signals as external arrivals), buffers and counters in a shared "symmetric heap", and a
// barrier before every run. Exactly what the NCCL path does, minus NCCL and the GPU.
#include <gtest/gtest.h>

#include <barrier>
#include <chrono>
#include <mutex>
#include <thread>

#include "../symmetric_heap.h"
#include "../tp_check.h"

using namespace kosmos;
using namespace kosmos::test;

namespace {
void run_distributed(TpOp op, int W) {
  TpConfig c = tp_config(op, W, 96 * W, 40 * W, 24 * W, true);
  SymmetricHeap heap(W);
  std::vector<std::string> errors(W);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < W; ++rank)
    ranks.emplace_back([&, rank] {
      const DistributedContext d = heap.context(rank);
      std::unique_ptr<TpLayer> L;
      Status s = TpLayer::plan_distributed(c, d, &L);
      if (!s) {
        errors[rank] = s.to_string();
        return;
      }
      TpHost h{c};
      fill_inputs(*L, h, 555, rank);  // every rank makes all ranks' data on the host, writes its own
      heap.barrier();                 // inputs written everywhere before anyone runs
      for (int run = 0; run < 3 && s.is_ok(); ++run) s = L->run(nullptr);
      if (!s) {
        errors[rank] = s.to_string();
        return;
      }
      // A rank's outputs are complete when its own run returns, before any barrier with its peers:
      // the all-reduce's broadcasts from slower owners must not land after (written_barrier).
      read_outputs(*L, h, rank);
      errors[rank] = check_tp(h, 1e-2, rank);
      heap.barrier();  // peers may still read this rank's memory until all finished
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < W; ++r) EXPECT_EQ(errors[r], "") << to_string(op) << " W=" << W << " rank " << r;
}
}  // namespace

class TpDistributedCpu : public ::testing::TestWithParam<std::tuple<TpOp, int>> {};

TEST_P(TpDistributedCpu, OneRankPerProcessProtocol) {
  auto [op, W] = GetParam();
  run_distributed(op, W);
}

INSTANTIATE_TEST_SUITE_P(AllOps, TpDistributedCpu,
                         ::testing::Combine(::testing::Values(TpOp::kAgGemm, TpOp::kGemmRs, TpOp::kGemmAr,
                                                              TpOp::kColParallelBwd, TpOp::kRowParallelBwd),
                                            ::testing::Values(2, 3, 4)),
                         [](const auto& info) {
                           return std::string(to_string(std::get<0>(info.param))) + "_W" + std::to_string(std::get<1>(info.param));
                         });

TEST(TpDistributedCpuFailure, APeerThatNeverRunsIsAWatchdogErrorNotAHang) {
  const int W = 2;
  TpConfig c = tp_config(TpOp::kAgGemm, W, 96 * W, 40 * W, 24 * W, true);
  c.watchdog_seconds = 0.3;
  SymmetricHeap heap(W);
  Status result;
  std::thread peer([&] {  // rank 1 plans and joins the barriers, but never runs its tasks
    const DistributedContext d = heap.context(1);
    std::unique_ptr<TpLayer> L;
    ASSERT_TRUE(TpLayer::plan_distributed(c, d, &L).is_ok());
    heap.barrier();  // rank 0's run() barrier
    heap.barrier();  // and its second run's
  });
  const DistributedContext d = heap.context(0);
  std::unique_ptr<TpLayer> L;
  ASSERT_TRUE(TpLayer::plan_distributed(c, d, &L).is_ok());
  auto t0 = std::chrono::steady_clock::now();
  result = L->run(nullptr);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(result.code(), StatusCode::kTimeout) << result.to_string();
  EXPECT_LT(secs, 5.0);
  EXPECT_NE(result.message().find("rank 0"), std::string::npos) << result.message();
  EXPECT_NE(result.message().find("signalled from outside this plan"), std::string::npos) << result.message();
  std::printf("[peer missing] %.2f s: %s\n", secs, result.message().c_str());
  // The peer's counters cannot be reset from this process: the layer refuses to run again
  // (instead of starting a run whose waits could pass on the failed run's late signals).
  const Status again = L->run(nullptr);
  peer.join();
  EXPECT_EQ(again.code(), StatusCode::kAborted) << again.to_string();
  EXPECT_NE(again.message().find("re-create the layer on every rank"), std::string::npos) << again.message();
}
