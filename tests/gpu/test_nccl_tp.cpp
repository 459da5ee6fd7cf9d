// TP ops through the NCCL transport: symmetric buffers and counters, .sys scope, barrier-separated
// runs. On one GPU: a one-rank communicator, end to end, every op.
#include <gtest/gtest.h>

#include <cstdlib>

#include "../moe_check.h"
#include "gpu_skip.h"
#include "one_rank_checks.h"
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
  expect_every_tp_op_one_rank(transport::make_tp_distributed(*t), 4242);
}

TEST(NcclMoe, OneRankCommunicatorForward) {
  SKIP_WITHOUT_GPU();
  std::unique_ptr<transport::NcclTransport> t;
  Status s = one_rank_transport(&t);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  expect_moe_forward_one_rank(transport::make_distributed(*t), 99);
}

// The backward over a one-rank communicator (symmetric windows, the NCCL barrier before each launch):
// gradients against fp64, then the seven-launch composition from poison, bit for bit.
// Self-contained, and in training mode (MoeConfig::save_activations: one forward first, whose
// routing, layout, x rows and h1 the backward reads).
TEST(NcclMoe, OneRankCommunicatorBackward) {
  SKIP_WITHOUT_GPU();
  std::unique_ptr<transport::NcclTransport> t;
  Status s = one_rank_transport(&t);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  for (bool saved : {false, true}) {
    SCOPED_TRACE(saved ? "save_activations" : "recompute");
    MoeConfig c = moe_config(1, 100, 256, 128, 16, 4, false);
    c.backward = true;
    c.save_activations = saved;
    std::unique_ptr<MoeLayer> L;
    s = MoeLayer::plan_distributed(c, transport::make_distributed(*t), &L);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    MoeHost h{c};
    fill_moe_backward(*L, h, 98, Routing::kSkewed, 0);
    if (saved) {
      ASSERT_TRUE(L->run_composition(true).is_ok());
    }
    for (int i = 0; i < 2; ++i) ASSERT_TRUE(L->run_backward_composition(true).is_ok());
    s = L->finish();
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    EXPECT_EQ(check_moe_backward(*L, h, 2e-2, 0), "");
    const MoeGradsOut fused = read_grads(*L, 0);
    poison_backward(*L, 0, saved);
    ASSERT_TRUE(L->run_backward_composition(false).is_ok());
    ASSERT_TRUE(L->finish().is_ok());
    EXPECT_TRUE(read_grads(*L, 0) == fused) << "fused gradients differ from the unfused composition";
  }
}
