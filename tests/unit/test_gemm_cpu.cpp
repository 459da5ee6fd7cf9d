// kosmos::Gemm on the CPU executor (host tile implementation) against an fp64 reference, over
// tails, layouts and epilogues; bad inputs rejected before anything runs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "../gemm_reference.h"
#include "kernels/gemm/gemm_host.h"
#include "kosmos/gemm.h"
#include "ops/gemm_body.h"

using namespace kosmos;
using namespace kosmos::test;

namespace {
struct Case {
  int64_t m, n, k;
  bool a_col, b_t;
  uint32_t epi;
};

// A grouped problem over `rows` rows of A [rows, k]: groups of gm[g] rows from off[g], B [K, N] per
// group (or [N, K] with b_t), C [rows, n]; C's pointer is the caller's.
GemmArguments grouped_args(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, const std::vector<int>& gm,
                           const std::vector<int>& off, int64_t rows, int64_t n, int64_t k, bool b_t = false) {
  GemmArguments g;
  g.a = a.data();
  g.lda = k;
  g.b = b.data();
  g.b_transposed = b_t;
  g.ldb = b_t ? k : n;
  g.ldc = n;
  g.m = rows;
  g.n = n;
  g.k = k;
  g.num_groups = int(gm.size());
  g.group_m = gm.data();
  g.group_offset = off.data();
  return g;
}

// Every `step`-th row and column of each group of a grouped C (B [K, N]) against fp64.
void expect_grouped_near_fp64(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, const std::vector<uint16_t>& c,
                              const std::vector<int>& gm, const std::vector<int>& off, int64_t n, int64_t k,
                              int row_step = 1, int col_step = 1) {
  for (size_t grp = 0; grp < gm.size(); ++grp)
    for (int r = 0; r < gm[grp]; r += row_step)
      for (int64_t j = 0; j < n; j += col_step) {
        const int64_t row = off[grp] + r;
        double ref = 0;
        for (int64_t kk = 0; kk < k; ++kk) ref += double(bf16_to_float(a[row * k + kk])) * bf16_to_float(b[(grp * k + kk) * n + j]);
        ASSERT_NEAR(bf16_to_float(c[row * n + j]), ref, 2e-2 * (1 + std::abs(ref))) << "group " << grp << " row " << r;
      }
}

void run_case(const Case& cs, uint64_t seed) {
  const int64_t n_out = (cs.epi & kEpilogueSwiGLU) ? cs.n / 2 : cs.n;
  GemmArguments g;
  g.m = cs.m;
  g.n = cs.n;
  g.k = cs.k;
  g.a_col_major = cs.a_col;
  g.b_transposed = cs.b_t;
  g.lda = ((cs.a_col ? cs.m : cs.k) + 7) / 8 * 8;
  g.ldb = ((cs.b_t ? cs.k : cs.n) + 7) / 8 * 8;
  g.ldc = (n_out + 7) / 8 * 8 + 8;
  g.epilogue = cs.epi;
  auto a = random_bf16(size_t(cs.a_col ? cs.k : cs.m) * g.lda, seed);
  auto b = random_bf16(size_t(cs.b_t ? cs.n : cs.k) * g.ldb, seed + 1);
  auto c_in = random_bf16(size_t(cs.m) * g.ldc, seed + 2);
  std::vector<float> scale(cs.m);
  for (int64_t i = 0; i < cs.m; ++i) scale[i] = 0.5f + float(i % 7) / 7.0f;
  std::vector<uint16_t> c = c_in;
  if (!(cs.epi & kEpilogueAccumulate))
    for (int64_t i = 0; i < cs.m; ++i)
      for (int64_t j = 0; j < n_out; ++j) c[i * g.ldc + j] = 0x7FC1;  // poison (NaN)
  g.a = a.data();
  g.b = b.data();
  g.c = c.data();
  g.row_scale = scale.data();
  GemmOptions o;
  o.cpu = true;
  std::unique_ptr<Gemm> plan;
  Status s = Gemm::plan(g, o, &plan);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  ASSERT_TRUE(plan->run().is_ok());
  auto ref = reference_gemm(g, a, b, c_in, scale, n_out);
  const double err = relative_error(c, g.ldc, ref, cs.m, n_out);
  EXPECT_LT(err, 1e-2) << cs.m << "x" << cs.n << "x" << cs.k << " a_col " << cs.a_col << " b_t " << cs.b_t << " epi " << cs.epi;
  // Columns past n_out inside ldc are never written.
  for (int64_t i = 0; i < cs.m; ++i)
    for (int64_t j = n_out; j < g.ldc; ++j) ASSERT_EQ(c[i * g.ldc + j], c_in[i * g.ldc + j]) << "wrote past n_out";
}
}  // namespace

TEST(GemmCpu, TailsLayoutsAndEpilogues) {
  const std::vector<Case> cases = {
      {1, 8, 8, false, false, kEpilogueStore},       {7, 64, 127, false, true, kEpilogueStore},
      {127, 128, 64, true, false, kEpilogueStore},   {128, 264, 200, true, true, kEpilogueStore},
      {130, 96, 72, false, false, kEpilogueAccumulate}, {65, 136, 40, false, true, kEpilogueRowScale},
      {129, 272, 64, false, false, kEpilogueSwiGLU}, {33, 32, 24, true, false, kEpilogueSwiGLU | kEpilogueRowScale},
  };
  uint64_t seed = 1;
  for (const Case& c : cases) run_case(c, seed += 10);
}

TEST(GemmCpu, BadInputsAreRejectedWithTheArgumentNamed) {
  std::vector<uint16_t> a(64 * 64), b(64 * 64), c(64 * 64);
  GemmArguments g;
  g.a = a.data();
  g.b = b.data();
  g.c = c.data();
  g.m = g.n = g.k = 64;
  g.lda = g.ldb = g.ldc = 64;
  GemmOptions o;
  o.cpu = true;
  std::unique_ptr<Gemm> p;
  auto expect = [&](GemmArguments bad, const char* what) {
    Status s = Gemm::plan(bad, o, &p);
    EXPECT_FALSE(s.is_ok()) << what;
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
  };
  GemmArguments x = g;
  x.m = 0;
  expect(x, "sizes must be positive");
  x = g;
  x.lda = 60;
  expect(x, "lda = 60");
  x = g;
  x.b = reinterpret_cast<const char*>(b.data()) + 2;
  expect(x, "not 16-byte aligned");
  x = g;
  x.epilogue = kEpilogueRowScale;
  expect(x, "row_scale is null");
  x = g;
  x.epilogue = kEpilogueSwiGLU;
  x.n = 24;
  x.ldb = 24;
  expect(x, "n (= 2 * intermediate) % 16 == 0");
}

TEST(GemmCpu, GroupedWithEmptyGroupsAndDeviceStyleCounts) {
  // 5 groups sharing N and K; group 2 is empty; rows of group g start at offset[g] (a gap row
  // between groups 3 and 4 must stay untouched).
  const int G = 5;
  std::vector<int> gm = {130, 7, 0, 64, 1}, off(G);
  int64_t rows = 0;
  for (int g = 0; g < G; ++g) {
    off[g] = int(rows);
    rows += gm[g] + (g == 3 ? 1 : 0);
  }
  const int64_t n = 72, k = 40;
  auto a = random_bf16(size_t(rows) * k, 5), b = random_bf16(size_t(G) * k * n, 6);
  std::vector<uint16_t> c(size_t(rows) * n, 0x7FC1);
  GemmArguments g = grouped_args(a, b, gm, off, rows, n, k);
  g.c = c.data();
  GemmOptions o;
  o.cpu = true;
  std::unique_ptr<Gemm> plan;
  Status s = Gemm::plan(g, o, &plan);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  ASSERT_TRUE(plan->run().is_ok());
  expect_grouped_near_fp64(a, b, c, gm, off, n, k);
  const int64_t gap = off[3] + gm[3];
  for (int64_t j = 0; j < n; ++j) EXPECT_EQ(c[gap * n + j], 0x7FC1) << "gap row written";
  // The same plan with new group sizes (device-computed in real use): all rows to group 0.
  std::vector<int> gm2 = {int(rows), 0, 0, 0, 0}, off2 = {0, int(rows), int(rows), int(rows), int(rows)};
  GemmArguments g2 = g;
  g2.group_m = gm2.data();
  g2.group_offset = off2.data();
  ASSERT_TRUE(plan->update(g2).is_ok());
  ASSERT_TRUE(plan->run().is_ok());
  double ref = 0;
  for (int64_t kk = 0; kk < k; ++kk) ref += double(bf16_to_float(a[gap * k + kk])) * bf16_to_float(b[kk * n + 0]);
  EXPECT_NEAR(bf16_to_float(c[gap * n + 0]), ref, 2e-2 * (1 + std::abs(ref)));
}

// kosmos::Gemm merges short last blocks of grouped problems with B [K, N] on 128 x 256 tiles when
// asked (GemmOptions::merge_tails): C bit for bit that of the plan without, tails of 1, 32 and 33
// rows; not with B [N, K] or accumulate (the plan says which in raster()). The default (kAuto)
// merges up to K = kGemmMergeTailsMaxK.
TEST(GemmCpu, GroupedMergedTailsSameResultAsSeparateTiles) {
  std::vector<int> gm, off;
  const int64_t rows = merged_tail_groups(8, &gm, &off);
  const int G = int(gm.size());
  const int64_t n = 512, k = 64;
  auto a = random_bf16(size_t(rows) * k, 21), b = random_bf16(size_t(G) * k * n, 22);
  for (bool b_t : {false, true}) {
    SCOPED_TRACE(b_t ? "B [N, K]" : "B [K, N]");
    GemmArguments g = grouped_args(a, b, gm, off, rows, n, k, b_t);
    std::vector<uint16_t> c[2];
    for (int merge = 0; merge < 2; ++merge) {
      c[merge].assign(size_t(rows) * n, 0x7FC1);
      g.c = c[merge].data();
      GemmOptions o;
      o.cpu = true;
      o.merge_tails = merge != 0 ? GemmMergeTails::kOn : GemmMergeTails::kOff;
      std::unique_ptr<Gemm> plan;
      ASSERT_TRUE(Gemm::plan(g, o, &plan).is_ok());
      EXPECT_EQ(plan->tile_n(), 256);
      EXPECT_EQ(plan->raster().find("tails of <= 32 rows merged") != std::string::npos, merge != 0 && !b_t) << plan->raster();
      ASSERT_TRUE(plan->run().is_ok());
    }
    EXPECT_TRUE(c[0] == c[1]) << "C differs with merged tails";
    for (size_t i = 0; i < c[1].size(); ++i) ASSERT_NE(c[1][i], 0x7FC1) << "element " << i << " not written";
    // The default merges at this K (64), and not past kGemmMergeTailsMaxK (planned only).
    GemmOptions o;
    o.cpu = true;
    std::unique_ptr<Gemm> plan_default;
    ASSERT_TRUE(Gemm::plan(g, o, &plan_default).is_ok());
    EXPECT_EQ(plan_default->raster().find("tails of <= 32 rows merged") != std::string::npos, !b_t) << plan_default->raster();
    auto at_k = [&](int64_t kk) {  // the same problem at another K (planned only)
      GemmArguments x = g;
      x.k = x.lda = kk;
      x.ldb = b_t ? kk : n;
      return x;
    };
    ASSERT_TRUE(Gemm::plan(at_k(kGemmMergeTailsMaxK + 64), o, &plan_default).is_ok());
    EXPECT_EQ(plan_default->raster().find("tails of <= 32 rows merged"), std::string::npos) << plan_default->raster();
    ASSERT_TRUE(Gemm::plan(at_k(kGemmMergeTailsMaxK), o, &plan_default).is_ok());
    EXPECT_EQ(plan_default->raster().find("tails of <= 32 rows merged") != std::string::npos, !b_t) << plan_default->raster();
    // Accumulate (C += ...) does not merge, even when asked.
    g.epilogue = kEpilogueAccumulate;
    o.merge_tails = GemmMergeTails::kOn;
    std::unique_ptr<Gemm> plan;
    ASSERT_TRUE(Gemm::plan(g, o, &plan).is_ok());
    EXPECT_EQ(plan->raster().find("tails of <= 32 rows merged"), std::string::npos) << plan->raster();
  }
}

// A wide, short GEMM (one m block, hundreds of n blocks) is planned as runs along N; the host tile
// implementation walks them like the device does and the result matches fp64.
TEST(GemmCpu, RunsAlongNMatchTheReference) {
  GemmArguments g;
  g.m = 100;
  g.n = 200 * 256 - 8;
  g.k = 24;
  g.lda = 24;
  g.ldb = g.n;
  g.ldc = g.n;
  auto a = random_bf16(size_t(g.m) * g.lda, 5);
  auto b = random_bf16(size_t(g.k) * g.ldb, 6);
  std::vector<uint16_t> c(size_t(g.m) * g.ldc, 0x7FC1), c_in = c;
  g.a = a.data();
  g.b = b.data();
  g.c = c.data();
  GemmOptions o;
  o.cpu = true;
  std::unique_ptr<Gemm> plan;
  ASSERT_TRUE(Gemm::plan(g, o, &plan).is_ok());
  EXPECT_NE(plan->raster().find("along N"), std::string::npos) << plan->raster();
  ASSERT_TRUE(plan->run().is_ok());
  std::vector<float> scale(g.m, 1.0f);
  auto ref = reference_gemm(g, a, b, c_in, scale, g.n);
  EXPECT_LT(relative_error(c, g.ldc, ref, g.m, g.n), 1e-2);
}

// GemmOptions::claim_order imposes an order instead of the planner's: every forced order computes
// the same C bit for bit (each tile once), the description says it was set, and bad values are named.
TEST(GemmCpu, ImposedClaimOrdersGiveTheSameResult) {
  GemmArguments g;
  g.m = 300;
  g.n = 600;
  g.k = 40;
  g.lda = g.k;
  g.ldb = g.n;
  g.ldc = g.n;
  auto a = random_bf16(size_t(g.m) * g.lda, 7);
  auto b = random_bf16(size_t(g.k) * g.ldb, 8);
  g.a = a.data();
  g.b = b.data();
  GemmOptions o;
  o.cpu = true;
  std::vector<uint16_t> c_plan(size_t(g.m) * g.ldc, 0x7FC1);
  g.c = c_plan.data();
  std::unique_ptr<Gemm> plan;
  ASSERT_TRUE(Gemm::plan(g, o, &plan).is_ok());
  ASSERT_TRUE(plan->run().is_ok());
  for (const GemmClaimOrder co : {GemmClaimOrder{1, false, 1}, GemmClaimOrder{2, true, 2}, GemmClaimOrder{3, false, 4},
                                  GemmClaimOrder{16, true, 1}}) {
    std::vector<uint16_t> c(c_plan.size(), 0x7FC1);
    g.c = c.data();
    o.claim_order = co;
    ASSERT_TRUE(Gemm::plan(g, o, &plan).is_ok());
    EXPECT_NE(plan->raster().find("(set)"), std::string::npos) << plan->raster();
    EXPECT_NE(plan->raster().find(co.along_n ? "along N" : "along M"), std::string::npos) << plan->raster();
    ASSERT_TRUE(plan->run().is_ok());
    EXPECT_EQ(c, c_plan) << "run " << co.run << " along_n " << co.along_n << " group " << co.group;
  }
  o.claim_order = GemmClaimOrder{17, false, 1};
  Status st = Gemm::plan(g, o, &plan);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("claim_order.run"), std::string::npos) << st.message();
  o.claim_order = GemmClaimOrder{2, false, 0};
  st = Gemm::plan(g, o, &plan);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("claim_order.group"), std::string::npos) << st.message();
}

// Grouped with about four or more slots per group and tails in tiles of their own: the default plan
// claims runs of one slot in groups of one group's slots (ops::expert_claim_group), says so, and
// computes what an imposed order computes, bit for bit, and what fp64 gives.
TEST(GemmCpu, GroupedLargeGroupsClaimOneGroupsSlotsAtATime) {
  const int G = 3;
  std::vector<int> gm = {900, 0, 700}, off = {0, 900, 900};  // 13 row blocks over 3 groups: 4 slots per group
  const int64_t rows = 1600, n = 296, k = 40;
  auto a = random_bf16(size_t(rows) * k, 11), b = random_bf16(size_t(G) * k * n, 12);
  GemmArguments g = grouped_args(a, b, gm, off, rows, n, k);
  GemmOptions o;
  o.cpu = true;
  o.merge_tails = GemmMergeTails::kOff;
  std::vector<uint16_t> c(size_t(rows) * n, 0x7FC1), c_set = c;
  g.c = c.data();
  std::unique_ptr<Gemm> plan;
  const Status st = Gemm::plan(g, o, &plan);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  EXPECT_NE(plan->raster().find("runs of 1 along M"), std::string::npos) << plan->raster();
  EXPECT_NE(plan->raster().find("one group's slots per claim"), std::string::npos) << plan->raster();
  ASSERT_TRUE(plan->run().is_ok());
  o.claim_order = GemmClaimOrder{2, true, 2};
  g.c = c_set.data();
  ASSERT_TRUE(Gemm::plan(g, o, &plan).is_ok());
  EXPECT_EQ(plan->raster().find("one group's slots per claim"), std::string::npos) << plan->raster();
  ASSERT_TRUE(plan->run().is_ok());
  EXPECT_EQ(c, c_set);
  expect_grouped_near_fp64(a, b, c, gm, off, n, k, 37, 13);
}

// kGemmEpiSavePreact (the MoE forward keeps GEMM1's pre-activation for the backward): the engine's
// host tile stores bf16(acc) for all n columns into c_aux, and the SwiGLU output into c is the
// one computed without the flag, bit for bit; bad descriptors are named.
TEST(GemmCpu, SavePreactStoresTheAccumulatorBesideSwiGLU) {
  using namespace kosmos::kernels::gemm;
  const int64_t M = 130, N = 272, K = 72, n_out = N / 2, ld_aux = N + 8;
  auto a = random_bf16(size_t(M) * K, 5);
  auto b = random_bf16(size_t(K) * N, 6);
  std::vector<uint16_t> c_plain(size_t(M) * n_out, 0x7FC1), c_save(c_plain), aux(size_t(M) * ld_aux, 0x7FC1);
  GemmDesc d;
  d.a = a.data();
  d.lda = K;
  d.b = b.data();
  d.ldb = N;
  d.ldc = n_out;
  d.m = M;
  d.n = N;
  d.k = K;
  d.encode_tma = false;
  d.tile_shape = GemmTileShape::k128x128;
  auto run_all = [&](const GemmDesc& desc) {
    GemmParams p;
    Status s = make_gemm_params(desc, &p);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    for (int mb = 0; mb < p.num_m_tiles; ++mb)
      for (int nb = 0; nb < p.num_n_tiles; ++nb) gemm_tile_host(desc, p, GemmTileArgs{0, uint32_t(mb), uint32_t(nb), 1, 0, {}});
  };
  d.epilogue = kGemmEpiSwiGLU;
  d.c = c_plain.data();
  run_all(d);
  d.epilogue = kGemmEpiSwiGLU | kGemmEpiSavePreact;
  d.c = c_save.data();
  d.c_aux = aux.data();
  d.ldc_aux = ld_aux;
  run_all(d);
  EXPECT_EQ(c_save, c_plain) << "the SwiGLU output changed with the pre-activation store";
  double num = 0, den = 0;
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double want = 0;
      for (int64_t kk = 0; kk < K; ++kk) want += double(bf16_to_float(a[i * K + kk])) * bf16_to_float(b[kk * N + j]);
      const double got = bf16_to_float(aux[i * ld_aux + j]);
      num += (got - want) * (got - want);
      den += want * want;
    }
    for (int64_t j = N; j < ld_aux; ++j) ASSERT_EQ(aux[i * ld_aux + j], 0x7FC1) << "wrote past n in c_aux";
  }
  EXPECT_LT(std::sqrt(num / den), 1e-2);

  GemmParams p;
  GemmDesc x = d;
  x.epilogue = kGemmEpiStore | kGemmEpiSavePreact;
  EXPECT_NE(make_gemm_params(x, &p).message().find("needs kGemmEpiSwiGLU"), std::string::npos);
  x = d;
  x.c_aux = nullptr;
  EXPECT_NE(make_gemm_params(x, &p).message().find("c_aux is null"), std::string::npos);
  x = d;
  x.ldc_aux = N - 8;
  EXPECT_NE(make_gemm_params(x, &p).message().find("ldc_aux = "), std::string::npos);
  x = d;
  x.c_aux = reinterpret_cast<char*>(aux.data()) + 2;
  EXPECT_NE(make_gemm_params(x, &p).message().find("c_aux = "), std::string::npos);
}

// A problem grouped over M for the host tile: groups of `gm` rows, A [rows + 1, k] (one row past the
// groups, never read into C), B [G, k, n] row-major, 128 x 256 tiles, no C yet.
struct GroupedHostProblem {
  std::vector<int> gm, off;
  int64_t rows = 0;
  std::vector<uint16_t> a, b;
  kernels::gemm::GemmDesc d;
};
void make_grouped_host_problem(GroupedHostProblem& g, std::vector<int> gm, int64_t n, int64_t k, uint32_t seed) {
  g.gm = std::move(gm);
  g.off.assign(g.gm.size(), 0);
  g.rows = 0;
  for (size_t i = 0; i < g.gm.size(); ++i) g.off[i] = int(g.rows), g.rows += g.gm[i];
  g.a = random_bf16(size_t(g.rows + 1) * k, seed);
  g.b = random_bf16(g.gm.size() * size_t(k * n), seed + 1);
  g.d = kernels::gemm::GemmDesc{};
  g.d.a = g.a.data();
  g.d.lda = k;
  g.d.b = g.b.data();
  g.d.ldb = n;
  g.d.ldc = n;
  g.d.m = g.rows;
  g.d.n = n;
  g.d.k = k;
  g.d.num_groups = int(g.gm.size());
  g.d.group_m = g.gm.data();
  g.d.group_offset = g.off.data();
  g.d.encode_tma = false;
  g.d.tile_shape = kernels::gemm::GemmTileShape::k128x256;
}

// kGemmMergeTails (gemm_params.h): a group's last m block of at most kGemmTailRows rows is taken by
// the block before it. The slot count per group; the host tiles over every slot write the same C
// as without merging, bit for bit, and nothing past the groups; configurations it cannot serve are
// named.
TEST(GemmCpu, MergedTailsSlotsResultAndErrors) {
  using namespace kosmos::kernels::gemm;
  struct Want { int mg, slots, tail; };
  for (const Want w : {Want{0, 0, 0}, Want{7, 1, 0}, Want{128, 1, 0}, Want{129, 1, 1}, Want{160, 1, 32}, Want{161, 2, 0},
                       Want{256, 2, 0}, Want{288, 2, 32}, Want{289, 3, 0}}) {
    int tail = -1;
    EXPECT_EQ(gemm_group_blocks(w.mg, true, &tail), w.slots) << w.mg;
    EXPECT_EQ(tail, w.tail) << w.mg;
    EXPECT_EQ(gemm_group_blocks(w.mg, false, &tail), (w.mg + 127) / 128) << w.mg;
    EXPECT_EQ(tail, 0);
  }
  const int64_t n = 512, k = 72;
  GroupedHostProblem gp;
  make_grouped_host_problem(gp, {129, 160, 161, 0, 7, 300, 256}, n, k, 11);
  const std::vector<int>& gm = gp.gm;
  const int G = int(gm.size());
  const int64_t rows = gp.rows;
  GemmDesc& d = gp.d;
  std::vector<uint16_t> c[2];
  int used[2] = {0, 0};
  for (int merge = 0; merge < 2; ++merge) {
    c[merge].assign(size_t(rows + 1) * n, 0x7FC1);  // one row past the groups: never written
    d.c = c[merge].data();
    d.merge_tails = merge != 0;
    GemmParams p;
    ASSERT_TRUE(make_gemm_params(d, &p).is_ok());
    EXPECT_EQ((p.layout & kGemmMergeTails) != 0, merge != 0);
    for (int slot = 0; slot < p.num_m_tiles; ++slot)
      for (int nb = 0; nb < p.num_n_tiles; ++nb) gemm_tile_host(d, p, GemmTileArgs{0, uint32_t(slot), uint32_t(nb), 1, 0, {}});
    for (int g = 0; g < G; ++g) {
      int tail;
      used[merge] += gemm_group_blocks(gm[g], merge != 0, &tail);
    }
  }
  EXPECT_EQ(used[0] - used[1], 2);  // groups of 129 and 160 rows
  EXPECT_TRUE(c[0] == c[1]) << "C differs with merged tails";
  for (int64_t j = 0; j < n; ++j) ASSERT_NE(c[1][size_t(rows - 1) * n + j], 0x7FC1) << "last row not written";
  for (int64_t j = 0; j < n; ++j) ASSERT_EQ(c[1][size_t(rows) * n + j], 0x7FC1) << "row past the groups written";
  // Configurations merging cannot serve are named.
  GemmParams p;
  GemmDesc x = d;
  x.tile_shape = GemmTileShape::k128x128;
  EXPECT_NE(make_gemm_params(x, &p).message().find("merge_tails needs the 128x256 tile"), std::string::npos);
  x = d;
  x.b_transposed = true;
  x.ldb = k;
  EXPECT_NE(make_gemm_params(x, &p).message().find("merge_tails needs A row-major and B [K, N]"), std::string::npos);
  x = d;
  x.epilogue = kGemmEpiAccumulate;
  EXPECT_NE(make_gemm_params(x, &p).message().find("merge_tails cannot accumulate"), std::string::npos);
  x = d;
  x.num_groups = 0;
  EXPECT_NE(make_gemm_params(x, &p).message().find("merge_tails needs a problem grouped over M"), std::string::npos);
}

// kGemmExpertMajor (gemm_params.h): a task's (slot, n block) is a claim position; the map sends the
// positions 0 .. tiles - 1 onto the real tiles exactly once, group-major and n-major inside a group
// (a group's slots at one n block consecutive); host tiles planned over every position write the
// same C, bit for bit, as the slot-major tiles, with and without merged tails; a dense problem is
// refused.
TEST(GemmCpu, ExpertMajorMapIsAPermutationAndKeepsC) {
  using namespace kosmos::kernels::gemm;
  const std::vector<int> blocks = {2, 0, 3, 1, 0, 2};
  const int nt = 3;
  int total = 0;
  for (int c : blocks) total += c;
  std::vector<int> seen(size_t(total) * nt, 0);
  int prev_g = -1, prev_n = -1, prev_b = -1, first = 0;
  for (int64_t L = 0; L < int64_t(total) * nt; ++L) {
    int g = -1, b = -1, n = -1;
    ASSERT_TRUE(gemm_expert_major_tile([&](int i) { return blocks[size_t(i)]; }, int(blocks.size()), L, nt, &g, &b, &n)) << L;
    ASSERT_TRUE(g >= 0 && g < int(blocks.size()) && b >= 0 && b < blocks[size_t(g)] && n >= 0 && n < nt) << L;
    if (g != prev_g) {
      EXPECT_GT(g, prev_g) << L;  // group-major
      first = 0;
      for (int i = 0; i < g; ++i) first += blocks[size_t(i)];
    } else {
      EXPECT_TRUE(n > prev_n || (n == prev_n && b == prev_b + 1)) << L;  // n-major, slots consecutive
    }
    ++seen[size_t(first + b) * nt + size_t(n)];
    prev_g = g, prev_n = n, prev_b = b;
  }
  for (int v : seen) EXPECT_EQ(v, 1);
  int g = 0, b = 0, n = 0;
  EXPECT_FALSE(gemm_expert_major_tile([&](int i) { return blocks[size_t(i)]; }, int(blocks.size()), int64_t(total) * nt, nt, &g, &b, &n));

  const int64_t N = 640, K = 72;  // three n blocks of 256, the last partial
  GroupedHostProblem gp;
  make_grouped_host_problem(gp, {129, 160, 0, 300, 7, 256}, N, K, 21);
  const int64_t rows = gp.rows;
  GemmDesc& d = gp.d;
  for (int merge = 0; merge < 2; ++merge) {
    std::vector<uint16_t> c[2];
    for (int em = 0; em < 2; ++em) {
      c[em].assign(size_t(rows + 1) * N, 0x7FC1);
      d.c = c[em].data();
      d.merge_tails = merge != 0;
      d.expert_major = em != 0;
      GemmParams p;
      ASSERT_TRUE(make_gemm_params(d, &p).is_ok());
      EXPECT_EQ((p.layout & kGemmExpertMajor) != 0, em != 0);
      for (int slot = 0; slot < p.num_m_tiles; ++slot)
        for (int nb = 0; nb < p.num_n_tiles; ++nb) gemm_tile_host(d, p, GemmTileArgs{0, uint32_t(slot), uint32_t(nb), 1, 0, {}});
    }
    EXPECT_TRUE(c[0] == c[1]) << "expert-major C differs, merge " << merge;
    for (int64_t j = 0; j < N; ++j) ASSERT_NE(c[1][size_t(rows - 1) * N + size_t(j)], 0x7FC1) << "last row not written";
    for (int64_t j = 0; j < N; ++j) ASSERT_EQ(c[1][size_t(rows) * N + size_t(j)], 0x7FC1) << "row past the groups written";
  }
  GemmParams p;
  GemmDesc x = d;
  x.num_groups = 0;
  x.merge_tails = false;
  EXPECT_NE(make_gemm_params(x, &p).message().find("expert_major needs a problem grouped over M"), std::string::npos);
}

// The GEMM waiter's K slice (ops::gemm_wait_slice_end): every k block from kb up to the slice's end
// maps to kb's counter, the end itself to a later one; a rule without K steps has one slice. The
// device waiter skips its counter computation inside the slice (op_body.cuh), so an end too far
// would let a tile load K rows whose counter it never waited on.
TEST(GemmCpu, WaitRuleSliceEndCoversExactlyOneCounter) {
  using ops::GemmWaitRule;
  const GemmWaitRule rules[] = {{5, 128, 0},  {7, 0, 128},  {7, 0, 64},  {7, 0, 192},
                                {7, 256, 96}, {3, 128, 32}, {9, 0, 1000}};
  for (const GemmWaitRule& r : rules) {
    for (int m : {0, 1, 3}) {
      for (int kb = 0; kb < 200; ++kb) {
        const uint32_t c = ops::gemm_wait_counter(r, m, kb);
        const int end = ops::gemm_wait_slice_end(r, kb);
        ASSERT_GT(end, kb) << "k_rows " << r.k_rows << " kb " << kb;
        if (r.k_rows == 0) {
          EXPECT_EQ(end, 0x7FFFFFFF);
          EXPECT_EQ(ops::gemm_wait_counter(r, m, kb + 77), c);
          continue;
        }
        for (int k = kb; k < end; ++k)
          ASSERT_EQ(ops::gemm_wait_counter(r, m, k), c) << "k_rows " << r.k_rows << " kb " << kb << " k " << k;
        EXPECT_GT(ops::gemm_wait_counter(r, m, end), c) << "k_rows " << r.k_rows << " kb " << kb;
      }
    }
  }
}
