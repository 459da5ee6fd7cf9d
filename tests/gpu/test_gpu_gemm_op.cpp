// kosmos::Gemm on the H200 through the persistent runtime (GEMM tiles as tasks): fp64 reference
// over a sweep with tails, all layouts and epilogues; poisoned outputs; CUDA-graph replay.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "gpu_skip.h"

#include "../gemm_reference.h"
#include "kosmos/gemm.h"
#include "kosmos/runtime.h"

using namespace kosmos;
using namespace kosmos::test;


namespace {
struct Dev {
  void* p = nullptr;
  explicit Dev(size_t bytes) { EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(bytes, 16)), cudaSuccess); }
  ~Dev() { cudaFree(p); }
};

// Runs one case; for large problems checks a sample of rows against fp64.
double run_case(int64_t m, int64_t n, int64_t k, bool a_col, bool b_t, uint32_t epi, uint64_t seed, int replays = 0) {
  const int64_t n_out = (epi & kEpilogueSwiGLU) ? n / 2 : n;
  GemmArguments g;
  g.m = m;
  g.n = n;
  g.k = k;
  g.a_col_major = a_col;
  g.b_transposed = b_t;
  g.lda = ((a_col ? m : k) + 7) / 8 * 8;
  g.ldb = ((b_t ? k : n) + 7) / 8 * 8;
  g.ldc = (n_out + 7) / 8 * 8;
  g.epilogue = epi;
  const size_t a_el = size_t(a_col ? k : m) * g.lda, b_el = size_t(b_t ? n : k) * g.ldb, c_el = size_t(m) * g.ldc;
  auto a = random_bf16(a_el, seed), b = random_bf16(b_el, seed + 1), c_in = random_bf16(c_el, seed + 2);
  std::vector<float> scale(m);
  for (int64_t i = 0; i < m; ++i) scale[i] = 0.5f + float(i % 7) / 7.0f;
  Dev da(a_el * 2), db(b_el * 2), dc(c_el * 2), ds(m * 4);
  cudaMemcpy(da.p, a.data(), a_el * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(db.p, b.data(), b_el * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(ds.p, scale.data(), m * 4, cudaMemcpyHostToDevice);
  if (epi & kEpilogueAccumulate) cudaMemcpy(dc.p, c_in.data(), c_el * 2, cudaMemcpyHostToDevice);
  else cudaMemset(dc.p, 0xFF, c_el * 2);  // poison: NaN
  g.a = da.p;
  g.b = db.p;
  g.c = dc.p;
  g.row_scale = static_cast<const float*>(ds.p);
  std::unique_ptr<Gemm> plan;
  Status s = Gemm::plan(g, GemmOptions{}, &plan);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  if (!s) return INFINITY;
  if (replays == 0) {
    EXPECT_TRUE(plan->run().is_ok());
  } else {  // capture once, replay: without the accumulate epilogue the result is idempotent
    cudaStream_t st;
    cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    EXPECT_EQ(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal), cudaSuccess);
    EXPECT_TRUE(plan->run(st).is_ok());
    EXPECT_EQ(cudaStreamEndCapture(st, &graph), cudaSuccess);
    EXPECT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (int r = 0; r < replays; ++r) {
      cudaMemsetAsync(dc.p, 0xFF, c_el * 2, st);
      EXPECT_EQ(cudaGraphLaunch(exec, st), cudaSuccess);
    }
    EXPECT_TRUE(plan->finish(st).is_ok());
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(st);
  }
  s = plan->finish();
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  std::vector<uint16_t> c(c_el);
  cudaMemcpy(c.data(), dc.p, c_el * 2, cudaMemcpyDeviceToHost);
  // Reference on a row sample when the problem is large.
  const bool sample = double(m) * n * k > 1e8;
  GemmArguments gr = g;
  std::vector<uint16_t> ar, cr, cin_r;
  std::vector<float> sr;
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < m; i += sample ? 61 : 1) rows.push_back(i);
  gr.m = int64_t(rows.size());
  if (a_col) {  // gather columns of A^T
    gr.lda = (gr.m + 7) / 8 * 8;
    ar.assign(size_t(k) * gr.lda, 0);
    for (int64_t kk = 0; kk < k; ++kk)
      for (size_t r = 0; r < rows.size(); ++r) ar[kk * gr.lda + r] = a[kk * g.lda + rows[r]];
  } else {
    for (int64_t i : rows) ar.insert(ar.end(), a.begin() + i * g.lda, a.begin() + (i + 1) * g.lda);
  }
  for (int64_t i : rows) {
    cr.insert(cr.end(), c.begin() + i * g.ldc, c.begin() + (i + 1) * g.ldc);
    cin_r.insert(cin_r.end(), c_in.begin() + i * g.ldc, c_in.begin() + (i + 1) * g.ldc);
    sr.push_back(scale[i]);
  }
  auto ref = reference_gemm(gr, ar, b, cin_r, sr, n_out);
  return relative_error(cr, g.ldc, ref, gr.m, n_out);
}
}  // namespace

TEST(GpuGemmOp, SweepTailsAllLayouts) {
  SKIP_WITHOUT_GPU();
  const int64_t sizes[] = {1, 7, 64, 127, 128, 1000, 4096};
  uint64_t seed = 100;
  int cases = 0;
  const bool layout_skip_big = false;
  for (int64_t m : sizes)
    for (int64_t n : sizes)
      for (int64_t k : sizes) {
        if (n % 8 || k % 8) continue;  // TMA: leading dimensions are padded; n, k need 16-byte rows for B/A
        if (m == 4096 && n == 4096 && k == 4096 && layout_skip_big) continue;
        for (int layout = 0; layout < 4; ++layout) {
          const double err = run_case(m, n, k, layout & 1, layout & 2, kEpilogueStore, seed += 3);
          EXPECT_LT(err, 1e-2) << m << "x" << n << "x" << k << " layout " << layout;
          ++cases;
        }
      }
  std::printf("[gemm sweep] %d cases\n", cases);
}

TEST(GpuGemmOp, TailsInNAndKWithPaddedLeadingDimensions) {
  SKIP_WITHOUT_GPU();
  for (auto [m, n, k] : std::vector<std::array<int64_t, 3>>{{127, 7, 1}, {1000, 127, 7}, {7, 1000, 127}, {129, 1, 1000}})
    for (int layout = 0; layout < 4; ++layout)
      EXPECT_LT(run_case(m, n, k, layout & 1, layout & 2, kEpilogueStore, 7 + layout), 1e-2)
          << m << "x" << n << "x" << k << " layout " << layout;
}

TEST(GpuGemmOp, Epilogues) {
  SKIP_WITHOUT_GPU();
  for (uint32_t epi : {kEpilogueAccumulate, kEpilogueRowScale, kEpilogueSwiGLU, kEpilogueSwiGLU | kEpilogueRowScale,
                       kEpilogueAccumulate | kEpilogueRowScale})
    for (auto [m, n, k] : std::vector<std::array<int64_t, 3>>{{1000, 512, 1000}, {127, 272, 64}, {4096, 1024, 512}})
      for (int layout = 0; layout < 4; ++layout)
        EXPECT_LT(run_case(m, n, k, layout & 1, layout & 2, epi, 11 + epi * 4 + layout), 1e-2)
            << m << "x" << n << "x" << k << " epi " << epi << " layout " << layout;
}

// Dense plans with the ring carry off and on (on is the default every other test runs): runs of
// kept-B tiles (K = 256) carried into the next run (a drain first), K past a ring, accumulate.
TEST(GpuGemmOp, RingCarryOffAndOn) {
  SKIP_WITHOUT_GPU();
  for (const char* carry : {"0", "1"}) {
    ScopedEnv e("KOSMOS_RING_CARRY", carry);
    for (auto [m, n, k] : std::vector<std::array<int64_t, 3>>{{4096, 1024, 256}, {1000, 512, 1000}, {2048, 4096, 192}})
      for (uint32_t epi : {kEpilogueStore, kEpilogueAccumulate | kEpilogueRowScale})
        for (int layout = 0; layout < 4; ++layout)
          EXPECT_LT(run_case(m, n, k, layout & 1, layout & 2, epi, 31 + epi + layout), 1e-2)
              << m << "x" << n << "x" << k << " epi " << epi << " layout " << layout << " KOSMOS_RING_CARRY=" << carry;
  }
}

TEST(GpuGemmOp, CudaGraphReplay) {
  SKIP_WITHOUT_GPU();
  EXPECT_LT(run_case(1000, 1024, 512, false, false, kEpilogueStore, 77, 50), 1e-2);
}

// Grouped kosmos::Gemm with B [K, N] on 128 x 256 tiles merges each group's last block of at most 32
// rows into the tile before it when asked (GemmOptions::merge_tails): tails of 1, 32 and 33 rows,
// an empty group, a lone short group; K of 1000 (a partial k block); store, row-scale and SwiGLU
// epilogues. C (poisoned first) is bit for bit that of the plan without merging, and a row sample
// of every group agrees with fp64.
// Merged tails against separate tail tiles, each with and without the ring carry (a task loading
// its CTA's next task's first k blocks): all four bit for bit, and fp64 on the groups' edge rows.
// K = 1000 (16 k blocks: a ring of them carried), K = 192 (3: whole tiles carried, kept B runs).
TEST(GpuGemmOp, GroupedMergedTailsEqualSeparateTiles) {
  SKIP_WITHOUT_GPU();
  std::vector<int> gm, off;
  const int64_t rows = merged_tail_groups(8, &gm, &off);
  const int G = int(gm.size());
  for (const int64_t k : {int64_t(1000), int64_t(192)}) {
    SCOPED_TRACE("k " + std::to_string(k));
    const int64_t n = 512;
    auto a = random_bf16(size_t(rows) * k, 91), b = random_bf16(size_t(G) * k * n, 92);
    std::vector<float> scale(rows);
    for (int64_t i = 0; i < rows; ++i) scale[i] = 0.5f + float(i % 7) / 7.0f;
    Dev da(a.size() * 2), db(b.size() * 2), ds(rows * 4), dgm(G * 4), doff(G * 4), dc(size_t(rows) * n * 2);
    cudaMemcpy(da.p, a.data(), a.size() * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(db.p, b.data(), b.size() * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(ds.p, scale.data(), rows * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dgm.p, gm.data(), G * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(doff.p, off.data(), G * 4, cudaMemcpyHostToDevice);
    for (uint32_t epi : {kEpilogueStore, kEpilogueRowScale, kEpilogueSwiGLU}) {
      SCOPED_TRACE("epilogue " + std::to_string(epi));
      const int64_t n_out = (epi & kEpilogueSwiGLU) ? n / 2 : n;
      GemmArguments g;
      g.a = da.p;
      g.lda = k;
      g.b = db.p;
      g.ldb = n;
      g.c = dc.p;
      g.ldc = n_out;
      g.m = rows;
      g.n = n;
      g.k = k;
      g.epilogue = epi;
      g.row_scale = static_cast<const float*>(ds.p);
      g.num_groups = G;
      g.group_m = static_cast<const int*>(dgm.p);
      g.group_offset = static_cast<const int*>(doff.p);
      std::vector<uint16_t> c[4];  // [2 * carry + merge]
      for (int run = 0; run < 4; ++run) {
        const int merge = run % 2;
        ScopedEnv carry("KOSMOS_RING_CARRY", run / 2 ? "1" : "0");
        GemmOptions o;
        o.merge_tails = merge != 0 ? GemmMergeTails::kOn : GemmMergeTails::kOff;
        std::unique_ptr<Gemm> plan;
        Status s = Gemm::plan(g, o, &plan);
        ASSERT_TRUE(s.is_ok()) << s.to_string();
        EXPECT_EQ(plan->raster().find("tails of <= 32 rows merged") != std::string::npos, merge != 0) << plan->raster();
        cudaMemset(dc.p, 0xFF, size_t(rows) * n_out * 2);  // poison: NaN
        ASSERT_TRUE(plan->run().is_ok());
        s = plan->finish();
        ASSERT_TRUE(s.is_ok()) << s.to_string();
        c[run].resize(size_t(rows) * n_out);
        cudaMemcpy(c[run].data(), dc.p, c[run].size() * 2, cudaMemcpyDeviceToHost);
      }
      for (int run = 1; run < 4; ++run) {
        size_t diff = 0;
        for (size_t i = 0; i < c[0].size(); ++i) diff += c[0][i] != c[run][i];
        EXPECT_EQ(diff, 0u) << "elements differing from separate tail tiles without the carry: merged " << run % 2
                            << ", carry " << run / 2;
      }
      // fp64 (reference_gemm, group by group) on each group's first, 128th..131st and last rows (the
      // merged tails' rows included).
      std::vector<uint16_t> got;
      std::vector<double> ref;
      int64_t sampled = 0;
      for (int grp = 0; grp < G; ++grp) {
        std::vector<uint16_t> ar;
        std::vector<float> sr;
        for (int r : {0, 127, 128, 129, 130, 255, 256, 257, gm[grp] - 1}) {
          if (r < 0 || r >= gm[grp]) continue;
          const int64_t row = off[grp] + r;
          ar.insert(ar.end(), a.begin() + row * k, a.begin() + (row + 1) * k);
          got.insert(got.end(), c[3].begin() + row * n_out, c[3].begin() + (row + 1) * n_out);
          sr.push_back(scale[row]);
        }
        GemmArguments gr = g;
        gr.m = int64_t(sr.size());
        gr.num_groups = 0;
        const std::vector<uint16_t> bg(b.begin() + size_t(grp) * k * n, b.begin() + size_t(grp + 1) * k * n);
        const std::vector<double> rg = reference_gemm(gr, ar, bg, {}, sr, n_out);
        ref.insert(ref.end(), rg.begin(), rg.end());
        sampled += gr.m;
      }
      EXPECT_LT(relative_error(got, n_out, ref, sampled, n_out), 1e-2);
    }
  }
}
