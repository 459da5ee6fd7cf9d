// Fused TP/SP ops on the CPU executor with virtual ranks W in {1, 2, 3, 4, 8}: every op, forward
// and backward, against fp64 and against the unfused composition (bit for bit); bad inputs.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "../tp_check.h"
#include "kernels/reduce_tile.h"
#include "kosmos/tp.h"

using namespace kosmos;
using namespace kosmos::test;

namespace {
void run_op(TpOp op, int W, int64_t M, int64_t N, int64_t K) { run_and_check_tp(tp_config(op, W, M, N, K, true), 1234 + W); }
}  // namespace

class TpCpu : public ::testing::TestWithParam<std::tuple<TpOp, int>> {};

TEST_P(TpCpu, MatchesFp64AndUnfusedBitForBit) {
  auto [op, W] = GetParam();
  // R = 96 rows per rank: 128-row blocks straddle ranks (tails); N, K shards multiples of 8.
  run_op(op, W, 96 * W, 40 * W, 24 * W);
}

INSTANTIATE_TEST_SUITE_P(AllOps, TpCpu,
                         ::testing::Combine(::testing::Values(TpOp::kAgGemm, TpOp::kGemmRs, TpOp::kGemmAr,
                                                              TpOp::kColParallelBwd, TpOp::kRowParallelBwd),
                                            ::testing::Values(1, 2, 3, 4, 8)),
                         [](const auto& info) {
                           return std::string(to_string(std::get<0>(info.param))) + "_W" + std::to_string(std::get<1>(info.param));
                         });

TEST(TpCpuShapes, LargerBlocksAlignedToTiles) {
  run_op(TpOp::kAgGemm, 2, 512, 512, 256);
  run_op(TpOp::kGemmRs, 4, 512, 264, 256);
}

TEST(TpCpuErrors, BadInputsNamed) {
  TpConfig c;
  c.cpu = true;
  c.world = 3;
  c.m = 100;
  c.n = 48;
  c.k = 48;
  std::unique_ptr<TpLayer> L;
  Status s = TpLayer::plan(c, &L);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("M = 100 is not divisible by the world size 3"), std::string::npos) << s.message();
  c.m = 96;
  c.n = 40;  // N/W not integral for ag_gemm
  s = TpLayer::plan(c, &L);
  EXPECT_NE(s.message().find("N = 40 is not divisible"), std::string::npos) << s.message();
  c.world = 0;
  s = TpLayer::plan(c, &L);
  EXPECT_NE(s.message().find("world = 0"), std::string::npos) << s.message();
}

// One process per GPU, a rank's launch ends when its own tasks have: a peer's write into this
// rank's memory that no task of this rank waits for can land after its run returned. So in every
// TP plan, each write into another rank's buffers (copies to a peer, all-reduce broadcasts) must be
// covered: the writing task signals a counter of the destination rank, and a task of that rank
// waits for every signal of that counter. In the unfused composition only the last launch needs it
// (the barrier before each launch orders the earlier ones). GEMM tiles and reduce tiles without
// broadcast write their own rank's buffers only.
TEST(TpPlanRules, EveryRemoteWriteIsWaitedForByItsDestination) {
  for (TpOp op : {TpOp::kAgGemm, TpOp::kGemmRs, TpOp::kGemmAr, TpOp::kColParallelBwd, TpOp::kRowParallelBwd})
    for (int W : {2, 3, 4, 8})
      for (bool fused : {true, false}) {
        TpConfig c = tp_config(op, W, 96 * W, 40 * W, 24 * W, true);
        c.fused = fused;
        std::vector<plan::Plan> plans;
        ASSERT_TRUE(tp_plans(c, 16, &plans).is_ok());
        const std::string at = std::string(to_string(op)) + " W=" + std::to_string(W) + (fused ? " fused" : " unfused");
        int remote_writes = 0;
        for (size_t ph = fused ? 0 : plans.size() - 1; ph < plans.size(); ++ph) {
          const plan::Plan& p = plans[ph];
          std::map<std::pair<uint32_t, uint32_t>, uint64_t> signalled;  // (rank, counter) -> total
          for (const plan::Task& t : p.tasks)
            for (uint32_t i = 0; i < t.num_signals; ++i) {
              const plan::Signal& s = p.signals[t.first_signal + i];
              signalled[{s.rank, s.counter}] += s.amount;
            }
          std::set<std::pair<uint32_t, uint32_t>> waited_whole;  // waited for every signal of the run
          for (const plan::Task& t : p.tasks)
            for (uint32_t i = 0; i < t.num_waits; ++i) {
              const plan::Wait& w = p.waits[t.first_wait + i];
              if (w.value() == plan::kWaitAll || w.value() >= signalled[{t.rank, w.counter}]) waited_whole.insert({t.rank, w.counter});
            }
          for (const plan::Task& t : p.tasks) {
            std::vector<uint32_t> dests;
            if (t.kind == plan::TaskKind::kCopy) {
              const auto a = t.args<plan::CopyArgs>();
              if (a.dst_rank != t.rank) dests.push_back(a.dst_rank);
            } else if (t.kind == plan::TaskKind::kReduceTile) {
              if (t.args<kernels::ReduceArgs>().flags & kernels::kReduceBroadcast)
                for (uint32_t r = 0; r < uint32_t(W); ++r)
                  if (r != t.rank) dests.push_back(r);
            }
            for (uint32_t d : dests) {
              ++remote_writes;
              bool covered = false;
              for (uint32_t i = 0; i < t.num_signals && !covered; ++i) {
                const plan::Signal& s = p.signals[t.first_signal + i];
                covered = s.rank == d && waited_whole.count({d, s.counter});
              }
              EXPECT_TRUE(covered) << at << ": task " << t.id << " (" << plan::to_string(t.kind) << ", rank " << t.rank
                                   << ") writes rank " << d << "'s memory, and no task of rank " << d << " waits for it";
            }
          }
        }
        if (op == TpOp::kAgGemm && fused) EXPECT_GT(remote_writes, 0) << at << ": the rule checked nothing";
        if (op == TpOp::kGemmAr) EXPECT_GT(remote_writes, 0) << at << ": the rule checked nothing";
      }
}
