// MoE forward on the CPU executor with virtual ranks W in {1, 2, 4, 8}: against fp64, fused ==
// unfused composition bit for bit, uniform and skewed routing (empty experts), dropped slots,
// T from 1; bad configurations named.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "../moe_check.h"

using namespace kosmos;
using namespace kosmos::test;

namespace {
struct ClaimOrder {
  int gemm1_run = 0, gemm2_run = 0, gemm2_lag = 0, gemm2_n_run = 0, route_chunks = 0, gemm1_group = 0, gemm2_group = 0;
  int gemm1_expert_major = -1;  // -1: MoeConfig's default
  int gemm2_expert_major = -1;  // -1: MoeConfig's default
};
void run_moe(int W, int64_t T, int E, int k, Routing routing, int64_t H = 64, int64_t I = 32, int epb = 0, int tpt = 0,
             int slices = 0, ClaimOrder order = {}) {
  MoeConfig c = moe_config(W, T, H, I, E, k, true);
  c.dispatch_experts_per_task = epb;
  c.combine_tokens_per_task = tpt;
  c.dispatch_slices = slices;
  c.gemm1_run = order.gemm1_run;
  c.gemm2_run = order.gemm2_run;
  c.gemm2_lag = order.gemm2_lag;
  c.gemm2_n_run = order.gemm2_n_run;
  c.route_chunks = order.route_chunks;
  c.gemm1_group = order.gemm1_group;
  c.gemm2_group = order.gemm2_group;
  if (order.gemm1_expert_major >= 0) c.gemm1_expert_major = order.gemm1_expert_major;
  if (order.gemm2_expert_major >= 0) c.gemm2_expert_major = order.gemm2_expert_major;
  std::unique_ptr<MoeLayer> L;
  Status s = MoeLayer::plan(c, &L);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  // A knob that did not reach the plan would test nothing new.
  if (order.gemm1_expert_major == 1) ASSERT_NE(L->describe().find("GEMM1 expert-major"), std::string::npos) << L->describe();
  if (order.gemm2_expert_major == 1) ASSERT_NE(L->describe().find("GEMM2 expert-major"), std::string::npos) << L->describe();
  MoeHost h{c};
  fill_moe(*L, h, 1000 + 17 * W + T + E + k, routing);
  for (int rep = 0; rep < 2; ++rep) {  // twice: epochs advance without a reset
    s = L->run_composition(true);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
  }
  const std::string what = "W=" + std::to_string(W) + " T=" + std::to_string(T) + " E=" + std::to_string(E) +
                           " k=" + std::to_string(k) + " routing=" + std::to_string(int(routing)) + " " + L->describe();
  EXPECT_EQ(check_moe(*L, h), "") << what;
  std::vector<std::vector<uint16_t>> fused(W);
  for (int r = 0; r < W; ++r) fused[r] = read_y(*L, r);
  poison(*L);
  s = L->run_composition(false);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  for (int r = 0; r < W; ++r)
    EXPECT_TRUE(read_y(*L, r) == fused[r]) << what << ": fused y of rank " << r << " differs from the unfused composition";
}
}  // namespace

class MoeCpu : public ::testing::TestWithParam<std::tuple<int, Routing>> {};

TEST_P(MoeCpu, MatchesFp64AndUnfusedBitForBit) {
  auto [W, routing] = GetParam();
  run_moe(W, 1, 8, 2, routing);             // one token
  run_moe(W, 37, 32, 8, routing);           // E = 32, k = 8, ragged groups
  run_moe(W, 20, 16, 4, routing, 128, 48);  // wider H, I = 48
}

INSTANTIATE_TEST_SUITE_P(Worlds, MoeCpu,
                         ::testing::Combine(::testing::Values(1, 2, 4, 8),
                                            ::testing::Values(Routing::kUniform, Routing::kSkewed, Routing::kSkewedWithDrops)),
                         [](const auto& info) {
                           return "W" + std::to_string(std::get<0>(info.param)) + "_" + routing_name(std::get<1>(info.param));
                         });

TEST(MoeCpuShapes, ManyRowsPerExpertAndTaskSizes) {
  // > 128 rows per group (several slots per expert), one-expert and one-token tasks.
  run_moe(2, 300, 4, 2, Routing::kSkewed, 64, 32, 1, 1);
  run_moe(4, 64, 8, 8, Routing::kUniform, 64, 32, 2, 7);
  run_moe(2, 150, 8, 4, Routing::kSkewedWithDrops, 64, 32, 3, 5, 7);  // rows split over 7 dispatch slices
  run_moe(1, 3, 1, 1, Routing::kUniform);  // a single expert
}

TEST(MoeCpuShapes, ClaimOrderKnobsLeaveTheResultUnchanged) {
  // Run lengths and the GEMM2 lag only reorder tasks: every order must give the fp64-checked
  // result and equal the unfused composition (run_moe checks both), including one-slot runs and
  // every GEMM2 task queued after every GEMM1 task.
  run_moe(2, 150, 8, 4, Routing::kSkewed, 64, 32, 0, 0, 0, {1, 1, 1});
  run_moe(2, 150, 8, 4, Routing::kSkewed, 64, 32, 0, 0, 0, {3, 16, 1000});
  run_moe(4, 64, 8, 8, Routing::kSkewedWithDrops, 64, 32, 0, 0, 0, {16, 2, 2});
  // Claim groups set (one slot per group, a few, more than there are runs), with and without runs set.
  run_moe(1, 150, 8, 4, Routing::kSkewed, 64, 32, 0, 0, 0, {0, 0, 0, 0, 0, 3, 5});
  run_moe(2, 150, 8, 4, Routing::kSkewedWithDrops, 64, 32, 0, 0, 0, {2, 1, 0, 0, 0, 1, 1024});
  // GEMM2 tasks walking n tiles along N (one-slot runs): H = 640 is not a multiple of any tile
  // width, so some runs end in a partial one, and 16 is capped at the tile count.
  for (int n_run : {2, 4, 16}) {
    run_moe(2, 150, 8, 4, Routing::kSkewed, 640, 32, 0, 0, 0, {0, 1, 0, n_run});
    run_moe(1, 37, 8, 8, Routing::kSkewedWithDrops, 640, 48, 0, 0, 0, {1, 1, 1, n_run});
  }
  // GEMM1 expert-major (one-slot runs claimed one by one): each task's tile is remapped at run time
  // (an expert's slots at one n block back to back), GEMM2 waits for all of GEMM1. Three GEMM1 n
  // blocks (I = 320: 640 gate / up columns), ~150 rows per expert (two slots, the second short:
  // merged where both GEMMs run 128 x 256 tiles), empty experts and dropped slots, two ranks.
  for (int W : {1, 2})
    for (Routing r : {Routing::kUniform, Routing::kSkewed, Routing::kSkewedWithDrops})
      for (int em : {0, 1}) run_moe(W, 300, 4, 2, r, 640, 320, 0, 0, 0, {1, 0, 0, 0, 0, 1, 0, em});
  // GEMM2 expert-major too (one-slot GEMM2 runs claimed one by one; H = 640: three n blocks, the last
  // partial), after an expert-major GEMM1; without one it does not apply.
  for (int W : {1, 2})
    for (Routing r : {Routing::kSkewed, Routing::kSkewedWithDrops})
      run_moe(W, 300, 4, 2, r, 640, 320, 0, 0, 0, {1, 1, 0, 0, 0, 1, 1, 1, 1});
  MoeConfig c = moe_config(1, 300, 640, 320, 4, 2, true);
  c.gemm1_run = c.gemm1_group = c.gemm2_run = c.gemm2_group = 1;
  c.gemm1_expert_major = 0;
  c.gemm2_expert_major = 1;
  std::unique_ptr<MoeLayer> L;
  ASSERT_TRUE(MoeLayer::plan(c, &L).is_ok());
  EXPECT_EQ(L->describe().find("expert-major"), std::string::npos) << L->describe();
}

TEST(MoeCpuShapes, RouteChunksLeaveTheResultUnchanged) {
  // Route split over C chunks (count, then rank tasks): same pos / perm as one pass, so the
  // fp64-checked result and the unfused composition's, with drops, empty experts, uneven chunks
  // and chunks with no entries (C = 16 > T k at T = 3).
  for (int C : {2, 3, 16}) {
    run_moe(2, 150, 8, 4, Routing::kSkewedWithDrops, 64, 32, 0, 0, 0, {0, 0, 0, 0, C});
    run_moe(4, 37, 32, 8, Routing::kUniform, 64, 32, 0, 0, 0, {0, 0, 0, 0, C});
    run_moe(1, 3, 8, 1, Routing::kSkewed, 64, 32, 0, 0, 0, {0, 0, 0, 0, C});
  }
  // The unfused composition has no counters: the count tasks need their own launch before the rank
  // tasks (on the GPU they ran together and the ranks read half-written counts; this executor ran
  // them in order and could not see it). One chunk: no count launch.
  for (int C : {1, 4}) {
    MoeConfig c = moe_config(2, 150, 64, 32, 8, 4, true);
    c.route_chunks = C;
    std::unique_ptr<MoeLayer> L;
    ASSERT_TRUE(MoeLayer::plan(c, &L).is_ok());
    const auto names = L->phase_names(false);
    ASSERT_FALSE(names.empty());
    EXPECT_EQ(names.front(), C > 1 ? "route count" : "route") << C;
    EXPECT_EQ(names.size(), C > 1 ? 7u : 6u) << C;
  }
}

TEST(MoeCpuShapes, Gemm2RunsAlongNArePlanned) {
  // The knob above must reach the plan (or those runs test nothing new): with one-slot GEMM2 runs
  // the summary names the n tiles per task; with longer slot runs it is ignored.
  for (auto [slots, n_run, want] : {std::tuple{1, 2, "GEMM2 2 n tiles per task"}, {1, 0, "GEMM2 1 n tiles per task"},
                                    {2, 4, "GEMM2 1 n tiles per task"}}) {
    MoeConfig c = moe_config(2, 150, 640, 32, 8, 4, true);
    c.gemm2_run = slots;
    c.gemm2_n_run = n_run;
    std::unique_ptr<MoeLayer> L;
    ASSERT_TRUE(MoeLayer::plan(c, &L).is_ok());
    EXPECT_NE(L->describe().find(want), std::string::npos) << L->describe();
  }
  MoeConfig c = moe_config(1, 4, 64, 32, 8, 2, true);
  c.gemm2_n_run = 17;
  std::unique_ptr<MoeLayer> L;
  const Status s = MoeLayer::plan(c, &L);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.to_string().find("gemm2_n_run = 17"), std::string::npos) << s.to_string();
  c.gemm2_n_run = 0;
  c.gemm1_expert_major = 2;
  const Status s2 = MoeLayer::plan(c, &L);
  EXPECT_NE(s2.to_string().find("gemm1_expert_major = 2"), std::string::npos) << s2.to_string();
  c.gemm1_expert_major = 1;
  c.gemm2_expert_major = -1;
  const Status s3 = MoeLayer::plan(c, &L);
  EXPECT_NE(s3.to_string().find("gemm2_expert_major = -1"), std::string::npos) << s3.to_string();
}

TEST(MoeCpu, PhaseByPhaseIsTheUnfusedComposition) {
  // run_phase over every phase in order (the bench's --phase-times) computes what the fused launch
  // does; an index past the last phase is an error that names the count.
  MoeConfig c = moe_config(2, 40, 64, 32, 8, 4, true);
  std::unique_ptr<MoeLayer> L;
  ASSERT_TRUE(MoeLayer::plan(c, &L).is_ok());
  MoeHost h{c};
  fill_moe(*L, h, 4711, Routing::kSkewed);
  ASSERT_TRUE(L->run_composition(true).is_ok());
  std::vector<std::vector<uint16_t>> fused(2);
  for (int r = 0; r < 2; ++r) fused[r] = read_y(*L, r);
  poison(*L);
  const std::vector<std::string>& names = L->phase_names();
  ASSERT_EQ(names.size(), 6u);
  EXPECT_EQ(names.front(), "route");
  EXPECT_EQ(names.back(), "combine");
  for (size_t i = 0; i < names.size(); ++i) ASSERT_TRUE(L->run_phase(i).is_ok()) << names[i];
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(read_y(*L, r) == fused[r]) << "rank " << r;
  const Status s = L->run_phase(names.size());
  EXPECT_NE(s.message().find("phase 6 out of range (6 phases)"), std::string::npos) << s.message();
  EXPECT_NE(L->run_phase(0, true).message().find("without MoeConfig::backward"), std::string::npos);
}

TEST(MoeCpu, PhaseTracesCoverEachLaunchsTasks) {
  // With cfg.trace, each unfused launch's trace has one finished record per task of that launch,
  // and phase_task_labels names them as the fused plan's labels do (bench moe --trace-svg prints
  // both, to set the same tiles in the fused launch against their own launch).
  MoeConfig c = moe_config(2, 40, 64, 32, 8, 4, true);
  c.trace = true;
  std::unique_ptr<MoeLayer> L;
  ASSERT_TRUE(MoeLayer::plan(c, &L).is_ok());
  MoeHost h{c};
  fill_moe(*L, h, 4712, Routing::kUniform);
  ASSERT_TRUE(L->run_composition(false).is_ok());
  const std::vector<std::string>& names = L->phase_names();
  size_t total = 0;
  std::vector<std::string> seen;
  for (size_t i = 0; i < names.size(); ++i) {
    std::vector<runtime::TraceRecord> tr;
    ASSERT_TRUE(L->read_phase_trace(i, &tr).is_ok()) << names[i];
    const std::vector<std::string>& labels = L->phase_task_labels(i);
    ASSERT_EQ(tr.size(), labels.size()) << names[i];
    std::vector<int> hits(labels.size(), 0);
    for (const auto& r : tr) {
      ASSERT_LT(r.task_id, labels.size()) << names[i];
      EXPECT_GE(r.end_ns, r.start_ns) << names[i];
      ++hits[r.task_id];
    }
    for (size_t t = 0; t < hits.size(); ++t) EXPECT_EQ(hits[t], 1) << names[i] << " task " << t;
    total += labels.size();
    seen.insert(seen.end(), labels.begin(), labels.end());
  }
  EXPECT_EQ(total, L->num_tasks(false));
  // the same multiset of labels as the fused plan's tasks
  std::vector<std::string> fused = L->task_labels();
  std::sort(fused.begin(), fused.end());
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, fused);
  std::vector<runtime::TraceRecord> tr;
  EXPECT_NE(L->read_phase_trace(names.size(), &tr).message().find("out of range"), std::string::npos);
  EXPECT_TRUE(L->phase_task_labels(names.size()).empty());
}

TEST(MoeCpu, EveryGemmLabelHasItsFlopsPerRow) {
  // MoeLayer::gemm_flops_per_row names each GEMM label of the plans (the bench's tensor column):
  // every "gemm ..." label of both directions has an entry, with the problem's 2 N K per routed row
  // (grouped over M) or 2 M N (the grouped-K weight gradients). Recomputing and saving backward.
  const int64_t H = 64, I = 32;
  const double gate_up = 2.0 * H * 2 * I, down = 2.0 * I * H;
  for (bool saved : {false, true}) {
    MoeConfig c = moe_config(2, 40, H, I, 8, 4, true);
    c.backward = true;
    c.save_activations = saved;
    std::unique_ptr<MoeLayer> L;
    ASSERT_TRUE(MoeLayer::plan(c, &L).is_ok());
    for (bool backward : {false, true}) {
      const std::map<std::string, double>& f = L->gemm_flops_per_row(backward);
      size_t gemm_labels = 0;
      for (const std::string& label : L->task_labels(backward)) {
        if (label.rfind("gemm ", 0) != 0) continue;
        ++gemm_labels;
        EXPECT_EQ(f.count(label), 1u) << label << (backward ? " (backward)" : "");
      }
      EXPECT_GT(gemm_labels, 0u);
      const std::map<std::string, double> want =
          backward ? (saved ? std::map<std::string, double>{{"gemm dA'", down},
                                                            {"gemm dX", gate_up},
                                                            {"gemm dDown", down},
                                                            {"gemm dGateUp", gate_up}}
                            : std::map<std::string, double>{{"gemm H1 (recompute)", gate_up},
                                                            {"gemm dA'", down},
                                                            {"gemm dX", gate_up},
                                                            {"gemm dDown", down},
                                                            {"gemm dGateUp", gate_up}})
                   : std::map<std::string, double>{
                         {saved ? "gemm GEMM1 gate_up+SwiGLU (saves h1)" : "gemm GEMM1 gate_up+SwiGLU", gate_up},
                         {"gemm GEMM2 down", down}};
      for (const auto& [label, flops] : want) {
        ASSERT_EQ(f.count(label), 1u) << label << (saved ? " (saved)" : "");
        EXPECT_EQ(f.at(label), flops) << label << (saved ? " (saved)" : "");
      }
    }
  }
}

TEST(MoeCpu, InterleaveHelperMatchesTheEngineLayout) {
  const int64_t H = 3, I = 16;
  std::vector<uint16_t> plain(H * 2 * I), inter(H * 2 * I);
  for (size_t i = 0; i < plain.size(); ++i) plain[i] = uint16_t(i);
  moe_interleave_gate_up(plain.data(), inter.data(), H, I);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t c = 0; c < I; ++c) {
      EXPECT_EQ(inter[h * 2 * I + 16 * (c / 8) + c % 8], plain[h * 2 * I + c]);
      EXPECT_EQ(inter[h * 2 * I + 16 * (c / 8) + 8 + c % 8], plain[h * 2 * I + I + c]);
    }
}

TEST(MoeCpuErrors, BadConfigsNamed) {
  MoeConfig c;
  c.cpu = true;
  c.world = 3;
  c.tokens = 4;
  c.hidden = 64;
  c.intermediate = 32;
  c.num_experts = 8;
  c.top_k = 2;
  std::unique_ptr<MoeLayer> L;
  Status s = MoeLayer::plan(c, &L);
  EXPECT_NE(s.message().find("num_experts = 8 is not divisible by the world size 3"), std::string::npos) << s.message();
  c.world = 2;
  c.hidden = 60;
  s = MoeLayer::plan(c, &L);
  EXPECT_NE(s.message().find("hidden = 60"), std::string::npos) << s.message();
  c.hidden = 64;
  c.top_k = 17;
  s = MoeLayer::plan(c, &L);
  EXPECT_NE(s.message().find("top_k = 17"), std::string::npos) << s.message();
  c.top_k = 2;
  c.route_chunks = 17;
  s = MoeLayer::plan(c, &L);
  EXPECT_NE(s.message().find("route_chunks = 17"), std::string::npos) << s.message();
  c.route_chunks = 0;
  c.tokens = 0;
  s = MoeLayer::plan(c, &L);
  EXPECT_NE(s.message().find("tokens = 0"), std::string::npos) << s.message();
  c.tokens = 4;
  c.num_experts = 512;
  s = MoeLayer::plan(c, &L);
  EXPECT_NE(s.message().find("num_experts = 512"), std::string::npos) << s.message();
  c.num_experts = 8;
  c.gemm1_run = 17;
  s = MoeLayer::plan(c, &L);
  EXPECT_NE(s.message().find("gemm1_run = 17"), std::string::npos) << s.message();
  c.gemm1_run = 0;
  c.gemm2_group = 1025;
  s = MoeLayer::plan(c, &L);
  EXPECT_NE(s.message().find("gemm2_group = 1025"), std::string::npos) << s.message();
  c.gemm2_group = 0;
  c.gemm2_lag = -1;
  s = MoeLayer::plan(c, &L);
  EXPECT_NE(s.message().find("gemm2_lag = -1"), std::string::npos) << s.message();
}

// Merged tails (kGemmMergeTails, MoeConfig::merge_tails): an expert's last row block of at most 32
// rows is computed by the GEMM1 and GEMM2 tiles of the block before it. Routing with last blocks of
// 1, 32 and 33 rows, exact multiples of 128, an empty expert and a lone short block (Routing::kTails),
// at H = 256, I = 128 (both GEMMs on 128 x 256 tiles, as merging needs): against fp64, fused == unfused,
// and the same y bit for bit with and without merging (the host tile sums every row in one order).
TEST(MoeCpuMergedTails, SameOutputsMergedOrNot) {
  int sum = 0;
  for (int c : kTailCounts) sum += c;
  ASSERT_EQ(sum, 579 * 2);  // T k of the runs below
  for (int W : {1, 2}) {
    std::vector<uint16_t> y[2];
    for (int merge = 1; merge >= 0; --merge) {
      MoeConfig c = moe_config(W, 579, 256, 128, 8, 2, true);
      c.merge_tails = merge != 0;
      c.max_ctas = 4;  // few CTAs: the tile heuristic picks 128 x 256 for both GEMMs (merging needs it)
      std::unique_ptr<MoeLayer> L;
      Status s = MoeLayer::plan(c, &L);
      ASSERT_TRUE(s.is_ok()) << s.to_string();
      EXPECT_EQ(L->describe().find("tails of <= 32 rows merged") != std::string::npos, merge != 0) << L->describe();
      MoeHost h{c};
      fill_moe(*L, h, 4242 + W, Routing::kTails);
      ASSERT_TRUE(L->run_composition(true).is_ok());
      EXPECT_EQ(check_moe(*L, h), "") << "W=" << W << " merge=" << merge << " " << L->describe();
      y[merge] = read_y(*L, W - 1);
      poison(*L);
      ASSERT_TRUE(L->run_composition(false).is_ok());
      EXPECT_TRUE(read_y(*L, W - 1) == y[merge]) << "W=" << W << " merge=" << merge << ": fused y differs from the unfused composition";
    }
    EXPECT_TRUE(y[0] == y[1]) << "W=" << W << ": y differs with and without merged tails";
  }
}
