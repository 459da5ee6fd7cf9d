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
  TpConfig c;
  c.op = op;
  c.world = W;
  c.m = M;
  c.n = N;
  c.k = K;
  std::unique_ptr<TpLayer> fused, unfused;
  Status s = TpLayer::plan(c, &fused);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  TpConfig cu = c;
  cu.fused = false;
  ASSERT_TRUE(TpLayer::plan(cu, &unfused).is_ok());
  TpHost hf{c}, hu{cu};
  fill_inputs(*fused, hf, 777 + W);
  fill_inputs(*unfused, hu, 777 + W);
  cudaStream_t st;
  cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
  if (graph_replays) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    ASSERT_EQ(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal), cudaSuccess);
    ASSERT_TRUE(fused->run(st).is_ok());
    ASSERT_EQ(cudaStreamEndCapture(st, &g), cudaSuccess);
    ASSERT_EQ(cudaGraphInstantiate(&ge, g, 0), cudaSuccess);
    for (int i = 0; i < graph_replays; ++i) ASSERT_EQ(cudaGraphLaunch(ge, st), cudaSuccess);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
  } else {
    for (int i = 0; i < 2; ++i) ASSERT_TRUE(fused->run(st).is_ok());
  }
  s = fused->finish(st);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  ASSERT_TRUE(unfused->run(st).is_ok());
  ASSERT_TRUE(unfused->finish(st).is_ok());
  cudaStreamDestroy(st);
  read_outputs(*fused, hf);
  read_outputs(*unfused, hu);
  EXPECT_EQ(check_tp(hf), "") << to_string(op) << " W=" << W << " M=" << M << " " << fused->describe();
  for (TpBuffer b : tp_outputs(op)) {
    if (!tp_buffer_shape(c, b).exists) continue;
    for (int r = 0; r < W; ++r)
      EXPECT_TRUE(hf.at(b, r) == hu.at(b, r)) << to_string(op) << " W=" << W << ": fused " << to_string(b) << " rank " << r
                                               << " differs from the unfused composition";
  }
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
