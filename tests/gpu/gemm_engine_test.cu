// GEMM engine: validation (CPU), the CPU executor's tile vs fp64 (CPU), and the device tile body in
// a standalone persistent kernel vs an fp64 reference (GPU; skipped with a message without one).
// Fresh random bf16 inputs per case, outputs poisoned (bf16 NaN 0xFFFF) before each run, relative
// error ||out - ref|| / ||ref|| < 1e-2, and no NaN in the output; padding columns of C must keep
// their poison (masking), rows outside every group too.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "gemm_engine_test_kernel.cuh"
#include "kernels/gemm/bf16.h"
#include "kernels/gemm/gemm_host.h"

namespace kosmos::kernels::gemm {
namespace {

constexpr uint16_t kPoison = 0xFFFF;  // bf16 NaN

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(size_t bytes) {
    if (cudaMalloc(&ptr, bytes == 0 ? 16 : bytes) != cudaSuccess) ptr = nullptr;
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// Fresh inputs every run; the seed is printed so a failure can be replayed. (Not std::random_device:
// it is not usable on every machine the tests run on.)
uint64_t fresh_seed() {
  const uint64_t seed = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()) * 0x9E3779B97F4A7C15ull;
  std::fprintf(stderr, "  seed %llu\n", (unsigned long long)seed);
  return seed;
}

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

int sm_count() {
  int dev = 0, n = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
  return n;
}

// One test problem on the host: A, B, C (+ row scale, groups) and the fp64 reference.
struct Case {
  std::string name;
  int64_t m = 0, n = 0, k = 0;
  bool a_col = false, b_t = false;
  uint32_t epi = 0;
  int64_t pad = 0;  // extra elements on every leading dimension (multiple of 8)
  GemmTileShape shape = GemmTileShape::kAuto;
  int run = 1;
  bool along_n = false;      // runs of `run` tiles along N (kGemmRunAlongN)
  std::vector<int> group_m;  // empty = dense
  std::vector<int> group_offset;
};

struct HostData {
  int64_t lda, ldb, ldc, ldbg, n_out, b_rows;
  int groups;
  std::vector<uint16_t> a, b, c0;
  std::vector<float> scale;
};

HostData make_data(const Case& cs, std::mt19937_64& rng) {
  HostData h;
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  h.groups = cs.group_m.empty() ? 1 : int(cs.group_m.size());
  h.n_out = (cs.epi & kGemmEpiSwiGLU) ? cs.n / 2 : cs.n;
  h.lda = round_up(cs.a_col ? cs.m : cs.k, 8) + cs.pad;
  h.ldb = round_up(cs.b_t ? cs.k : cs.n, 8) + cs.pad;
  h.ldc = round_up(h.n_out, 8) + cs.pad;
  h.b_rows = cs.b_t ? cs.n : cs.k;
  h.ldbg = h.b_rows * h.ldb;
  h.a.resize(size_t((cs.a_col ? cs.k : cs.m) * h.lda));
  h.b.resize(size_t(h.groups * h.ldbg));
  h.c0.resize(size_t(cs.m * h.ldc));
  for (auto& x : h.a) x = float_to_bf16(u(rng));
  for (auto& x : h.b) x = float_to_bf16(u(rng));
  if (cs.epi & kGemmEpiAccumulate) {
    for (auto& x : h.c0) x = float_to_bf16(4.f * u(rng));
  } else {
    std::fill(h.c0.begin(), h.c0.end(), kPoison);
  }
  h.scale.resize(size_t(cs.m));
  for (auto& x : h.scale) x = u(rng);
  return h;
}

GemmDesc make_desc(const Case& cs, const HostData& h, const void* a, const void* b, void* c, const float* scale,
                   const int* gm, const int* go) {
  GemmDesc d;
  d.a = a;
  d.lda = h.lda;
  d.a_col_major = cs.a_col;
  d.b = b;
  d.ldb = h.ldb;
  d.b_transposed = cs.b_t;
  d.ldb_group = cs.group_m.empty() ? 0 : h.ldbg;
  d.c = c;
  d.ldc = h.ldc;
  d.m = cs.m;
  d.n = cs.n;
  d.k = cs.k;
  d.num_groups = int(cs.group_m.size());
  d.group_m = gm;
  d.group_offset = go;
  d.epilogue = cs.epi;
  d.row_scale = scale;
  d.tile_shape = cs.shape;
  return d;
}

// Group of each row (-1: no group, the row must stay untouched) for grouped cases; 0 when dense.
std::vector<int> row_groups(const Case& cs) {
  std::vector<int> g(size_t(cs.m), cs.group_m.empty() ? 0 : -1);
  for (size_t i = 0; i < cs.group_m.size(); ++i)
    for (int r = 0; r < cs.group_m[i]; ++r) g[size_t(cs.group_offset[i] + r)] = int(i);
  return g;
}

double ref_value(const Case& cs, const HostData& h, int64_t row, int group, int64_t col_out) {
  auto dot = [&](int64_t bcol) {
    double s = 0;
    for (int64_t kk = 0; kk < cs.k; ++kk) {
      const double av = bf16_to_float(cs.a_col ? h.a[size_t(kk * h.lda + row)] : h.a[size_t(row * h.lda + kk)]);
      const size_t bi = size_t(group * h.ldbg + (cs.b_t ? bcol * h.ldb + kk : kk * h.ldb + bcol));
      s += av * double(bf16_to_float(h.b[bi]));
    }
    return s;
  };
  double v;
  if (cs.epi & kGemmEpiSwiGLU) {
    const int64_t gcol = col_out / 8 * 16 + col_out % 8;
    const double g = dot(gcol), up = dot(gcol + 8);
    v = g / (1.0 + std::exp(-g)) * up;
  } else {
    v = dot(col_out);
  }
  if (cs.epi & kGemmEpiRowScale) v *= double(h.scale[size_t(row)]);
  if (cs.epi & kGemmEpiAccumulate) v += double(bf16_to_float(h.c0[size_t(row * h.ldc + col_out)]));
  return v;
}

// Checks `out` (C as produced) against the fp64 reference on a row sample (all rows when cheap),
// and every element for NaN / untouched padding.
void check_output(const Case& cs, const HostData& h, const std::vector<uint16_t>& out, std::mt19937_64& rng) {
  const std::vector<int> groups = row_groups(cs);
  // Masking: padding columns and rows outside every group keep their initial contents.
  int64_t nan_count = 0, clobbered = 0;
  for (int64_t r = 0; r < cs.m; ++r) {
    for (int64_t c = 0; c < h.ldc; ++c) {
      const size_t i = size_t(r * h.ldc + c);
      const bool written = groups[size_t(r)] >= 0 && c < h.n_out;
      if (written) {
        nan_count += std::isnan(bf16_to_float(out[i])) ? 1 : 0;
      } else if (out[i] != h.c0[i]) {
        ++clobbered;
      }
    }
  }
  EXPECT_EQ(nan_count, 0) << cs.name << ": NaN (or poison never overwritten) in the output";
  EXPECT_EQ(clobbered, 0) << cs.name << ": stores outside the output (padding / ungrouped rows)";

  std::vector<int64_t> rows;
  const double work = double(cs.n) * double(cs.k) * ((cs.epi & kGemmEpiSwiGLU) ? 1.0 : 1.0);
  const int64_t budget = std::max<int64_t>(8, int64_t(3e7 / std::max(1.0, work)));
  if (cs.m <= budget) {
    for (int64_t r = 0; r < cs.m; ++r) rows.push_back(r);
  } else {
    for (int64_t r : {int64_t(0), int64_t(127), int64_t(128), cs.m - 1})
      if (r < cs.m) rows.push_back(r);
    std::uniform_int_distribution<int64_t> pick(0, cs.m - 1);
    while (int64_t(rows.size()) < budget) rows.push_back(pick(rng));
  }
  double err2 = 0, ref2 = 0;
  for (int64_t r : rows) {
    if (groups[size_t(r)] < 0) continue;
    for (int64_t c = 0; c < h.n_out; ++c) {
      const double ref = ref_value(cs, h, r, groups[size_t(r)], c);
      const double got = bf16_to_float(out[size_t(r * h.ldc + c)]);
      err2 += (got - ref) * (got - ref);
      ref2 += ref * ref;
    }
  }
  const double rel = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  EXPECT_TRUE(rel < 1e-2) << cs.name << ": relative error " << rel << " over " << rows.size() << " rows";
}

// The GemmDesc options a case runs with (each on where it applies, as by default).
struct EngineOptions {
  bool tma_store = true;
  bool keep_operands = true;
  bool merge_tails = false;
};

// out_copy: the output, when given.
void run_gpu_case(const Case& cs, std::mt19937_64& rng, EngineOptions opt = {}, std::vector<uint16_t>* out_copy = nullptr) {
  SCOPED_TRACE(cs.name);
  std::fprintf(stderr, "  case %s\n", cs.name.c_str());
  std::fflush(stderr);
  HostData h = make_data(cs, rng);
  DeviceBuffer a(h.a.size() * 2), b(h.b.size() * 2), c(h.c0.size() * 2), s(h.scale.size() * 4 + 16),
      gm(cs.group_m.size() * 4 + 16), go(cs.group_offset.size() * 4 + 16);
  ASSERT_TRUE(a.ptr && b.ptr && c.ptr && s.ptr && gm.ptr && go.ptr);
  ASSERT_EQ(cudaMemcpy(a.ptr, h.a.data(), h.a.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(b.ptr, h.b.data(), h.b.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(c.ptr, h.c0.data(), h.c0.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(s.ptr, h.scale.data(), h.scale.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  if (!cs.group_m.empty()) {
    ASSERT_EQ(cudaMemcpy(gm.ptr, cs.group_m.data(), cs.group_m.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(go.ptr, cs.group_offset.data(), cs.group_offset.size() * 4, cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  GemmDesc d = make_desc(cs, h, a.ptr, b.ptr, c.ptr, static_cast<const float*>(s.ptr),
                         static_cast<const int*>(gm.ptr), static_cast<const int*>(go.ptr));
  d.num_sms = sm_count();
  d.tma_store = opt.tma_store;
  d.keep_operands = opt.keep_operands;
  d.merge_tails = opt.merge_tails;
  GemmParams p;
  const Status st = make_gemm_params(d, &p);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  const char* env = std::getenv("KOSMOS_GEMM_TMA_STORE");
  const bool env_off = env != nullptr && std::string(env) == "0";
  EXPECT_EQ((p.epilogue & kGemmEpiTmaStore) != 0,
            opt.tma_store && !env_off && !(cs.epi & kGemmEpiAccumulate) && h.n_out % 8 == 0);
  ASSERT_EQ(testing::launch_gemm_engine(p, d.num_sms, cs.run, 16, nullptr, cs.along_n), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint16_t> out(h.c0.size());
  ASSERT_EQ(cudaMemcpy(out.data(), c.ptr, out.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  check_output(cs, h, out, rng);
  if (out_copy) *out_copy = std::move(out);
}

// Runs the case twice on the same inputs (one generator state each), with options x and y, and
// expects the same bits everywhere in C (padding and untouched rows included).
void expect_same_output(const Case& cs, EngineOptions x, EngineOptions y) {
  const uint64_t seed = fresh_seed();
  std::mt19937_64 r1(seed), r2(seed);
  std::vector<uint16_t> out_x, out_y;
  run_gpu_case(cs, r1, x, &out_x);
  run_gpu_case(cs, r2, y, &out_y);
  ASSERT_EQ(out_x.size(), out_y.size());
  size_t diff = 0;
  for (size_t i = 0; i < out_x.size(); ++i) diff += out_x[i] != out_y[i];
  EXPECT_EQ(diff, 0u) << cs.name << ": " << diff << " of " << out_x.size() << " elements differ";
}

Case mk(int64_t m, int64_t n, int64_t k, bool a_col = false, bool b_t = false, uint32_t epi = 0) {
  Case cs;
  cs.m = m;
  cs.n = n;
  cs.k = k;
  cs.a_col = a_col;
  cs.b_t = b_t;
  cs.epi = epi;
  return cs;
}

const char* layout_name(bool a_col, bool b_t) {
  if (!a_col) return b_t ? "NT" : "NN";
  return b_t ? "TT" : "TN";
}

std::string case_name(const Case& cs) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%s m=%lld n=%lld k=%lld epi=%u pad=%lld shape=%d run=%d%s groups=%zu",
                layout_name(cs.a_col, cs.b_t), (long long)cs.m, (long long)cs.n, (long long)cs.k, cs.epi,
                (long long)cs.pad, int(cs.shape), cs.run, cs.along_n ? " along N" : "", cs.group_m.size());
  return buf;
}

#define KOSMOS_REQUIRE_GPU()                                                    \
  do {                                                                          \
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device: GPU GEMM engine test skipped"; \
  } while (0)

TEST(GemmEngineGpu, DenseSweepLayoutsTails) {
  KOSMOS_REQUIRE_GPU();
  const int64_t vals[] = {1, 7, 64, 127, 128, 1000, 4096};
  std::mt19937_64 rng(fresh_seed());
  std::vector<Case> cases;
  // Every M against a rotating (N, K), all four layouts, both tile shapes, padded and tight lds.
  int i = 0;
  for (int64_t m : vals) {
    for (int64_t n : vals) {
      const int64_t k = vals[(i * 3 + 1) % 7];
      Case cs;
      cs.m = m;
      cs.n = n;
      cs.k = k;
      cs.a_col = (i % 4) >= 2;
      cs.b_t = (i % 2) == 1;
      cs.pad = (i % 3 == 0) ? 8 : 0;
      cs.shape = (i % 5 == 0) ? GemmTileShape::k128x128 : (i % 5 == 1) ? GemmTileShape::k128x64 : GemmTileShape::kAuto;
      cs.run = (i % 7 == 3) ? 3 : 1;
      cases.push_back(cs);
      ++i;
    }
  }
  for (Case cs : {mk(4096, 4096, 4096), mk(1000, 4096, 1000, true, true), mk(4096, 7, 4096, true),
                  mk(127, 1000, 4096, false, true)}) {
    cases.push_back(cs);
  }
  for (auto& cs : cases) {
    cs.name = case_name(cs);
    run_gpu_case(cs, rng);
  }
}

TEST(GemmEngineGpu, Epilogues) {
  KOSMOS_REQUIRE_GPU();
  std::mt19937_64 rng(fresh_seed());
  const uint32_t epis[] = {kGemmEpiAccumulate, kGemmEpiRowScale, kGemmEpiSwiGLU, kGemmEpiRowScale | kGemmEpiAccumulate,
                           kGemmEpiSwiGLU | kGemmEpiRowScale};
  const bool layouts[][2] = {{false, false}, {false, true}, {true, false}, {true, true}};
  int i = 0;
  for (uint32_t epi : epis) {
    for (auto& l : layouts) {
      Case cs;
      cs.m = (i % 2) ? 1000 : 127;
      cs.n = (epi & kGemmEpiSwiGLU) ? ((i % 3) ? 1008 : 4096) : ((i % 3) ? 1000 : 300);
      cs.k = (i % 2) ? 300 : 1000;
      cs.a_col = l[0];
      cs.b_t = l[1];
      cs.epi = epi;
      cs.pad = (i % 2) ? 8 : 0;
      cs.shape = (i % 3 == 2) ? GemmTileShape::k128x128 : (i % 3 == 1) ? GemmTileShape::k128x64 : GemmTileShape::k128x256;
      cs.run = (i % 4 == 1) ? 2 : 1;
      cs.name = case_name(cs);
      run_gpu_case(cs, rng);
      ++i;
    }
  }
}

TEST(GemmEngineGpu, GroupedWithEmptyGroups) {
  KOSMOS_REQUIRE_GPU();
  std::mt19937_64 rng(fresh_seed());
  struct G {
    std::vector<int> m;
    int gap;  // rows left out between groups (must stay untouched)
  };
  std::vector<G> gs = {{{0, 1, 300, 0, 128, 1000, 7, 0}, 5}, {{0}, 0}, {{0, 0, 129}, 0}};
  {  // 40 skewed groups with empties (exercises > 32 groups and several groups per lane)
    std::vector<int> m;
    for (int g = 0; g < 40; ++g) m.push_back(g % 5 == 0 ? 0 : int(std::uniform_int_distribution<int>(1, 700)(rng)));
    gs.push_back({m, 0});
  }
  {  // 256 groups, the maximum
    std::vector<int> m;
    for (int g = 0; g < 256; ++g) m.push_back(g % 3 == 0 ? 0 : int(std::uniform_int_distribution<int>(0, 100)(rng)));
    gs.push_back({m, 3});
  }
  int i = 0;
  for (const auto& gcase : gs) {
    for (uint32_t epi : {uint32_t(kGemmEpiStore), uint32_t(kGemmEpiSwiGLU | kGemmEpiRowScale), uint32_t(kGemmEpiAccumulate)}) {
      for (bool b_t : {false, true}) {
        Case cs;
        int off = 0;
        for (int mg : gcase.m) {
          cs.group_offset.push_back(off);
          cs.group_m.push_back(mg);
          off += mg + gcase.gap;
        }
        cs.m = std::max(off, 1);
        cs.n = (epi & kGemmEpiSwiGLU) ? 512 : 520;
        cs.k = (i % 2) ? 1000 : 256;
        cs.b_t = b_t;
        cs.epi = epi;
        cs.shape = (i % 2) ? GemmTileShape::k128x128 : GemmTileShape::k128x256;
        cs.run = (i % 3 == 1) ? 4 : 1;
        cs.name = case_name(cs);
        run_gpu_case(cs, rng);
        ++i;
      }
    }
  }
}

// The TMA-store epilogue (full warp slices through a C tensor map, the rest with 16-byte stores)
// writes exactly what the 16-byte stores alone write: same bits, same untouched poison in padding
// columns and between groups; dense tails, grouped partial blocks, SwiGLU and row scale.
TEST(GemmEngineGpu, TmaStoreEpilogueEqualsRegisterStores) {
  KOSMOS_REQUIRE_GPU();
  std::vector<Case> cases = {mk(1000, 1000, 300), mk(4096, 4096, 512, false, true, kGemmEpiSwiGLU | kGemmEpiRowScale),
                             mk(127, 520, 1000, true, false, kGemmEpiRowScale), mk(1, 8, 64), mk(1, 7, 64)};
  cases[0].pad = 8;
  cases[1].run = 3;
  cases[2].shape = GemmTileShape::k128x128;
  Case grouped = mk(0, 520, 256, false, true);
  int off = 0;
  for (int mg : {0, 300, 128, 1, 700, 0, 129}) {
    grouped.group_offset.push_back(off);
    grouped.group_m.push_back(mg);
    off += mg + 3;  // 3 rows between groups keep their poison
  }
  grouped.m = off;
  grouped.run = 2;
  cases.push_back(grouped);
  Case grouped_swiglu = grouped;
  grouped_swiglu.n = 512;
  grouped_swiglu.epi = kGemmEpiSwiGLU;
  grouped_swiglu.shape = GemmTileShape::k128x64;
  cases.push_back(grouped_swiglu);
  for (auto& cs : cases) {
    cs.name = case_name(cs);
    expect_same_output(cs, EngineOptions{}, EngineOptions{.tma_store = false});
  }
}

// Kept operands (kGemmKeepOperands): runs whose tiles share B (down M) or A (along N) and fit one
// ring of k blocks load the shared operand once. The result must be exactly that of loading every
// operand of every tile: dense runs both ways, K below, at and above one ring (4 stages at
// 128 x 256, 6 at 128 x 128), K tails, all four layouts, grouped runs crossing group boundaries
// (B changes mid-run) with empty groups, SwiGLU and row scale.
TEST(GemmEngineGpu, KeptOperandsEqualRingLoads) {
  KOSMOS_REQUIRE_GPU();
  std::vector<Case> cases = {mk(1000, 1000, 256), mk(1000, 1000, 200, false, true), mk(700, 2000, 64, true),
                             mk(1000, 1000, 320, true, true), mk(1000, 1000, 320, false, false),
                             mk(513, 4096, 130, false, true, kGemmEpiSwiGLU | kGemmEpiRowScale),
                             mk(300, 520, 1, false, false, kGemmEpiRowScale), mk(1000, 1000, 1000)};
  const int runs[] = {5, 3, 7, 4, 6, 3, 2, 4};
  for (size_t i = 0; i < cases.size(); ++i) {
    cases[i].run = runs[i];
    cases[i].along_n = (i % 2) == 1;
  }
  cases[4].shape = GemmTileShape::k128x128;  // 5 k blocks in a 6-stage ring
  cases[6].shape = GemmTileShape::k128x64;
  // A grouped run over groups of these sizes (empty ones among them), B [K, N] walking down M or
  // B [N, K] along N, so that B or the mode changes mid-run.
  auto grouped_run = [](int64_t k, bool along_n, std::initializer_list<int> sizes, int run) {
    Case grouped = mk(0, 1000, k, false, along_n);
    int off = 0;
    for (int mg : sizes) {
      grouped.group_offset.push_back(off);
      grouped.group_m.push_back(mg);
      off += mg;
    }
    grouped.m = off;
    grouped.run = run;
    grouped.along_n = along_n;
    return grouped;
  };
  for (bool along_n : {false, true}) cases.push_back(grouped_run(192, along_n, {0, 300, 128, 1, 700, 0, 129, 250}, 5));
  // Runs around one ring of k blocks (stage_walk.h): up to one ring keeps, one block past it keeps
  // nothing (the twenty-fifth session's partial keep ran these cases, then was removed as slower).
  // Every tile shape, K tails past the ring, all four layouts, and a grouped run across groups of
  // 1..700 rows, so that the mode changes mid-run.
  struct Extra {
    GemmTileShape shape;
    int64_t k;
    bool along_n, a_col, b_t;
    int run;
  };
  const Extra extra[] = {{GemmTileShape::k128x256, 257, false, false, false, 5}, {GemmTileShape::k128x256, 320, true, false, true, 4},
                         {GemmTileShape::k128x256, 300, false, true, true, 3}, {GemmTileShape::k128x256, 290, true, true, false, 6},
                         {GemmTileShape::k128x128, 400, false, false, true, 5}, {GemmTileShape::k128x128, 448, true, false, false, 4},
                         {GemmTileShape::k128x64, 520, false, true, false, 6}, {GemmTileShape::k128x64, 576, true, false, true, 7}};
  for (const Extra& e : extra) {
    Case cs = mk(1000, 1000, e.k, e.a_col, e.b_t);
    cs.shape = e.shape;
    cs.run = e.run;
    cs.along_n = e.along_n;
    cases.push_back(cs);
  }
  for (bool along_n : {false, true}) {
    cases.push_back(grouped_run(300, along_n, {0, 320, 1, 128, 0, 700, 129}, 4));
    cases.back().shape = GemmTileShape::k128x256;
  }
  for (auto& cs : cases) {
    cs.name = case_name(cs);
    expect_same_output(cs, EngineOptions{}, EngineOptions{.keep_operands = false});
  }
}

// Merged tails (kGemmMergeTails): a group's last block of <= 32 rows computed by the tile of the block
// before it (a swapped wgmma on its B tile, an epilogue through the staging). Against fp64 (rows
// between groups must keep their poison) and bit for bit against separate tiles: tails of 1, 17, 32
// and 33 (not merged) rows, groups of one merged block (129 rows) back to back in runs of 3 slots,
// K below, at and above one ring (kept operands are off for merged tiles), every epilogue the merged
// tile has (store, row scale, SwiGLU), N not a multiple of 256.
TEST(GemmEngineGpu, MergedTailsAgainstFp64AndSeparateTiles) {
  KOSMOS_REQUIRE_GPU();
  int i = 0;
  for (uint32_t epi : {uint32_t(kGemmEpiStore), uint32_t(kGemmEpiRowScale), uint32_t(kGemmEpiSwiGLU)}) {
    for (int k : {256, 1000, 64}) {
      Case cs = mk(0, (epi & kGemmEpiSwiGLU) ? 768 : 776, k, false, false, epi);
      int off = 0;
      for (int mg : {129, 129, 0, 273, 160, 161, 7, 256, 1, 145, 300}) {
        cs.group_offset.push_back(off);
        cs.group_m.push_back(mg);
        off += mg + (i % 2);  // odd cases: a row between groups keeps its poison
      }
      cs.m = off;
      cs.shape = GemmTileShape::k128x256;
      cs.run = (i % 3 == 0) ? 3 : 1;
      cs.name = case_name(cs) + " merged";
      expect_same_output(cs, EngineOptions{.merge_tails = true}, EngineOptions{});
      ++i;
    }
  }
}

// ---- CPU-only: input validation and the CPU executor's tile ----

TEST(GemmEngineHost, RejectsBadInputsWithClearMessages) {
  alignas(16) static uint16_t buf[4096];
  GemmDesc ok;
  ok.a = buf;
  ok.b = buf;
  ok.c = buf;
  ok.m = ok.n = ok.k = 32;
  ok.lda = ok.ldb = ok.ldc = 32;
  ok.encode_tma = false;
  GemmParams p;
  ASSERT_TRUE(make_gemm_params(ok, &p).is_ok());

  auto expect_error = [&](GemmDesc d, const std::string& needle) {
    const Status s = make_gemm_params(d, &p);
    EXPECT_FALSE(s.is_ok()) << needle;
    EXPECT_NE(s.message().find(needle), std::string::npos) << "message: " << s.message();
  };
  GemmDesc d = ok;
  d.a = reinterpret_cast<const char*>(buf) + 2;
  expect_error(d, "not 16-byte aligned");
  d = ok;
  d.c_dtype = GemmDType::kF32;
  expect_error(d, "c_dtype is f32, expected bf16");
  d = ok;
  d.k = 0;
  expect_error(d, "k = 0");
  d = ok;
  d.lda = 12;
  expect_error(d, "lda = 12");
  d = ok;
  d.lda = 36;
  expect_error(d, "multiple of 8");
  d = ok;
  d.ldc = 16;
  expect_error(d, "ldc = 16");
  d = ok;
  d.epilogue = kGemmEpiSwiGLU;
  d.n = 24;
  d.ldb = 24;
  expect_error(d, "% 16");
  d = ok;
  d.epilogue = kGemmEpiRowScale;
  expect_error(d, "row_scale is null");
  d = ok;
  d.num_groups = 300;
  expect_error(d, "num_groups = 300");
  d = ok;
  d.num_groups = 2;
  expect_error(d, "group_m is null");
  d = ok;
  d.epilogue = kGemmEpiTmaStore;  // set by make_gemm_params itself, never by a caller
  expect_error(d, "unknown bits");
  // Without tensor maps (the CPU executor) there is no TMA-store epilogue.
  ASSERT_TRUE(make_gemm_params(ok, &p).is_ok());
  EXPECT_EQ(p.epilogue & kGemmEpiTmaStore, 0u);
}

TEST(GemmEngineHost, HostTileMatchesFp64) {
  std::mt19937_64 rng(fresh_seed());
  std::vector<Case> cases = {mk(200, 300, 70, false, false),           mk(130, 260, 33, true, true),
                             mk(129, 48, 65, false, true, kGemmEpiSwiGLU | kGemmEpiRowScale),
                             mk(50, 20, 7, true, false, kGemmEpiAccumulate)};
  Case grouped = mk(0, 272, 40, false, true, kGemmEpiSwiGLU);
  grouped.group_m = {0, 130, 5, 0, 1};
  int off = 0;
  for (int mg : grouped.group_m) {
    grouped.group_offset.push_back(off);
    off += mg;
  }
  grouped.m = off;
  cases.push_back(grouped);
  for (auto& cs : cases) {
    cs.name = case_name(cs);
    SCOPED_TRACE(cs.name);
    HostData h = make_data(cs, rng);
    std::vector<uint16_t> out = h.c0;
    GemmDesc d = make_desc(cs, h, h.a.data(), h.b.data(), out.data(), h.scale.data(), cs.group_m.data(),
                           cs.group_offset.data());
    d.encode_tma = false;
    GemmParams p;
    ASSERT_TRUE(make_gemm_params(d, &p).is_ok());
    for (int n = 0; n < p.num_n_tiles; ++n)
      for (int m = 0; m < p.num_m_tiles; ++m) gemm_tile_host(d, p, GemmTileArgs{0, uint32_t(m), uint32_t(n), 1, 0, {}});
    check_output(cs, h, out, rng);
  }
}

}  // namespace
}  // namespace kosmos::kernels::gemm
