// The MoE planner's claim-order helpers (src/ops/moe_plan.h): slot runs cut into claim steps cover
// every run exactly once and in order, and the run / group choice outside the decode regime comes
// from the raster planner at W = 1 (runs of one slot for the Qwen3 proxy's GEMM1 at T = 4096, which
// the makespan-only choice ran in runs of 7) and from the makespan model at W > 1.
#include <gtest/gtest.h>

#include <cstring>

#include "kernels/gemm/gemm_host.h"
#include "ops/moe_plan.h"

using namespace kosmos;
using namespace kosmos::ops::moe;

TEST(MoeSlotSteps, EveryRunInExactlyOneStepInOrder) {
  for (uint32_t slots : {1u, 7u, 64u, 321u})
    for (uint32_t run : {1u, 2u, 7u})
      for (int64_t expected : {int64_t(1), int64_t(40), int64_t(500)})
        for (uint32_t group : {1u, 2u, 3u, 8u}) {
          const SlotSteps st{make_slot_runs(slots, run, expected), group};
          uint32_t next = 0;
          for (uint32_t s = 0; s < st.size(); ++s) {
            ASSERT_EQ(st.first_run(s), next) << "step " << s;
            ASSERT_LT(st.first_run(s), st.end_run(s)) << "empty step " << s;
            ASSERT_LE(st.end_run(s) - st.first_run(s), group);
            for (uint32_t r = st.first_run(s); r < st.end_run(s); ++r) ASSERT_EQ(st.of_run(r), s) << "run " << r;
            // only head runs are grouped: a tail run (expected empty) is a step of its own
            if (st.first_run(s) >= st.runs.head_runs()) ASSERT_EQ(st.end_run(s), st.first_run(s) + 1);
            next = st.end_run(s);
          }
          ASSERT_EQ(next, st.runs.size()) << "slots " << slots << " run " << run << " group " << group;
        }
}

namespace {
// The forward GEMM1 of the Qwen3-235B proxy on one rank (W = 1): 128 experts, H = 4096, 2I = 3072,
// worst-case rows T k plus a padding slot per expert, as moe_layer.cpp plans it.
kernels::gemm::GemmParams qwen_gemm1(int64_t T) {
  kernels::gemm::GemmDesc d;
  d.m = T * 8;
  d.n = 3072;
  d.k = 4096;
  d.lda = d.k;
  d.ldb = d.n;
  d.ldc = d.n / 2;
  d.num_groups = 128;
  d.epilogue = kernels::gemm::kGemmEpiSwiGLU;
  d.num_sms = 132;
  d.a = d.b = d.c = reinterpret_cast<void*>(uintptr_t(4096));
  d.group_m = d.group_offset = reinterpret_cast<const int32_t*>(uintptr_t(4096));
  d.encode_tma = false;
  kernels::gemm::GemmParams p;
  const Status s = kernels::gemm::make_gemm_params(d, &p);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  return p;
}
}  // namespace

TEST(MoeSlotRaster, PlannerChoiceOutsideDecodeOverridesAndDecodeRuns) {
  const kernels::gemm::GemmParams p = qwen_gemm1(4096);
  const SlotRaster chosen = slot_raster(p, 4096 * 8, 384, 12, 1, 132, false, 0);
  // 2.5 slots per expert: a run down M re-reads its expert's 2 MB weight block per slot; one-slot
  // runs claimed n-major read it once per expert (the estimate: 4.7 vs 8.4 GB).
  EXPECT_EQ(chosen.run, 1u) << chosen.describe;
  EXPECT_NE(chosen.describe.find("along M"), std::string::npos) << chosen.describe;  // counters are per slot run
  const SlotRaster set = slot_raster(p, 4096 * 8, 384, 12, 1, 132, false, 7);
  EXPECT_EQ(set.run, 7u);
  EXPECT_EQ(set.group, 1u);
  const SlotRaster decode = slot_raster(qwen_gemm1(128), 128 * 8, 136, 12, 1, 132, true, 0);
  EXPECT_EQ(decode.run, 1u);
  EXPECT_EQ(decode.group, 1u);
  // W > 1 virtual ranks share the L2 the estimate assumes one rank has: the makespan choice, as before
  // (Qwen3 W = 8: 272 expected slots, 12 n tiles, 16 CTAs per rank -> runs of 4).
  const SlotRaster w8 = slot_raster(p, 4096 * 8, 272, 12, 8, 16, false, 0);
  EXPECT_EQ(w8.run, 4u) << w8.describe;
  EXPECT_EQ(w8.group, 1u);
  // A claim group set: taken as given with the planner's run, with a set run, and in the decode regime.
  const SlotRaster grouped = slot_raster(p, 4096 * 8, 384, 12, 1, 132, false, 0, 2);
  EXPECT_EQ(grouped.run, chosen.run);
  EXPECT_EQ(grouped.group, 2u);
  EXPECT_NE(grouped.describe.find("claim groups of 2 runs (set)"), std::string::npos) << grouped.describe;
  EXPECT_EQ(slot_raster(p, 4096 * 8, 384, 12, 1, 132, false, 7, 3).group, 3u);
  EXPECT_EQ(slot_raster(qwen_gemm1(128), 128 * 8, 136, 12, 1, 132, true, 0, 5).group, 5u);
}

// The combine's cut: whole multiples of the op kernel's 12 warps (one warp per token), about four
// tasks per CTA; an override is taken as given.
TEST(MoeCombineCut, TokensPerTaskFillEveryWarp) {
  MoeConfig c;
  c.world = 1;
  c.tokens = 4096;
  EXPECT_EQ(combine_tokens_per_task(c, 132), 12u);  // 4096 / 528 = 7.8 -> 12: 342 tasks, not 512 of 8
  c.tokens = 16384;
  EXPECT_EQ(combine_tokens_per_task(c, 132), 36u);  // 31.03 -> 32 -> 36
  c.tokens = 1;
  EXPECT_EQ(combine_tokens_per_task(c, 132), 12u);  // one task for the token
  c.world = 8;
  c.tokens = 4096;
  EXPECT_EQ(combine_tokens_per_task(c, 132), 72u);  // 66 tasks per rank: 62.06 -> 63 -> 72
  c.combine_tokens_per_task = 5;
  EXPECT_EQ(combine_tokens_per_task(c, 132), 5u);
  c.combine_tokens_per_task = 0;
  c.world = 2;
  for (int ctas : {1, 7, 132})
    for (int tokens : {1, 100, 4096}) {
      c.tokens = tokens;
      const uint32_t tpt = combine_tokens_per_task(c, ctas);
      EXPECT_EQ(tpt % uint32_t(ops::kOpKernelWarps), 0u) << ctas << " " << tokens;
      EXPECT_GE(tpt, 1u);
    }
}

TEST(MoeRouteChunks, ChosenFromTheEntriesAndCapped) {
  MoeConfig c;
  EXPECT_EQ(c.route_chunks, 0);  // chosen unless asked
  c.tokens = 4096;
  c.top_k = 8;
  EXPECT_EQ(route_chunks(c), 16u);  // 32768 entries: 2048 each
  c.tokens = 128;
  EXPECT_EQ(route_chunks(c), 1u);  // decode sizes keep one task
  c.tokens = 1024;
  EXPECT_EQ(route_chunks(c), 4u);
  c.tokens = 1 << 20;
  EXPECT_EQ(route_chunks(c), kernels::kMaxRouteChunks);
  c.route_chunks = 3;
  EXPECT_EQ(route_chunks(c), 3u);
}

TEST(MoeRouteChunks, DispatchWaitsForEveryChunk) {
  // Every rank task of s waits for all of s's count tasks; dispatch of s waits for the routed
  // counter of s, which exactly the C rank tasks of s signal; only rank chunk 0 pushes counts.
  for (uint32_t C : {1u, 2u, 5u}) {
    MoeConfig c;
    c.world = 3;
    c.num_experts = 6;
    c.top_k = 2;
    c.tokens = 50;
    c.route_chunks = int(C);
    std::vector<TaskRec> tasks;
    const FrontCounters fc{0, 1, 2, 10, 3, 4};  // counts, layout, arrive_all, arrive, counted, routed
    auto moe_args = [](uint32_t a, uint32_t b, uint32_t cc) {
      kernels::MoeArgs m{};
      m.a = a, m.b = b, m.c = cc;
      return m;
    };
    auto add = [&](plan::TaskKind kind, uint32_t rank, const void* args, size_t bytes, int phase) -> TaskRec& {
      return add_task(tasks, kind, rank, args, bytes, phase);
    };
    add_front_tasks(c, 8, {0, 1, 2, 3}, fc, moe_args, add);
    auto has_wait = [](const TaskRec& t, uint32_t counter) {
      for (const auto& w : t.waits)
        if (w.counter == counter && w.target == plan::kWaitAll) return true;
      return false;
    };
    std::vector<uint32_t> counted(3, 0), routed(3, 0), counts(3, 0);
    uint32_t routes = 0, dispatches = 0;
    for (const TaskRec& t : tasks) {
      for (const auto& s : t.signals) {
        if (s.counter == fc.counted || s.counter == fc.routed) EXPECT_EQ(s.rank, t.rank);
        if (s.counter == fc.counted) counted[s.rank] += s.amount;
        if (s.counter == fc.routed) routed[s.rank] += s.amount;
        if (s.counter == fc.counts) counts[s.rank] += s.amount;
      }
      if (t.kind == plan::TaskKind::kMoeRoute) {
        ++routes;
        kernels::MoeArgs a;
        std::memcpy(&a, t.args, sizeof(a));
        EXPECT_EQ(a.a >> 16, C);
        const bool rank_stage = C == 1 || a.b == kernels::kMoeRouteStageRank;
        EXPECT_EQ(has_wait(t, fc.counted), C > 1 && rank_stage) << "C=" << C;
        bool pushes = false;
        for (const auto& s : t.signals) pushes |= s.counter == fc.counts;
        EXPECT_EQ(pushes, rank_stage && (a.a & 0xFFFFu) == 0) << "C=" << C;
      }
      if (t.kind == plan::TaskKind::kMoeDispatch) {
        ++dispatches;
        EXPECT_TRUE(has_wait(t, fc.routed)) << "C=" << C;
      }
    }
    EXPECT_EQ(routes, (C > 1 ? 2 : 1) * C * 3);
    EXPECT_GT(dispatches, 0u);
    for (uint32_t r = 0; r < 3; ++r) {
      EXPECT_EQ(counted[r], C > 1 ? C : 0u) << "C=" << C;
      EXPECT_EQ(routed[r], C) << "C=" << C;
      EXPECT_EQ(counts[r], 3u) << "C=" << C;  // one push per source rank
    }
  }
}
