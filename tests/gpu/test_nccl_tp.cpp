// TP ops through the NCCL transport: symmetric buffers and counters, .sys scope, barrier-separated
// runs. On one GPU: a one-rank communicator, end to end, every op.
#include <gtest/gtest.h>

#include <cstdlib>

#include "../moe_check.h"
#include "gpu_skip.h"
#include "../tp_check.h"
#include "kosmos/runtime.h"
#include "kosmos/transport.h"

using namespace kosmos;
using namespace kosmos::test;

namespace {
// A one-rank communicator through the env path (RANK=0, WORLD_SIZE=1).
Status one_rank_transport(std::unique_ptr<transport::NcclTransport>* t) {
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "1", 1);
  setenv("LOCAL_RANK", "0", 1);
  return transport::NcclTransport::create_from_env(t);
}
}  // namespace

TEST(NcclTp, OneRankCommunicatorEveryOp) {
  SKIP_WITHOUT_GPU();
  std::unique_ptr<transport::NcclTransport> t;
  Status s = one_rank_transport(&t);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  const TpDistributed dist = transport::make_tp_distributed(*t);
  for (TpOp op : {TpOp::kAgGemm, TpOp::kGemmRs, TpOp::kGemmAr, TpOp::kColParallelBwd, TpOp::kRowParallelBwd}) {
    TpConfig c;
    c.op = op;
    c.world = 1;
    c.m = 1000;
    c.n = 264;
    c.k = 520;
    std::unique_ptr<TpLayer> L;
    s = TpLayer::plan_distributed(c, dist, &L);
    ASSERT_TRUE(s.is_ok()) << to_string(op) << ": " << s.to_string();
    TpHost h{c};
    fill_inputs(*L, h, 4242, 0);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(L->run(nullptr).is_ok());
    s = L->finish(nullptr);
    ASSERT_TRUE(s.is_ok()) << to_string(op) << ": " << s.to_string();
    read_outputs(*L, h, 0);
    EXPECT_EQ(check_tp(h, 1e-2, 0), "") << to_string(op);
  }
}

TEST(NcclMoe, OneRankCommunicatorForward) {
  SKIP_WITHOUT_GPU();
  std::unique_ptr<transport::NcclTransport> t;
  Status s = one_rank_transport(&t);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  MoeConfig c = moe_config(1, 100, 256, 128, 16, 4, false);
  std::unique_ptr<MoeLayer> L;
  s = MoeLayer::plan_distributed(c, transport::make_distributed(*t), &L);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  MoeHost h{c};
  fill_moe(*L, h, 99, Routing::kSkewed, 0);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(L->run_composition(true).is_ok());
  s = L->finish();
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_EQ(check_moe(*L, h, 1e-2, 0), "");
}

// The backward over a one-rank communicator (symmetric windows, the NCCL barrier before each launch):
// gradients against fp64, then the seven-launch composition from poison, bit for bit.
TEST(NcclMoe, OneRankCommunicatorBackward) {
  SKIP_WITHOUT_GPU();
  std::unique_ptr<transport::NcclTransport> t;
  Status s = one_rank_transport(&t);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  MoeConfig c = moe_config(1, 100, 256, 128, 16, 4, false);
  c.backward = true;
  std::unique_ptr<MoeLayer> L;
  s = MoeLayer::plan_distributed(c, transport::make_distributed(*t), &L);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  MoeHost h{c};
  fill_moe_backward(*L, h, 98, Routing::kSkewed, 0);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(L->run_backward_composition(true).is_ok());
  s = L->finish();
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_EQ(check_moe_backward(*L, h, 2e-2, 0), "");
  const MoeGradsOut fused = read_grads(*L, 0);
  poison_backward(*L, 0);
  ASSERT_TRUE(L->run_backward_composition(false).is_ok());
  ASSERT_TRUE(L->finish().is_ok());
  EXPECT_TRUE(read_grads(*L, 0) == fused) << "fused gradients differ from the unfused composition";
}
