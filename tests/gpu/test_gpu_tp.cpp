// Fused TP/SP ops on the H200 with virtual ranks W in {1, 2, 4, 8}: every op against fp64 and
// against the unfused composition bit for bit; CUDA-graph replay of a fused op.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "gpu_skip.h"

#include "../tp_check.h"
#include "kosmos/runtime.h"

using namespace kosmos;
using namespace kosmos::test;


namespace {
void run_op(TpOp op, int W, int64_t M, int64_t N, int64_t K, int graph_replays = 0) {
  run_and_check_tp(tp_config(op, W, M, N, K, false), 777 + W, graph_replays);
}
}  // namespace

class GpuTp : public ::testing::TestWithParam<std::tuple<TpOp, int>> {};

TEST_P(GpuTp, MatchesFp64AndUnfusedBitForBit) {
  SKIP_WITHOUT_GPU();
  auto [op, W] = GetParam();
  run_op(op, W, 1024, 512, 512);   // 128-row blocks aligned to ranks
  run_op(op, W, 96 * W, 40 * W, 24 * W);  // blocks straddle ranks, N/K tails
}

INSTANTIATE_TEST_SUITE_P(AllOps, GpuTp,
                         ::testing::Combine(::testing::Values(TpOp::kAgGemm, TpOp::kGemmRs, TpOp::kGemmAr,
                                                              TpOp::kColParallelBwd, TpOp::kRowParallelBwd),
                                            ::testing::Values(1, 2, 4, 8)),
                         [](const auto& info) {
                           return std::string(to_string(std::get<0>(info.param))) + "_W" + std::to_string(std::get<1>(info.param));
                         });

TEST(GpuTpGraph, FusedOpsReplayFromACudaGraph) {
  SKIP_WITHOUT_GPU();
  run_op(TpOp::kAgGemm, 8, 1024, 1024, 512, 100);
  run_op(TpOp::kGemmRs, 8, 1024, 512, 1024, 100);
  run_op(TpOp::kColParallelBwd, 4, 512, 512, 512, 50);
}
