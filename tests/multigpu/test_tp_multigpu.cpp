// TP ops across real GPUs, one process per GPU (RANK / WORLD_SIZE / LOCAL_RANK / KOSMOS_NCCL_ID_FILE,
// see scripts/run_multigpu.sh). Every op, against fp64, on each rank's own outputs. Skips when
// WORLD_SIZE is unset or fewer GPUs than ranks are visible.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "../moe_check.h"
#include "../tp_check.h"
#include "kosmos/transport.h"

using namespace kosmos;
using namespace kosmos::test;

namespace {
// The transport of a process launched by scripts/run_multigpu.sh, or null with the reason to skip.
std::unique_ptr<transport::NcclTransport> env_transport(std::string* why) {
  const char* ws = std::getenv("WORLD_SIZE");
  int gpus = 0;
  cudaGetDeviceCount(&gpus);
  if (!ws || std::atoi(ws) < 2) {
    *why = "WORLD_SIZE unset or < 2: launch through scripts/run_multigpu.sh";
    return nullptr;
  }
  if (gpus < std::atoi(ws)) {
    *why = "needs " + std::string(ws) + " GPUs, " + std::to_string(gpus) + " visible";
    return nullptr;
  }
  std::unique_ptr<transport::NcclTransport> t;
  Status s = transport::NcclTransport::create_from_env(&t);
  if (!s) {
    ADD_FAILURE() << s.to_string();
    *why = "transport failed";
    return nullptr;
  }
  return t;
}
}  // namespace

TEST(TpMultiGpu, EveryOpAcrossRanks) {
  std::string why;
  std::unique_ptr<transport::NcclTransport> t = env_transport(&why);
  if (!t) GTEST_SKIP() << why;
  Status s;
  const int W = t->world(), rank = t->rank();
  const TpDistributed dist = transport::make_tp_distributed(*t);
  for (TpOp op : {TpOp::kAgGemm, TpOp::kGemmRs, TpOp::kGemmAr, TpOp::kColParallelBwd, TpOp::kRowParallelBwd}) {
    TpConfig c;
    c.op = op;
    c.world = W;
    c.m = 96 * W * 4;
    c.n = 64 * W;
    c.k = 48 * W;
    c.watchdog_seconds = 20;
    std::unique_ptr<TpLayer> L;
    s = TpLayer::plan_distributed(c, dist, &L);
    ASSERT_TRUE(s.is_ok()) << to_string(op) << ": " << s.to_string();
    TpHost h{c};
    fill_inputs(*L, h, 9000, rank);
    ASSERT_TRUE(t->barrier(nullptr).is_ok());
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(L->run(nullptr).is_ok());
    s = L->finish(nullptr);
    ASSERT_TRUE(s.is_ok()) << to_string(op) << " rank " << rank << ": " << s.to_string();
    read_outputs(*L, h, rank);
    EXPECT_EQ(check_tp(h, 1e-2, rank), "") << to_string(op) << " rank " << rank;
    ASSERT_TRUE(t->barrier(nullptr).is_ok());
  }
}

TEST(TpMultiGpu, MoeForwardAcrossRanks) {
  std::string why;
  std::unique_ptr<transport::NcclTransport> t = env_transport(&why);
  if (!t) GTEST_SKIP() << why;
  Status s;
  const int W = t->world(), rank = t->rank();
  MoeConfig c = moe_config(W, 200, 256, 128, 4 * W, 4, false);
  c.watchdog_seconds = 20;
  std::unique_ptr<MoeLayer> L;
  s = MoeLayer::plan_distributed(c, transport::make_distributed(*t), &L);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  MoeHost h{c};
  fill_moe(*L, h, 77, Routing::kSkewed, rank);
  ASSERT_TRUE(t->barrier(nullptr).is_ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(L->run_composition(true).is_ok());
  s = L->finish();
  ASSERT_TRUE(s.is_ok()) << "rank " << rank << ": " << s.to_string();
  EXPECT_EQ(check_moe(*L, h, 1e-2, rank), "") << "rank " << rank;
  ASSERT_TRUE(t->barrier(nullptr).is_ok());
}

TEST(TpMultiGpu, MoeBackwardAcrossRanks) {
  std::string why;
  std::unique_ptr<transport::NcclTransport> t = env_transport(&why);
  if (!t) GTEST_SKIP() << why;
  Status s;
  const int W = t->world(), rank = t->rank();
  if (W > 8) GTEST_SKIP() << "the MoE backward takes W <= 8 (five GEMM problems per rank in one launch)";
  MoeConfig c = moe_config(W, 200, 256, 128, 4 * W, 4, false);
  c.backward = true;
  c.watchdog_seconds = 20;
  std::unique_ptr<MoeLayer> L;
  s = MoeLayer::plan_distributed(c, transport::make_distributed(*t), &L);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  MoeHost h{c};
  fill_moe_backward(*L, h, 78, Routing::kSkewed, rank);
  ASSERT_TRUE(t->barrier(nullptr).is_ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(L->run_backward_composition(true).is_ok());
  s = L->finish();
  ASSERT_TRUE(s.is_ok()) << "rank " << rank << ": " << s.to_string();
  EXPECT_EQ(check_moe_backward(*L, h, 2e-2, rank), "") << "rank " << rank;
  ASSERT_TRUE(t->barrier(nullptr).is_ok());
}
