// The GEMM claim-order planner (ops::plan_gemm_runs): every tile exactly once, runs in range, and
// the choice on the shapes that motivated it.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "ops/gemm_raster.h"

namespace kosmos::ops {
namespace {

RasterProblem problem(int m0, int m1, int n_tiles, int k, int bn = 256, int ctas = 132) {
  RasterProblem p;
  p.m_begin = m0;
  p.m_end = m1;
  p.n_tiles = n_tiles;
  p.ctas = ctas;
  p.a_block_bytes = int64_t(128) * k * 2;
  p.b_block_bytes = int64_t(bn) * k * 2;
  p.tile_seconds = 2.0 * 128 * bn * k / (730e12 / 132);
  return p;
}

void expect_each_tile_once(const RasterProblem& p, const std::vector<GemmRun>& order) {
  const int mt = p.m_end - p.m_begin;
  std::vector<int> seen(size_t(mt) * p.n_tiles, 0);
  for (const GemmRun& r : order) {
    ASSERT_GE(r.count, 1u);
    for (uint32_t i = 0; i < r.count; ++i) {
      const int m = int(r.tile_m) + (r.along_n ? 0 : int(i)), n = int(r.tile_n) + (r.along_n ? int(i) : 0);
      ASSERT_GE(m, p.m_begin);
      ASSERT_LT(m, p.m_end);
      ASSERT_GE(n, 0);
      ASSERT_LT(n, p.n_tiles);
      ++seen[size_t(m - p.m_begin) * p.n_tiles + n];
    }
  }
  for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << "tile " << i;
}

TEST(GemmRaster, EveryTileExactlyOnceOverRandomProblems) {
  std::mt19937 rng(3);
  for (int it = 0; it < 300; ++it) {
    const int m0 = int(rng() % 20), mt = 1 + int(rng() % 70), nt = 1 + int(rng() % 60);
    RasterProblem p = problem(m0, m0 + mt, nt, 64 * (1 + int(rng() % 64)), 256, 1 + int(rng() % 140));
    p.allow_along_n = rng() % 4 != 0;
    RasterChoice c;
    const auto order = plan_gemm_runs(p, &c);
    expect_each_tile_once(p, order);
    if (!p.allow_along_n) EXPECT_FALSE(c.along_n);
    for (const GemmRun& r : order) EXPECT_EQ(r.along_n, c.along_n);
  }
}

TEST(GemmRaster, HbmEstimateCountsSharedBlocksOnce) {
  // Two CTAs on the same B column block, different A row blocks, one tile each: 2 A + 1 B.
  const std::vector<GemmRun> order = {{0, 5, 1, false}, {1, 5, 1, false}};
  EXPECT_DOUBLE_EQ(estimate_hbm_bytes(order, 2, 10, 100, 1 << 30), 2 * 10 + 100);
  // One CTA walking down M on one B block: the B block is read once while the step fits the L2 ...
  const std::vector<GemmRun> run = {{0, 0, 4, false}};
  EXPECT_DOUBLE_EQ(estimate_hbm_bytes(run, 1, 10, 100, 1 << 30), 4 * 10 + 100);
  // ... and every step when it does not.
  EXPECT_DOUBLE_EQ(estimate_hbm_bytes(run, 1, 10, 100, 50), 4 * 10 + 4 * 100);
}

TEST(GemmRaster, GemmRsOwnerChunkSharesBColumnBlocks) {
  // GEMM+RS, Llama-3-70B at W = 8: one owner's 8 m blocks x 112 n blocks, K = 1024. Runs of 8 down
  // M put 112+ distinct B blocks in flight per step; the planner must do far better.
  const RasterProblem p = problem(0, 8, 112, 1024);
  RasterChoice c;
  const auto order = plan_gemm_runs(p, &c);
  expect_each_tile_once(p, order);
  std::vector<GemmRun> naive;
  for (uint32_t n = 0; n < 112; ++n) naive.push_back({0, n, 8, false});
  const double naive_bytes = estimate_hbm_bytes(naive, 132, p.a_block_bytes, p.b_block_bytes, int64_t(40) << 20);
  std::printf("gemm_rs chunk: %s (runs of 8 down M: %.1f MB)\n", c.describe().c_str(), naive_bytes / 1e6);
  EXPECT_LT(c.est_hbm_bytes, naive_bytes / 4);
}

TEST(GemmRaster, IssueShapesPrintTheirChoice) {
  const int shapes[][3] = {{8192, 8192, 8192}, {8192, 3584, 8192}, {8192, 8192, 3584}, {8192, 1536, 8192},
                           {2048, 3584, 8192}, {16384, 7168, 2048}, {4096, 4096, 1536}, {128, 7168, 2048}};
  for (const auto& s : shapes) {
    const int bn = s[0] <= 128 ? 64 : 256;
    const RasterProblem p = problem(0, (s[0] + 127) / 128, (s[1] + bn - 1) / bn, s[2], bn);
    RasterChoice c;
    std::vector<RasterChoice> all;
    const auto order = plan_gemm_runs(p, &c, &all);
    expect_each_tile_once(p, order);
    std::printf("%5dx%5dx%5d: %zu tasks, %s\n", s[0], s[1], s[2], order.size(), c.describe().c_str());
    if (std::getenv("KOSMOS_RASTER_VERBOSE"))
      for (const auto& a : all) std::printf("      considered: %s\n", a.describe().c_str());
  }
}

}  // namespace
}  // namespace kosmos::ops
