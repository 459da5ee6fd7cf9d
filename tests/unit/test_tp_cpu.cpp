// Fused TP/SP ops on the CPU executor with virtual ranks W in {1, 2, 3, 4, 8}: every op, forward
// and backward, against fp64 and against the unfused composition (bit for bit); bad inputs.
#include <gtest/gtest.h>

#include "../tp_check.h"

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
