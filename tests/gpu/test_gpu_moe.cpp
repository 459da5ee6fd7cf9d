// MoE forward and backward on the H200 with virtual ranks W in {1, 8}: against fp64 and the
// unfused composition bit for bit (uniform and skewed routing, poisoned outputs and workspaces,
// padding rows included), and replayed from a CUDA graph.
#include <cuda_runtime_api.h>
#include <cstdlib>
#include <string>
#include <gtest/gtest.h>

#include "../graph_replay.h"
#include "../moe_check.h"
#include "gpu_skip.h"
#include "kosmos/runtime.h"

using namespace kosmos;
using namespace kosmos::test;

namespace {
// gemm2_n_run > 0: one-slot GEMM2 runs, each task walking that many n tiles along N; combine_tpt > 0:
// tokens per combine task.
void run_moe(int W, int64_t T, int64_t H, int64_t I, int E, int k, Routing routing, int graph_replays = 0,
             int gemm2_n_run = 0, int combine_tpt = 0, int route_chunks = 0,
             std::vector<std::vector<uint16_t>>* y_out = nullptr, bool merge_tails = true, int max_ctas = 0,
             const char* expect_in_plan = nullptr, int expert_major = -1) {
  MoeConfig c = moe_config(W, T, H, I, E, k, false);
  if (expert_major >= 0) {  // one-slot GEMM1 runs claimed one by one, remapped expert-major (bit 0) or not
    c.gemm1_run = 1;
    c.gemm1_group = 1;
    c.gemm1_expert_major = expert_major & 1;
    c.gemm2_expert_major = (expert_major >> 1) & 1;  // GEMM2's too (bit 1; it is MoeConfig's default)
    if (expert_major & 2) {
      c.gemm2_run = 1;
      c.gemm2_group = 1;
    }
  }
  c.combine_tokens_per_task = combine_tpt;
  c.route_chunks = route_chunks;
  c.merge_tails = merge_tails;
  c.max_ctas = max_ctas;
  if (gemm2_n_run > 0) {
    c.gemm2_run = 1;
    c.gemm2_n_run = gemm2_n_run;
  }
  std::unique_ptr<MoeLayer> L;
  Status s = MoeLayer::plan(c, &L);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  if (expect_in_plan != nullptr) EXPECT_NE(L->describe().find(expect_in_plan), std::string::npos) << L->describe();
  MoeHost h{c};
  fill_moe(*L, h, 4242 + W + T + E, routing);
  cudaStream_t st;
  ASSERT_EQ(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), cudaSuccess);
  if (graph_replays) {  // first run outside the graph (parameters uploaded), then a poisoned start
    ASSERT_TRUE(L->run_composition(true, st).is_ok());
    ASSERT_TRUE(L->finish(st).is_ok());
    poison(*L);
  }
  run_graph_or_twice(st, graph_replays, [&] { return L->run_composition(true, st); });
  if (::testing::Test::HasFatalFailure()) return;
  s = L->finish(st);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  const std::string what = "W=" + std::to_string(W) + " T=" + std::to_string(T) + " E=" + std::to_string(E) + " k=" +
                           std::to_string(k) + " " + L->describe();
  EXPECT_EQ(check_moe(*L, h), "") << what;
  std::vector<std::vector<uint16_t>> fused(W);
  for (int r = 0; r < W; ++r) fused[r] = read_y(*L, r);
  poison(*L);
  ASSERT_TRUE(L->run_composition(false, st).is_ok());
  s = L->finish(st);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  cudaStreamDestroy(st);
  for (int r = 0; r < W; ++r)
    EXPECT_TRUE(read_y(*L, r) == fused[r]) << what << ": fused y of rank " << r << " differs from the unfused composition";
  if (y_out) *y_out = std::move(fused);
}
}  // namespace

class GpuMoe : public ::testing::TestWithParam<std::tuple<int, Routing>> {};

TEST_P(GpuMoe, MatchesFp64AndUnfusedBitForBit) {
  SKIP_WITHOUT_GPU();
  auto [W, routing] = GetParam();
  run_moe(W, 1, 256, 128, 16, 2, routing);     // one token
  run_moe(W, 200, 512, 256, 32, 8, routing);   // several slots per expert, E = 32, k = 8
  run_moe(W, 77, 264, 136, 8, 4, routing);     // H, I not multiples of the tile widths
}

TEST(GpuMoeRouteChunks, SameOutputsAndRouteWorkspace) {
  // Route split into count and rank tasks on the device: outputs against fp64 and the unfused
  // composition, and (check_moe) every rank's pos / perm equal to the one-pass definition.
  SKIP_WITHOUT_GPU();
  run_moe(1, 200, 512, 256, 32, 8, Routing::kSkewedWithDrops, 0, 0, 0, 5);
  run_moe(8, 77, 264, 136, 16, 4, Routing::kUniform, 0, 0, 0, 16);
  run_moe(2, 1024, 256, 128, 64, 8, Routing::kSkewed, 0, 0, 0, 0);  // chosen: 8192 entries, 4 chunks
}

INSTANTIATE_TEST_SUITE_P(Worlds, GpuMoe,
                         ::testing::Combine(::testing::Values(1, 8),
                                            ::testing::Values(Routing::kUniform, Routing::kSkewed, Routing::kSkewedWithDrops)),
                         [](const auto& info) {
                           return "W" + std::to_string(std::get<0>(info.param)) + "_" + routing_name(std::get<1>(info.param));
                         });

TEST(GpuMoeRuns, Gemm2TasksAlongN) {
  SKIP_WITHOUT_GPU();
  // H = 1320 is not a multiple of any tile width: the last n tile is partial and runs end short.
  for (int n_run : {2, 4}) {
    run_moe(1, 200, 1320, 256, 32, 8, Routing::kSkewed, 0, n_run);
    run_moe(8, 77, 1320, 136, 8, 4, Routing::kSkewedWithDrops, 0, n_run);
  }
}

TEST(GpuMoeGraph, FusedForwardReplaysFromACudaGraph) {
  SKIP_WITHOUT_GPU();
  run_moe(8, 128, 512, 256, 64, 8, Routing::kUniform, 20);
  run_moe(1, 64, 256, 128, 32, 4, Routing::kSkewed, 20);
}

namespace {
// Backward: every gradient against fp64 and the unfused composition (7 launches) bit for bit.
// dw_tile_n: the weight gradients' tile width (0: chosen).
void run_moe_backward(int W, int64_t T, int64_t H, int64_t I, int E, int k, Routing routing, int graph_replays = 0,
                      int combine_tpt = 0, int dw_tile_n = 0, bool dx_expert_major = false, bool combine_early = false) {
  MoeConfig c = moe_config(W, T, H, I, E, k, false);
  c.backward = true;
  c.backward_combine_early = combine_early ? 1 : 0;
  c.combine_tokens_per_task = combine_tpt;
  c.backward_dw_tile_n = dw_tile_n;
  if (dx_expert_major) {  // dX in one-slot runs claimed one by one, remapped expert-major
    c.backward_run = 1;
    c.backward_group = 1;
    c.backward_expert_major = 1;
  }
  std::unique_ptr<MoeLayer> L;
  Status s = MoeLayer::plan(c, &L);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  if (dx_expert_major) ASSERT_NE(L->describe().find("dX expert-major"), std::string::npos) << L->describe();
  if (combine_early) ASSERT_NE(L->describe().find("before dGateUp"), std::string::npos) << L->describe();
  MoeHost h{c};
  fill_moe_backward(*L, h, 5151 + W + T + E, routing);
  cudaStream_t st;
  ASSERT_EQ(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), cudaSuccess);
  if (graph_replays) {  // first run outside the graph (parameters uploaded), then a poisoned start
    ASSERT_TRUE(L->run_backward_composition(true, st).is_ok());
    ASSERT_TRUE(L->finish(st).is_ok());
    poison_backward(*L);
  }
  run_graph_or_twice(st, graph_replays, [&] { return L->run_backward_composition(true, st); });
  if (::testing::Test::HasFatalFailure()) return;
  s = L->finish(st);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  const std::string what = "W=" + std::to_string(W) + " T=" + std::to_string(T) + " H=" + std::to_string(H) +
                           " I=" + std::to_string(I) + " E=" + std::to_string(E) + " k=" + std::to_string(k) + " " +
                           L->describe();
  EXPECT_EQ(check_moe_backward(*L, h), "") << what;
  std::vector<MoeGradsOut> fused(W);
  for (int r = 0; r < W; ++r) fused[r] = read_grads(*L, r);
  poison_backward(*L);
  ASSERT_TRUE(L->run_backward_composition(false, st).is_ok());
  s = L->finish(st);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  cudaStreamDestroy(st);
  for (int r = 0; r < W; ++r)
    EXPECT_TRUE(read_grads(*L, r) == fused[r]) << what << ": fused gradients of rank " << r
                                               << " differ from the unfused composition";
}
}  // namespace

class GpuMoeBackward : public ::testing::TestWithParam<std::tuple<int, Routing>> {};

TEST_P(GpuMoeBackward, MatchesFp64AndUnfusedBitForBit) {
  SKIP_WITHOUT_GPU();
  auto [W, routing] = GetParam();
  run_moe_backward(W, 1, 256, 128, 16, 2, routing);    // one token: nearly every expert empty
  run_moe_backward(W, 200, 512, 256, 32, 8, routing);  // several slots and k blocks per expert
  run_moe_backward(W, 77, 264, 136, 8, 4, routing);    // H, I not multiples of the tile widths
}

INSTANTIATE_TEST_SUITE_P(Worlds, GpuMoeBackward,
                         ::testing::Combine(::testing::Values(1, 8),
                                            ::testing::Values(Routing::kUniform, Routing::kSkewed, Routing::kSkewedWithDrops)),
                         [](const auto& info) {
                           return "W" + std::to_string(std::get<0>(info.param)) + "_" + routing_name(std::get<1>(info.param));
                         });

// Combine tasks of many tokens (one task of 600: each warp walks 50), k = 10, rows of 33 16-byte
// vectors (lane 0 moves two, the others one), dropped slots; forward and backward.
TEST(GpuMoeWideTasks, ManyTokensPerCombineTaskTopK10) {
  SKIP_WITHOUT_GPU();
  run_moe(2, 600, 264, 136, 16, 10, Routing::kSkewedWithDrops, 0, 0, 600);
  run_moe_backward(2, 600, 264, 136, 16, 10, Routing::kSkewedWithDrops, 0, 600);
}

// Rows of 513 16-byte vectors (H = 4104): past 4096, where the dispatch on branch staged-copies
// splits a row into two staged chunks (the second of one vector, lane 0 alone), and where the
// register path's four-vector passes leave a one-vector tail; forward, backward (x and dy rows) and
// the saved backward (dy rows only).
TEST(GpuMoeWideRows, RowsOfTwoStagingChunks) {
  SKIP_WITHOUT_GPU();
  run_moe(1, 64, 4104, 128, 8, 4, Routing::kSkewed);
  run_moe(2, 48, 4104, 136, 8, 2, Routing::kSkewedWithDrops);
  run_moe_backward(1, 64, 4104, 128, 8, 4, Routing::kSkewed);
  cudaStream_t st;
  ASSERT_EQ(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), cudaSuccess);
  EXPECT_EQ(check_saved_activations(1, 64, 4104, 128, 8, 4, Routing::kSkewed, false, 64, st), "");
  cudaStreamDestroy(st);
}

TEST(GpuMoeBackwardGraph, FusedBackwardReplaysFromACudaGraph) {
  SKIP_WITHOUT_GPU();
  run_moe_backward(8, 128, 512, 256, 64, 8, Routing::kUniform, 20);
  run_moe_backward(1, 64, 256, 128, 32, 4, Routing::kSkewed, 20);
}

// Closer to the bench shapes that stopped with "fused backward output is not finite" (qwen3 /
// deepseek, W = 1) while the small shapes above passed: 128x256 tiles, K >= 1024 in dA' / dX,
// E = 128 local experts, k = 8, grouped-K runs crossing experts. The CPU executor passes these
// (MoeBackwardCpuLarge); a failure here that the CPU run does not show is in a device-only path.
TEST(GpuMoeBackwardLarge, WideTilesManyExperts) {
  SKIP_WITHOUT_GPU();
  run_moe_backward(1, 128, 1024, 512, 128, 8, Routing::kUniform);
  run_moe_backward(1, 256, 2048, 1024, 32, 8, Routing::kSkewed);
}

// Weight-gradient runs around one ring of k blocks (stage_walk.h): experts of ~300 rows (K =
// 257..320: five k blocks at 128 x 256, four stages), ~400 rows at 128 x 128 (seven blocks, six
// stages) and ~540 at 128 x 64 (nine, eight); dDown keeps A (runs along N), dGateUp keeps B (runs
// down M) where the rows fit one ring. Uniform routing puts experts on both sides of the boundary.
TEST(GpuMoeBackwardLarge, WeightGradientTilesOneBlockPastTheRing) {
  SKIP_WITHOUT_GPU();
  run_moe_backward(1, 300, 512, 256, 8, 8, Routing::kUniform, 0, 0, 256);
  run_moe_backward(1, 280, 512, 256, 8, 8, Routing::kSkewed, 0, 0, 256);
  run_moe_backward(1, 400, 512, 256, 8, 8, Routing::kUniform, 0, 0, 128);
  run_moe_backward(1, 540, 512, 256, 8, 8, Routing::kUniform, 0, 0, 64);
}

// MoeConfig::save_activations on the device (check_saved_activations, moe_check.h): GEMM1's
// pre-activation store (kGemmEpiSavePreact) and the dy-only dispatch; outputs bit for bit those of
// the recomputing layer, fused == unfused, vs fp64; W = 1 and 8 virtual ranks, 128x256 tiles.
TEST(GpuMoeBackwardSaved, SameOutputsAsRecomputeBitForBit) {
  SKIP_WITHOUT_GPU();
  cudaStream_t st;
  ASSERT_EQ(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), cudaSuccess);
  for (int W : {1, 8})
    for (Routing r : {Routing::kUniform, Routing::kSkewedWithDrops})
      EXPECT_EQ(check_saved_activations(W, 200, 512, 256, 32, 8, r, false, 61 + W, st), "");
  EXPECT_EQ(check_saved_activations(1, 77, 264, 136, 8, 4, Routing::kSkewed, false, 62, st), "");
  EXPECT_EQ(check_saved_activations(1, 256, 2048, 1024, 32, 8, Routing::kSkewed, false, 63, st), "");
  cudaStreamDestroy(st);
}

// Each claim-ahead mode of the op kernel (0: claim after the task; 1: GEMM tiles claim after
// their last load, the default; 2: every task claims its successor before its own body runs, so
// a GEMM tile's producer may wait for rows that a task of the same CTA has yet to release): the
// same outputs, fused and unfused, forward and backward.
TEST(GpuMoeClaimAhead, EveryModeSameOutputs) {
  SKIP_WITHOUT_GPU();
  for (const char* claim : {"0", "1", "2"}) {
    ScopedEnv c("KOSMOS_CLAIM_AHEAD", claim);
    SCOPED_TRACE(std::string("KOSMOS_CLAIM_AHEAD=") + claim);
    run_moe(8, 200, 512, 256, 32, 8, Routing::kSkewed);
    run_moe_backward(1, 200, 512, 256, 32, 8, Routing::kSkewedWithDrops);
  }
}

// Each publish mode of the runtime (GpuOptions::publish: thread 0 with red.release per signal, thread
// 0 with one fence and relaxed adds, warp 1 with one fence and relaxed adds while thread 0 claims):
// the same outputs, fused and unfused (each run checks fp64 and fused == unfused), forward at W = 8
// and the backward; with and without the ring carry in the fused layers.
TEST(GpuMoePublish, EveryModeSameOutputs) {
  SKIP_WITHOUT_GPU();
  for (const char* carry : {"1", "2"})
  for (const char* publish : {"0", "1", "2"}) {
    ScopedEnv c("KOSMOS_RING_CARRY", carry);
    ScopedEnv e("KOSMOS_PUBLISH", publish);
    SCOPED_TRACE(std::string("KOSMOS_PUBLISH=") + publish + " KOSMOS_RING_CARRY=" + carry);
    run_moe(8, 200, 512, 256, 32, 8, Routing::kSkewed);
    run_moe_backward(1, 200, 512, 256, 32, 8, Routing::kSkewedWithDrops);
  }
}

// Merged tails on the device (kGemmMergeTails: the GEMM tile of an expert's second-to-last row block
// also computes its last one, of at most 32 rows, as a swapped wgmma product on the B tile in shared
// memory). Routing::kTails gives last blocks of 1, 32 and 33 rows, exact multiples, an empty expert
// and a lone short block; H = 256, I = 128 put both GEMMs on 128 x 256 tiles. Each run against fp64
// and the unfused composition (bit for bit), merged and not; the two y agree to bf16 rounding. Then
// the saving forward (GEMM1 also stores the pre-activation of the tail rows) against the recomputing
// backward, and the Qwen3-like width (H = 1024, I = 384: 3 n tiles of GEMM1's SwiGLU, partial GEMM2).
// The ring carry (gemm_tile.cuh; docs/design/gemm.md, "Ring carry"): a GEMM task loads its CTA's
// next GEMM task's first k blocks under its own tail when that task is ready (its warp 1 claims that
// task). On by default in every launch (KOSMOS_RING_CARRY=2), against 0 (off everywhere). Forward at W = 8
// (GEMM1 -> GEMM1, GEMM1 -> GEMM2 waiting on H, GEMM2 -> GEMM2 hand-overs) and W = 1 with H, I off the
// tile widths and merged tails; the backward (dX, grouped-K weight gradients: kept operands, empty
// groups). Each run against fp64 and the unfused composition; y the same bit for bit with and
// without the carry.
TEST(GpuRingCarry, SameOutputsWithAndWithout) {
  SKIP_WITHOUT_GPU();
  struct Case { int W; int64_t T, H, I; int E, k; Routing r; };
  for (const Case& c : {Case{8, 200, 512, 256, 32, 8, Routing::kSkewed}, Case{1, 77, 264, 136, 8, 4, Routing::kSkewed},
                        Case{1, 579, 256, 128, 8, 2, Routing::kTails}, Case{1, 300, 512, 256, 16, 8, Routing::kUniform}}) {
    std::vector<std::vector<uint16_t>> y[2];
    for (int carry = 0; carry < 2; ++carry) {
      ScopedEnv e("KOSMOS_RING_CARRY", carry ? "2" : "0");
      SCOPED_TRACE("KOSMOS_RING_CARRY=" + std::to_string(carry) + " W=" + std::to_string(c.W) + " T=" + std::to_string(c.T) +
                   " I=" + std::to_string(c.I));
      run_moe(c.W, c.T, c.H, c.I, c.E, c.k, c.r, 0, 0, 0, 0, &y[carry]);
      if (c.W == 1) run_moe_backward(1, c.T, c.H, c.I, c.E, c.k, Routing::kSkewedWithDrops);
    }
    ASSERT_EQ(y[0].size(), y[1].size());
    for (size_t r = 0; r < y[0].size(); ++r)
      EXPECT_TRUE(y[0][r] == y[1][r]) << "W=" << c.W << " T=" << c.T << ": y of rank " << r << " differs with the ring carry";
  }
}

TEST(GpuMoeMergedTails, AgainstFp64AndSeparateTiles) {
  SKIP_WITHOUT_GPU();
  for (int W : {1, 2}) {
    std::vector<std::vector<uint16_t>> y[2];
    for (int merge = 0; merge < 2; ++merge) {
      SCOPED_TRACE("W=" + std::to_string(W) + " merge_tails=" + std::to_string(merge));
      // As many CTAs as 128 x 256 tiles (18 slots at W = 1, 23 per rank at W = 2): the tile heuristic
      // picks 128 x 256 for both GEMMs (merging needs it; at 132 CTAs it picks 128 x 128 here).
      run_moe(W, 579, 256, 128, 8, 2, Routing::kTails, 0, 0, 0, 0, &y[merge], merge != 0, W == 1 ? 18 : 23,
              merge ? "tails of <= 32 rows merged" : nullptr);
    }
    ASSERT_EQ(y[0].size(), y[1].size());
    for (size_t r = 0; r < y[0].size(); ++r) {
      double diff = 0, mag = 0;
      for (size_t i = 0; i < y[0][r].size(); ++i) {
        const double a = kernels::gemm::bf16_to_float(y[0][r][i]), b = kernels::gemm::bf16_to_float(y[1][r][i]);
        diff = std::max(diff, std::abs(a - b));
        mag = std::max(mag, std::abs(a));
      }
      EXPECT_LE(diff, 1e-2 * mag) << "W=" << W << " rank " << r << ": y merged and not differ by " << diff << " (max |y| " << mag << ")";
    }
  }
  run_moe(1, 579, 1024, 384, 8, 2, Routing::kTails, 0, 0, 0, 0, nullptr, true, 18, "tails of <= 32 rows merged");
  cudaStream_t st;
  ASSERT_EQ(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), cudaSuccess);
  EXPECT_EQ(check_saved_activations(1, 579, 1024, 384, 8, 2, Routing::kTails, false, 63, st, 18), "");
  cudaStreamDestroy(st);
}

// GEMM1 expert-major (MoeConfig::gemm1_expert_major): each task's (slot, n block) is remapped at run
// time so that an expert's slots at one n block are consecutive claims. The same tiles in another
// order: y bit for bit that of the slot-major order, against fp64 and the unfused composition, with
// merged tails (kTails routing) and two ranks; the plan must say it applied.
// Bit 1: GEMM2 expert-major as well (MoeConfig::gemm2_expert_major).
TEST(GpuMoeExpertMajor, SameOutputsAsSlotMajor) {
  SKIP_WITHOUT_GPU();
  for (int W : {1, 2}) {
    std::vector<std::vector<uint16_t>> y[4];
    for (int em : {0, 1, 3}) {
      SCOPED_TRACE("W=" + std::to_string(W) + " expert_major=" + std::to_string(em));
      run_moe(W, 579, 1024, 384, 8, 2, Routing::kTails, 0, 0, 0, 0, &y[em], true, W == 1 ? 18 : 23,
              em == 3 ? "GEMM2 expert-major" : em ? "GEMM1 expert-major" : nullptr, em);
    }
    EXPECT_TRUE(y[0] == y[1]) << "W=" << W << ": expert-major y differs from slot-major";
    EXPECT_TRUE(y[0] == y[3]) << "W=" << W << ": expert-major GEMM1 + GEMM2 y differs from slot-major";
  }
}

// MoeConfig::backward_expert_major (on by default since the thirty-fourth session): dX's tiles remapped expert-major,
// dX waiting for every swiglu_backward of its rank; gradients against fp64 and the unfused
// composition (several slots per expert: T k W > 128 E, outside the decode regime), W = 1 and 2.
TEST(GpuMoeExpertMajor, BackwardDxMatchesFp64AndUnfused) {
  SKIP_WITHOUT_GPU();
  for (int W : {1, 2}) run_moe_backward(W, 600, 512, 256, 8, 4, Routing::kSkewedWithDrops, 0, 0, 0, true);
}

// MoeConfig::backward_combine_early (off by default: measured slower): combine claimed between the
// dDown and dGateUp tiles, running under them; gradients against fp64 and the unfused composition.
TEST(GpuMoeBackwardOrder, CombineBeforeDGateUp) {
  SKIP_WITHOUT_GPU();
  for (int W : {1, 8}) run_moe_backward(W, 600, 512, 256, 8 * W, 4, Routing::kSkewedWithDrops, 0, 0, 0, false, true);
}
