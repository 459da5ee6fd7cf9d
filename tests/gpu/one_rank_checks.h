// Checks shared by the transports' one-rank GPU tests (NCCL, peer access): every TP op and the MoE
// forward planned with plan_distributed over `dist`, run several times (barrier-separated epochs),
// against fp64. Call from a TEST body after SKIP_WITHOUT_GPU().
#pragma once

#include <gtest/gtest.h>

#include "../moe_check.h"
#include "../tp_check.h"

namespace kosmos::test {

inline void expect_every_tp_op_one_rank(const TpDistributed& dist, uint32_t seed) {
  for (TpOp op : {TpOp::kAgGemm, TpOp::kGemmRs, TpOp::kGemmAr, TpOp::kColParallelBwd, TpOp::kRowParallelBwd}) {
    TpConfig c;
    c.op = op;
    c.world = 1;
    c.m = 1000;
    c.n = 264;
    c.k = 520;
    std::unique_ptr<TpLayer> L;
    Status s = TpLayer::plan_distributed(c, dist, &L);
    ASSERT_TRUE(s.is_ok()) << to_string(op) << ": " << s.to_string();
    TpHost h{c};
    fill_inputs(*L, h, seed, 0);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(L->run(nullptr).is_ok());
    s = L->finish(nullptr);
    ASSERT_TRUE(s.is_ok()) << to_string(op) << ": " << s.to_string();
    read_outputs(*L, h, 0);
    EXPECT_EQ(check_tp(h, 1e-2, 0), "") << to_string(op);
  }
}

inline void expect_moe_forward_one_rank(const DistributedContext& dist, uint32_t seed) {
  MoeConfig c = moe_config(1, 100, 256, 128, 16, 4, false);
  std::unique_ptr<MoeLayer> L;
  Status s = MoeLayer::plan_distributed(c, dist, &L);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  MoeHost h{c};
  fill_moe(*L, h, seed, Routing::kSkewed, 0);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(L->run_composition(true).is_ok());
  s = L->finish();
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_EQ(check_moe(*L, h, 1e-2, 0), "");
}

}  // namespace kosmos::test
