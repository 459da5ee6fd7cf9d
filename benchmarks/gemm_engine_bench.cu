// GEMM engine benchmark: the engine's standalone persistent kernel vs cuBLAS (cublasGemmEx, bf16 in,
// fp32 compute) on the same inputs, dense shapes and grouped expert GEMMs (vs
// cublasGemmGroupedBatchedEx and vs one dense cuBLAS GEMM of the same total M).
// Timing: CUDA events around each launch, warm-up, median of --reps launches (the compared launchers
// alternate repetition by repetition), input buffers rotated
// over enough copies that their total exceeds 2 x the 60 MB L2. Outputs verified against cuBLAS.
//   gemm_engine_bench [--json PATH] [--reps N] [--run R|auto] [--raster G] [--shape auto|256|128|64] [--layout nt|nn]
//                     [--dense-only|--grouped-only] [--dump-groups PATH [--dump-only]] [--pair-b]
//                     [--shapes MxNxK[,MxNxK...]]   (dense shapes instead of the issue's eight)
//                     [--raster-sweep R]   (kosmos::Gemm under every claim order, R alternated reps each)
// --dump-groups PATH writes the grouped cases' per-expert row counts (expert_rows()) and their
// (N, K) shapes as JSON before any GPU work, for bench/torch_baselines.py grouped-gemm --sizes PATH;
// --dump-only exits after writing it (no GPU needed).
// --pair-b (experiment, NT shapes with 128x256 tiles and an even number of m runs; grouped only with
// --uniform-groups or --equal-groups): also times the standalone engine in 2-CTA clusters whose pair
// shares each B tile (multicast, one load per pair; gemm_tile_pair_b), checks its C equals the plain
// engine's bit for bit, and prints the ratio.
// --uniform-groups: the grouped cases with 32 experts of 768 rows each (no skew, no partial block).
// --equal-groups G,ROWS: G experts of ROWS rows each instead (--uniform-groups is 32,768);
// --grouped-cases N,K[:N,K...]: those (N, K) problems instead of the DeepSeek-V3 proxy's two. The
// Qwen3 proxy's MoE GEMMs at T = 4096, W = 1: --equal-groups 128,256 --grouped-cases 3072,4096:4096,1536
// (with --pair-b: does B multicast relieve the L2 where the MoE's GEMM1 ran at 93 % of its peak?).
// --claim-order M|N,RUN,GROUP: the grouped kosmos::Gemm plans (separate and merged tiles) claim
// their tiles in that order instead of the planner's (GemmOptions::claim_order).
// --compare-orders M|N,RUN,GROUP[:...]: kosmos::Gemm under each listed order, tails separate and
// (where the problem admits it) merged, all alternated in one timing with the default plan's
// (GemmOptions{}), R = 5 x --reps reps; C bit for bit against the default's. Two launches of the
// default plan are in the rotation, so the spread between them shows the timing's noise.
// --compare-carry: the default kosmos::Gemm plan with and without the ring carry (KOSMOS_RING_CARRY=0
// when the second plan is made), alternated in the same timing as --compare-orders (dense and grouped).
// --data normal: operands standard normal (as torch.randn in bench/torch_baselines.py) instead of
// uniform in [-1, 1) (the default).
// --run auto (default) picks the run length per problem with the runtime's rule (op_runner.cpp
// choose_run_length: minimise ceil(tasks / SMs) * run over run <= 16, longer runs on ties).
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kosmos/gemm.h"
#include "ops/gemm_args.h"
#include "ops/gemm_raster.h"
#include "ops/op_runner.h"
#include "bench_util.cuh"
#include "bench_timing.h"
#include "gemm_engine_test_kernel.cuh"
#include "kernels/gemm/bf16.h"
#include "kernels/gemm/gemm_host.h"
#include "kernels/gemm/gemm_shapes.h"

using namespace kosmos::kernels::gemm;

#define CB(x)                                                                              \
  do {                                                                                     \
    cublasStatus_t s_ = (x);                                                               \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                     \
      std::fprintf(stderr, "%s:%d %s: cublas status %d\n", __FILE__, __LINE__, #x, int(s_)); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

namespace {

struct Options {
  std::string json;
  int reps = 30;
  int run = 0;  // 0 = auto (the runtime's rule)
  int raster = 16;
  std::string shape = "auto";
  bool nn = false;  // B [K, N] instead of [N, K]
  bool dense = true, grouped = true;
  std::string dump_groups;
  bool dump_only = false;
  bool pair_b = false;
  int sweep_reps = 0;  // --raster-sweep R: every claim order of kosmos::Gemm, R alternated reps each
  kosmos::GemmClaimOrder claim;  // --claim-order M|N,RUN,GROUP: the grouped kosmos::Gemm plans' order (run 0: the planner's)
  std::vector<kosmos::GemmClaimOrder> compare;  // --compare-orders O1:O2:...: each against the planner's, alternated
  bool compare_carry = false;  // --compare-carry: the default plan without the ring carry, alternated likewise
  std::vector<kosmos::kernels::gemm::GemmShape> shapes;  // --shapes MxNxK,...: dense shapes instead of the issue's eight
};

using bench_util::fill_random_bf16;
bool g_normal_data = false;  // --data normal: operands standard normal (torch.randn's), not uniform in [-1, 1)

struct Buf {
  void* p = nullptr;
  size_t bytes = 0;
  explicit Buf(size_t b) : bytes(b) { CK(cudaMalloc(&p, std::max<size_t>(b, 16))); }
  ~Buf() { cudaFree(p); }
  uint16_t* h() const { return static_cast<uint16_t*>(p); }
};

int run_for(const Options& o, const GemmParams& p, int sms) {
  return o.run > 0 ? o.run : int(kosmos::ops::choose_run_length(p.num_m_tiles, p.num_n_tiles, sms));
}

// Several launchers timed alternately with the CLI's timer (repetition i starts with launcher i % n,
// each between its own events; cli/bench_timing.h says why), median of each; launcher j gets the
// operand set rep % sets.
std::vector<float> time_medians(int reps, int sets, const std::vector<std::function<void(int)>>& launch) {
  std::vector<std::function<kosmos::Status(int)>> fns;
  for (const auto& f : launch)
    fns.push_back([&f, sets](int rep) {
      f(rep % sets);
      return kosmos::Status::ok();
    });
  std::vector<double> med;
  const kosmos::Status st = kosmos::cli::time_median_interleaved_ms(nullptr, reps, fns, &med);
  if (!st.is_ok()) {
    std::fprintf(stderr, "%s\n", st.to_string().c_str());
    std::exit(1);
  }
  return std::vector<float>(med.begin(), med.end());
}

double rel_diff(const Buf& x, const Buf& y, size_t n) {
  std::vector<uint16_t> a(n), b(n);
  CK(cudaMemcpy(a.data(), x.p, n * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(b.data(), y.p, n * 2, cudaMemcpyDeviceToHost));
  double e2 = 0, r2 = 0;
  for (size_t i = 0; i < n; ++i) {
    const double u = bf16_to_float(a[i]), v = bf16_to_float(b[i]);
    if (std::isnan(u)) return INFINITY;
    e2 += (u - v) * (u - v);
    r2 += v * v;
  }
  return std::sqrt(e2 / std::max(r2, 1e-30));
}

struct Row {
  std::string name;
  double flops;
  double ours_ms, ref_ms, ref2_ms;  // ref2: dense cuBLAS of the same total M (grouped), else 0
  double rt_ms = 0;                  // grouped: the same GEMM as a kosmos::Gemm plan on the runtime
  std::string rt_raster;             // its claim order
  double rt_dense_ms = 0;            // grouped: kosmos::Gemm of one dense GEMM of the same total M (expert 0's B)
  std::string rt_dense_raster;
  double rt_merged_ms = 0;           // grouped: kosmos::Gemm with GemmOptions::merge_tails
  std::string rt_merged_raster;      // its claim order (says whether tails merged: B [K, N] only)
  bool rt_merged_equal = false;      // its C bit for bit the plan with separate tiles
  bool rt_default_merges = false;    // GemmOptions default (GemmMergeTails::kAuto) plans the merged one
  std::string ref_name, ref2_name, shape;
  double err;
  double pair_ms = 0;       // --pair-b: the engine in 2-CTA clusters sharing B
  bool pair_equal = false;  // its C == the plain engine's, bit for bit
  std::vector<std::string> sweep;  // --raster-sweep: one JSON object per claim order
};

// --pair-b: the standalone engine's schedule over cluster pairs. Cluster c takes pair units; its CTA
// of rank r runs m run 2 * unit + r, so both walk the same n block and K in step (gemm_tile_pair_b).
__global__ void __launch_bounds__(384, 1)
    gemm_engine_pair_kernel(const __grid_constant__ GemmParams p, int run, int group_m_runs) {
  extern __shared__ __align__(1024) char smem[];
  kosmos::kernels::gemm::NoWait no_wait;
  const int rank = int(cute::block_rank_in_cluster());
  const int clusters = int(gridDim.x) / 2, cluster = int(blockIdx.x) / 2;
  const int pairs = p.num_m_tiles / (2 * run);
  const int gp = max(1, group_m_runs / 2);
  const int total = pairs * p.num_n_tiles;
  for (int t = cluster; t < total; t += clusters) {
    const int per_group = gp * p.num_n_tiles;
    const int group = t / per_group, within = t % per_group;
    const int rows_in_group = min(gp, pairs - group * gp);
    const int pair = group * gp + within % rows_in_group;
    const int n_tile = within / rows_in_group;
    const GemmTileArgs args{0, uint32_t((2 * pair + rank) * run), uint32_t(n_tile), uint32_t(run), {}};
    char* body_smem = smem;  // laundered per tile (gemm_engine_test_kernel.cuh)
    int body_thread = int(threadIdx.x);
    asm volatile("" : "+l"(body_smem));
    asm volatile("" : "+r"(body_thread));
    kosmos::kernels::gemm::gemm_tile_pair_b(p, args, body_smem, body_thread, no_wait);
    __syncthreads();
  }
}

// Grouped problems pair only when every group's rows are whole pairs of runs (--uniform-groups:
// 768 rows = three pairs of one-slot runs), so both CTAs of a pair always read the same group's B.
bool pair_b_applies(const GemmParams& p, bool nn, int run, const std::vector<int>& group_rows = {}) {
  if (nn || p.tile_shape != GemmTileShape::k128x256 || p.num_m_tiles % (2 * run) != 0) return false;
  if (p.num_groups == 0) return true;
  for (int m : group_rows)
    if (m % (2 * run * 128) != 0) return false;
  return !group_rows.empty();
}

void launch_pair_b(const GemmParams& p, int sms, int run, int group_m_runs) {
  static bool configured = false;
  if (!configured) {
    CK(cudaFuncSetAttribute(gemm_engine_pair_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            kosmos::kernels::gemm::kGemmSmemBytesMax));
    configured = true;
  }
  const int total = p.num_m_tiles / (2 * run) * p.num_n_tiles;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(unsigned(2 * std::min(sms / 2, total)));
  cfg.blockDim = dim3(384);
  cfg.dynamicSmemBytes = kosmos::kernels::gemm::gemm_smem_bytes(GemmTileShape::k128x256);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 2;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  CK(cudaLaunchKernelEx(&cfg, gemm_engine_pair_kernel, p, run, group_m_runs));
}

// --pair-b: the plain engine and the paired one on operand set 0 (C poisoned before each), C bit for
// bit equal?
bool pair_b_matches_plain(const GemmParams& p, void* c, size_t c_el, int sms, int run, int raster) {
  std::vector<uint16_t> plain(c_el), paired(c_el);
  CK(cudaMemset(c, 0xFF, c_el * 2));
  CK(kosmos::kernels::gemm::testing::launch_gemm_engine(p, sms, run, raster));
  CK(cudaMemcpy(plain.data(), c, c_el * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemset(c, 0xFF, c_el * 2));
  launch_pair_b(p, sms, run, raster);
  CK(cudaMemcpy(paired.data(), c, c_el * 2, cudaMemcpyDeviceToHost));
  return plain == paired;
}

GemmTileShape parse_shape(const std::string& s) { return gemm_tile_shape_of_width(std::atoi(s.c_str())); }

int num_sets_for(size_t bytes_per_set) {
  const size_t target = 256ull << 20;  // > 2 x 60 MB L2, with margin
  return int(std::clamp<size_t>((target + bytes_per_set - 1) / bytes_per_set, 2, 16));
}

// cuBLAS row-major C[M,N] = A[M,K] * op(B): B [N,K] (nt) or [K,N] (nn).
void cublas_gemm(cublasHandle_t h, bool nn, int m, int n, int k, const void* a, const void* b, void* c) {
  const float alpha = 1.f, beta = 0.f;
  CB(cublasGemmEx(h, nn ? CUBLAS_OP_N : CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, b, CUDA_R_16BF, nn ? n : k, a,
                  CUDA_R_16BF, k, &beta, c, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// Counts the elements of x that differ bitwise from y.
__global__ void count_mismatch(const uint16_t* x, const uint16_t* y, size_t n, unsigned long long* bad) {
  unsigned long long local = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    local += x[i] != y[i];
  if (local) atomicAdd(bad, local);
}
// The number of the n bf16 elements of x (device) that differ bitwise from y (device).
unsigned long long mismatches(const void* x, const uint16_t* y, size_t n) {
  Buf bad(8);
  CK(cudaMemset(bad.p, 0, 8));
  count_mismatch<<<264, 256>>>(static_cast<const uint16_t*>(x), y, n, static_cast<unsigned long long*>(bad.p));
  unsigned long long count = 0;
  CK(cudaMemcpy(&count, bad.p, 8, cudaMemcpyDeviceToHost));
  return count;
}

// One kosmos::Gemm plan per operand set with these options (exits with `what` on a planning error),
// and one run of a plan to completion.
std::vector<std::unique_ptr<kosmos::Gemm>> plan_each_set(const std::vector<kosmos::GemmArguments>& args,
                                                         const kosmos::GemmOptions& opt, const char* what) {
  std::vector<std::unique_ptr<kosmos::Gemm>> out(args.size());
  for (size_t s = 0; s < args.size(); ++s) {
    const kosmos::Status st = kosmos::Gemm::plan(args[s], opt, &out[s]);
    if (!st.is_ok()) {
      std::fprintf(stderr, "%s: kosmos::Gemm::plan: %s\n", what, st.to_string().c_str());
      std::exit(1);
    }
  }
  return out;
}
void run_once_or_exit(kosmos::Gemm& g, const char* what) {
  if (!g.run().is_ok() || !g.finish().is_ok()) {
    std::fprintf(stderr, "%s: kosmos::Gemm run failed\n", what);
    std::exit(1);
  }
}

// --raster-sweep: kosmos::Gemm under every claim order the planner could consider (both directions,
// every run length up to 16 that changes the number of runs, groups of 1, 2, 4, ... runs), each
// timed alternately with the planner's own choice on the same rotated operand sets, its C checked
// bit for bit against the planner's. Prints estimate against measurement, fastest first, and keeps
// them for the JSON: the data to calibrate ops::estimate_hbm_bytes with.
void sweep_claim_orders(const Options& o, int sms, int sets, const std::vector<kosmos::GemmArguments>& args,
                        const GemmParams& p0, size_t c_el, double flops, Row& row) {
  auto plan = [&](const kosmos::GemmClaimOrder& co) {
    kosmos::GemmOptions opt;
    opt.claim_order = co;
    return plan_each_set(args, opt, "sweep");
  };
  auto run_once = [](kosmos::Gemm& g) { run_once_or_exit(g, "sweep"); };
  const auto planner = plan({});
  Buf ref(c_el * 2);
  CK(cudaMemset(args[0].c, 0xFF, c_el * 2));
  run_once(*planner[0]);
  CK(cudaMemcpy(ref.p, args[0].c, c_el * 2, cudaMemcpyDeviceToDevice));
  // The host plans each order between timings and the card idles meanwhile: run the planner's
  // order for ~50 ms first, so every pair starts at full clocks.
  const float one_ms = time_medians(3, sets, {[&](int s) { (void)planner[s]->run(); }})[0];
  const int warm_launches = std::max(3, int(50.0f / std::max(one_ms, 0.01f)));
  auto warm = [&] {
    for (int i = 0; i < warm_launches; ++i) (void)planner[i % sets]->run();
    CK(cudaDeviceSynchronize());
  };
  const kosmos::ops::RasterProblem rp = kosmos::ops::raster_problem(p0, 0, p0.num_m_tiles, sms);
  struct Entry {
    kosmos::GemmClaimOrder order;
    kosmos::ops::RasterChoice est;
    float ms, planner_ms;
    bool equal;
  };
  std::vector<Entry> all;
  for (bool along_n : {false, true}) {
    const int dim = along_n ? rp.n_tiles : rp.m_end - rp.m_begin;
    for (const uint32_t length : kosmos::ops::distinct_run_lengths(dim)) {
      const int run = int(length);
      const int runs = (dim + run - 1) / run;
      // Groups of 1, 2, 4, ... runs, and (grouped, runs of one slot down M) the slots of about one
      // and two groups, so that a claim group can be one group's tiles, n-major.
      std::vector<int> groups;
      for (int g = 1;; g = std::min(2 * g, runs)) {
        groups.push_back(g);
        if (g == runs) break;
      }
      if (!along_n && run == 1 && rp.slots_per_group > 0)
        for (int g : {rp.slots_per_group, 2 * rp.slots_per_group})
          if (g < runs && std::find(groups.begin(), groups.end(), g) == groups.end()) groups.push_back(g);
      for (const int g : groups) {
        const kosmos::GemmClaimOrder co{uint32_t(run), along_n, g};
        const auto plans = plan(co);
        CK(cudaMemset(args[0].c, 0xFF, c_el * 2));
        run_once(*plans[0]);
        const bool equal = mismatches(args[0].c, ref.h(), c_el) == 0;
        warm();
        const std::vector<float> t = time_medians(o.sweep_reps, sets, {[&](int s) { (void)planner[s]->run(); },
                                                                       [&](int s) { (void)plans[s]->run(); }});
        all.push_back({co, kosmos::ops::evaluate_order(rp, along_n, uint32_t(run), g), t[1], t[0], equal});
      }
    }
  }
  std::sort(all.begin(), all.end(), [](const Entry& a, const Entry& b) { return a.ms / a.planner_ms < b.ms / b.planner_ms; });
  // Confirmation: the six best of the screening and the planner's, all alternated, 5x the reps.
  {
    const size_t top = std::min<size_t>(6, all.size());
    std::vector<std::vector<std::unique_ptr<kosmos::Gemm>>> best;
    std::vector<std::function<void(int)>> launch = {[&](int s) { (void)planner[s]->run(); }};
    for (size_t i = 0; i < top; ++i) best.push_back(plan(all[i].order));
    for (size_t i = 0; i < top; ++i) launch.push_back([&, i](int s) { (void)best[i][s]->run(); });
    warm();
    const std::vector<float> t = time_medians(5 * o.sweep_reps, sets, launch);
    std::printf("confirmation of %s (%d alternated reps): planner %.1f TF/s", row.name.c_str(), 5 * o.sweep_reps,
                flops / t[0] * 1e-9);
    for (size_t i = 0; i < top; ++i) {
      std::printf("; %s %u g%d %.1f (%.3f)", all[i].order.along_n ? "N" : "M", all[i].order.run, all[i].order.group,
                  flops / t[i + 1] * 1e-9, t[0] / t[i + 1]);
      char js[200];
      std::snprintf(js, sizeof(js), "{\"confirm\": true, \"along\": \"%s\", \"run\": %u, \"group\": %d, \"ms\": %.4f, \"planner_ms\": %.4f}",
                    all[i].order.along_n ? "N" : "M", all[i].order.run, all[i].order.group, t[i + 1], t[0]);
      row.sweep.push_back(js);
    }
    std::printf("\n");
  }
  std::printf("claim orders of %s (planner: %s), fastest first (vs the planner's, alternated):\n", row.name.c_str(),
              planner[0]->raster().c_str());
  std::printf("  %-6s %4s %6s %10s %10s %9s %8s %s\n", "along", "run", "group", "est. us", "est. MB", "TF/s", "vs plan", "C==");
  for (const Entry& e : all) {
    std::printf("  %-6s %4u %6d %10.1f %10.1f %9.1f %8.3f %s\n", e.est.along_n ? "N" : "M", e.est.run, e.est.group,
                e.est.est_seconds * 1e6, e.est.est_hbm_bytes / 1e6, flops / e.ms * 1e-9, e.planner_ms / e.ms,
                e.equal ? "yes" : "NO");
    char js[256];
    std::snprintf(js, sizeof(js),
                  "{\"along\": \"%s\", \"run\": %u, \"group\": %d, \"est_us\": %.2f, \"est_mb\": %.2f, \"ms\": %.4f, "
                  "\"planner_ms\": %.4f, \"c_equal\": %s}",
                  e.est.along_n ? "N" : "M", e.est.run, e.est.group, e.est.est_seconds * 1e6, e.est.est_hbm_bytes / 1e6,
                  e.ms, e.planner_ms, e.equal ? "true" : "false");
    row.sweep.push_back(js);
  }
}

// --compare-orders: the listed claim orders (tails separate and, where admitted, merged) against the
// default plan, alternated in one timing. The default is timed twice (two launchers of the same plans):
// their ratio is the noise floor the others' gains must clear.
void compare_claim_orders(const Options& o, int sets, const std::vector<kosmos::GemmArguments>& args, size_t c_el,
                          double flops, Row& row) {
  auto plan = [&](const kosmos::GemmOptions& opt) { return plan_each_set(args, opt, "compare"); };
  struct Entry {
    std::string what;
    std::vector<std::unique_ptr<kosmos::Gemm>> plans;
    bool equal = true;
  };
  std::vector<Entry> all;
  all.push_back({"", plan({}), true});
  all[0].what = "default: " + all[0].plans[0]->raster();
  all.push_back({"default again", plan({}), true});
  if (o.compare_carry) {  // the executor reads KOSMOS_RING_CARRY when the plan is made
    const char* old = std::getenv("KOSMOS_RING_CARRY");
    const std::string keep = old ? old : "";
    ::setenv("KOSMOS_RING_CARRY", "0", 1);
    all.push_back({"default, ring carry off", plan({}), true});
    if (old) ::setenv("KOSMOS_RING_CARRY", keep.c_str(), 1);
    else ::unsetenv("KOSMOS_RING_CARRY");
  }
  for (const kosmos::GemmClaimOrder& co : o.compare)
    for (const auto mt : {kosmos::GemmMergeTails::kOff, kosmos::GemmMergeTails::kOn}) {
      kosmos::GemmOptions opt;
      opt.claim_order = co;
      opt.merge_tails = mt;
      Entry e{"", plan(opt), true};
      e.what = e.plans[0]->raster();
      if (mt == kosmos::GemmMergeTails::kOn && e.what.find("merged") == std::string::npos) continue;  // not admitted
      all.push_back(std::move(e));
    }
  auto run_once = [](kosmos::Gemm& g) { run_once_or_exit(g, "compare"); };
  Buf ref(c_el * 2);
  CK(cudaMemset(args[0].c, 0xFF, c_el * 2));
  run_once(*all[0].plans[0]);
  CK(cudaMemcpy(ref.p, args[0].c, c_el * 2, cudaMemcpyDeviceToDevice));
  for (size_t i = 1; i < all.size(); ++i) {
    CK(cudaMemset(args[0].c, 0xFF, c_el * 2));
    run_once(*all[i].plans[0]);
    all[i].equal = mismatches(args[0].c, ref.h(), c_el) == 0;
  }
  std::vector<std::function<void(int)>> launch;
  for (size_t i = 0; i < all.size(); ++i) launch.push_back([&, i](int s) { (void)all[i].plans[s]->run(); });
  for (int i = 0; i < 30; ++i) (void)all[0].plans[i % sets]->run();  // full clocks before the first pair
  CK(cudaDeviceSynchronize());
  const std::vector<float> t = time_medians(5 * o.reps, sets, launch);
  std::printf("claim orders of %s, %d alternated reps (vs the default plan):\n", row.name.c_str(), 5 * o.reps);
  for (size_t i = 0; i < all.size(); ++i) {
    std::printf("  %8.1f TF/s  %.3f  C==%s  %s\n", flops / t[i] * 1e-9, t[0] / t[i], all[i].equal ? "yes" : "NO",
                all[i].what.c_str());
    char js[400];
    std::snprintf(js, sizeof(js), "{\"compare\": true, \"plan\": \"%s\", \"ms\": %.4f, \"default_ms\": %.4f, \"c_equal\": %s}",
                  all[i].what.c_str(), t[i], t[0], all[i].equal ? "true" : "false");
    row.sweep.push_back(js);
  }
}

// `sets` operand sets of bf16 elements (A and B random, seeded set by set; C uninitialised).
void make_operand_sets(int sets, size_t a_el, size_t b_el, size_t c_el, uint64_t seed, std::vector<Buf*>& A,
                       std::vector<Buf*>& B, std::vector<Buf*>& C) {
  for (int s = 0; s < sets; ++s) {
    A.push_back(new Buf(a_el * 2));
    B.push_back(new Buf(b_el * 2));
    C.push_back(new Buf(c_el * 2));
    fill_random_bf16<<<1024, 256>>>(A[s]->h(), a_el, seed * s + 1, g_normal_data);
    fill_random_bf16<<<1024, 256>>>(B[s]->h(), b_el, seed * s + 2, g_normal_data);
  }
}

// One problem description per operand set (A [M, K], B [N, K] or [K, N], C [M, N]), for both the
// standalone engine and kosmos::Gemm.
std::vector<kosmos::GemmArguments> set_arguments(const std::vector<Buf*>& A, const std::vector<Buf*>& B,
                                                 const std::vector<Buf*>& C, int64_t M, int64_t N, int64_t K,
                                                 bool b_transposed) {
  std::vector<kosmos::GemmArguments> args(A.size());
  for (size_t s = 0; s < A.size(); ++s) {
    kosmos::GemmArguments& ga = args[s];
    ga.a = A[s]->p;
    ga.lda = K;
    ga.b = B[s]->p;
    ga.b_transposed = b_transposed;
    ga.ldb = b_transposed ? K : N;
    ga.c = C[s]->p;
    ga.ldc = N;
    ga.m = M;
    ga.n = N;
    ga.k = K;
  }
  return args;
}

// The standalone engine's parameters for each operand set (tile shape from --shape), or exit with
// the validation's message.
std::vector<GemmParams> set_params(const std::vector<kosmos::GemmArguments>& args, int sms, const std::string& shape) {
  std::vector<GemmParams> P(args.size());
  for (size_t s = 0; s < args.size(); ++s) {
    GemmDesc d = kosmos::ops::to_gemm_desc(args[s]);
    d.num_sms = sms;
    d.tile_shape = parse_shape(shape);
    const auto st = make_gemm_params(d, &P[s]);
    if (!st.is_ok()) {
      std::fprintf(stderr, "%s\n", st.to_string().c_str());
      std::exit(1);
    }
  }
  return P;
}

Row bench_dense(cublasHandle_t cub, const Options& o, int sms, int64_t M, int64_t N, int64_t K) {
  const size_t a_el = M * K, b_el = N * K, c_el = M * N;
  const int sets = num_sets_for((a_el + b_el + c_el) * 2);
  std::vector<Buf*> A, B, C;
  make_operand_sets(sets, a_el, b_el, c_el, 17, A, B, C);
  Buf Cref(c_el * 2);
  const std::vector<kosmos::GemmArguments> args = set_arguments(A, B, C, M, N, K, !o.nn);
  const std::vector<GemmParams> P = set_params(args, sms, o.shape);
  const int run = run_for(o, P[0], sms);
  CK(cudaMemset(C[0]->p, 0xFF, c_el * 2));
  CK(kosmos::kernels::gemm::testing::launch_gemm_engine(P[0], sms, run, o.raster));
  cublas_gemm(cub, o.nn, int(M), int(N), int(K), A[0]->p, B[0]->p, Cref.p);
  CK(cudaDeviceSynchronize());
  Row r;
  r.err = rel_diff(*C[0], Cref, c_el);
  std::vector<std::function<void(int)>> launchers = {
      [&](int s) { CK(kosmos::kernels::gemm::testing::launch_gemm_engine(P[s], sms, run, o.raster)); },
      [&](int s) { cublas_gemm(cub, o.nn, int(M), int(N), int(K), A[s]->p, B[s]->p, C[s]->p); }};
  const bool pair = o.pair_b && pair_b_applies(P[0], o.nn, run);
  if (pair) {
    r.pair_equal = pair_b_matches_plain(P[0], C[0]->p, c_el, sms, run, o.raster);
    launchers.push_back([&](int s) { launch_pair_b(P[s], sms, run, o.raster); });
  }
  const std::vector<float> t = time_medians(o.reps, sets, launchers);
  if (pair) r.pair_ms = t[2];
  r.ours_ms = t[0];
  r.ref_ms = t[1];
  r.ref2_ms = 0;
  r.ref_name = "cublasGemmEx";
  r.flops = 2.0 * M * N * K;
  r.shape = "128x" + std::to_string(gemm_block_n(P[0].tile_shape)) + " r" + std::to_string(run);
  char nm[96];
  std::snprintf(nm, sizeof(nm), "%lldx%lldx%lld", (long long)M, (long long)N, (long long)K);
  r.name = nm;
  if (o.sweep_reps > 0) sweep_claim_orders(o, sms, sets, args, P[0], c_el, r.flops, r);
  if (o.compare_carry) compare_claim_orders(o, sets, args, c_el, r.flops, r);
  for (int s = 0; s < sets; ++s) delete A[s], delete B[s], delete C[s];
  return r;
}

// Skewed per-expert rows: 32 local experts, ~24.6k routed rows (top-8 of 4096 tokens on 8 ranks'
// worth of traffic), Zipf-like weights, 3 experts empty. Deterministic.
// --uniform-groups: every expert 768 rows (24,576 in all, no partial row block): the grouped cost
// apart from the skew and the tails, against the dense 768 x 131072 x K problem of the same reuse.
int g_equal_groups = 0, g_equal_rows = 0;  // --uniform-groups / --equal-groups G,ROWS (0: skewed)

std::vector<int> expert_rows() {
  const int G = 32, total = 24588;
  if (g_equal_groups > 0) return std::vector<int>(g_equal_groups, g_equal_rows);
  std::mt19937 rng(1234);
  std::vector<double> w(G);
  for (int g = 0; g < G; ++g) w[g] = 1.0 / std::pow(g + 1.0, 0.7);
  std::shuffle(w.begin(), w.end(), rng);
  w[3] = w[17] = w[29] = 0;
  double sum = 0;
  for (double x : w) sum += x;
  std::vector<int> m(G);
  int acc = 0;
  for (int g = 0; g < G; ++g) acc += (m[g] = int(std::floor(w[g] / sum * total)));
  for (int g = 0; acc < total; g = (g + 1) % G)
    if (m[g] > 0) ++m[g], ++acc;
  return m;
}

// The grouped cases of main(): name, N, K (one list, used by the benchmark and by --dump-groups);
// --grouped-cases replaces it.
struct GroupedCase {
  std::string name;
  int64_t n, k;
};
std::vector<GroupedCase> g_grouped_cases = {{"moe gate+up", 4096, 7168}, {"moe down", 7168, 2048}};

// --grouped-cases N,K[:N,K...]: false on a malformed list (N, K positive multiples of 8).
bool parse_grouped_cases(const std::string& v) {
  std::vector<GroupedCase> cases;
  size_t at = 0;
  while (at <= v.size()) {
    const size_t end = std::min(v.find(':', at), v.size());
    long long n = 0, k = 0;
    char tail = 0;
    if (std::sscanf(v.substr(at, end - at).c_str(), "%lld,%lld%c", &n, &k, &tail) != 2 || n <= 0 || k <= 0 ||
        n % 8 || k % 8)
      return false;
    cases.push_back({"grouped N=" + std::to_string(n) + " K=" + std::to_string(k), n, k});
    at = end + 1;
  }
  g_grouped_cases = cases;
  return !cases.empty();
}

bool dump_groups(const std::string& path) {
  const std::vector<int> gm = expert_rows();
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    return false;
  }
  int total = 0, empty = 0;
  for (int m : gm) total += m, empty += m == 0;
  std::fprintf(f, "{\n  \"source\": \"benchmarks/gemm_engine_bench.cu expert_rows()\",\n");
  std::fprintf(f, "  \"description\": \"%s\",\n",
               g_equal_groups ? ("equal groups of " + std::to_string(g_equal_rows) + " rows").c_str()
                              : "skewed per-expert rows, some empty");
  std::fprintf(f, "  \"num_groups\": %zu,\n  \"total_rows\": %d,\n  \"empty_groups\": %d,\n  \"group_m\": [", gm.size(), total, empty);
  for (size_t g = 0; g < gm.size(); ++g) std::fprintf(f, "%s%d", g ? ", " : "", gm[g]);
  std::fprintf(f, "],\n  \"cases\": [\n");
  const size_t nc = g_grouped_cases.size();
  for (size_t i = 0; i < nc; ++i)
    std::fprintf(f, "    {\"name\": \"%s\", \"n\": %lld, \"k\": %lld}%s\n", g_grouped_cases[i].name.c_str(),
                 (long long)g_grouped_cases[i].n, (long long)g_grouped_cases[i].k, i + 1 < nc ? "," : "");
  std::fprintf(f, "  ]\n}\n");
  std::fclose(f);
  std::fprintf(stderr, "group sizes written to %s (%zu groups, %d rows, %d empty)\n", path.c_str(), gm.size(), total, empty);
  return true;
}

Row bench_grouped(cublasHandle_t cub, const Options& o, int sms, int64_t N, int64_t K, const char* name) {
  const std::vector<int> gm = expert_rows();
  const int G = int(gm.size());
  std::vector<int> goff(G);
  int total = 0;
  for (int g = 0; g < G; ++g) goff[g] = total, total += gm[g];
  const size_t a_el = size_t(total) * K, b_el = size_t(G) * N * K, c_el = size_t(total) * N;
  const int sets = num_sets_for((a_el + b_el + c_el) * 2);
  std::vector<Buf*> A, B, C;
  make_operand_sets(sets, a_el, b_el, c_el, 31, A, B, C);
  Buf dgm(G * 4), dgo(G * 4), Cref(c_el * 2);
  CK(cudaMemcpy(dgm.p, gm.data(), G * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dgo.p, goff.data(), G * 4, cudaMemcpyHostToDevice));
  // Experts' weights [G, N, K] (--layout nt, the default) or [G, K, N] (--layout nn).
  std::vector<kosmos::GemmArguments> args = set_arguments(A, B, C, total, N, K, !o.nn);
  for (int s = 0; s < sets; ++s) {
    kosmos::GemmArguments& ga = args[s];
    ga.num_groups = G;
    ga.group_m = static_cast<const int*>(dgm.p);
    ga.group_offset = static_cast<const int*>(dgo.p);
  }
  const std::vector<GemmParams> P = set_params(args, sms, o.shape);
  // cuBLAS grouped: one group per non-empty expert (row-major trick: C^T = op(B_g)^T * A^T, B_g
  // transposed for [N, K] storage).
  std::vector<cublasOperation_t> ta, tb;
  std::vector<int> mm, nn, kk, lda, ldb, ldc, gsize;
  std::vector<float> alpha, beta;
  std::vector<int> live;
  for (int g = 0; g < G; ++g)
    if (gm[g] > 0) live.push_back(g);
  const int L = int(live.size());
  for (int i = 0; i < L; ++i) {
    ta.push_back(o.nn ? CUBLAS_OP_N : CUBLAS_OP_T);
    tb.push_back(CUBLAS_OP_N);
    mm.push_back(int(N));
    nn.push_back(gm[live[i]]);
    kk.push_back(int(K));
    lda.push_back(o.nn ? int(N) : int(K));
    ldb.push_back(int(K));
    ldc.push_back(int(N));
    gsize.push_back(1);
    alpha.push_back(1.f);
    beta.push_back(0.f);
  }
  std::vector<Buf*> ptrs;  // per set: device arrays of A, B, C pointers
  for (int s = 0; s < sets; ++s) {
    std::vector<const void*> pa, pb;
    std::vector<void*> pc;
    for (int g : live) {
      pa.push_back(B[s]->h() + size_t(g) * N * K);
      pb.push_back(A[s]->h() + size_t(goff[g]) * K);
      pc.push_back((s == 0 ? Cref.h() : C[s]->h()) + size_t(goff[g]) * N);
    }
    Buf* b = new Buf(3 * L * sizeof(void*));
    CK(cudaMemcpy(b->p, pa.data(), L * sizeof(void*), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(static_cast<char*>(b->p) + L * sizeof(void*), pb.data(), L * sizeof(void*), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(static_cast<char*>(b->p) + 2 * L * sizeof(void*), pc.data(), L * sizeof(void*),
                  cudaMemcpyHostToDevice));
    ptrs.push_back(b);
  }
  auto cublas_grouped = [&](int s) {
    void** base = static_cast<void**>(ptrs[s]->p);
    CB(cublasGemmGroupedBatchedEx(cub, ta.data(), tb.data(), mm.data(), nn.data(), kk.data(), alpha.data(),
                                  reinterpret_cast<const void* const*>(base), CUDA_R_16BF, lda.data(),
                                  reinterpret_cast<const void* const*>(base + L), CUDA_R_16BF, ldb.data(),
                                  beta.data(), base + 2 * L, CUDA_R_16BF, ldc.data(), L, gsize.data(),
                                  CUBLAS_COMPUTE_32F));
  };
  const int run = run_for(o, P[0], sms);
  CK(cudaMemset(C[0]->p, 0xFF, c_el * 2));
  CK(kosmos::kernels::gemm::testing::launch_gemm_engine(P[0], sms, run, o.raster));
  cublas_grouped(0);
  CK(cudaDeviceSynchronize());
  Row r;
  r.err = rel_diff(*C[0], Cref, c_el);
  // The product path: kosmos::Gemm (the persistent runtime, the claim order of ops::plan_gemm_runs),
  // one plan per operand set, verified against cuBLAS grouped like the engine above.
  // Tails in tiles of their own (GemmMergeTails::kOff), and merged (kOn) below; the default (kAuto)
  // picks one of the two by K.
  kosmos::GemmOptions separate;
  separate.merge_tails = kosmos::GemmMergeTails::kOff;
  separate.claim_order = o.claim;
  const std::vector<std::unique_ptr<kosmos::Gemm>> plans = plan_each_set(args, separate, "grouped");
  CK(cudaMemset(C[0]->p, 0xFF, c_el * 2));
  CK(cudaDeviceSynchronize());
  run_once_or_exit(*plans[0], "grouped");
  r.err = std::max(r.err, rel_diff(*C[0], Cref, c_el));
  r.rt_raster = plans[0]->raster();
  // The same with merged tails (GemmOptions::merge_tails; B [K, N] only, the op kernel's merging
  // variant): its C must equal the separate tiles' bit for bit.
  kosmos::GemmOptions merge;
  merge.merge_tails = kosmos::GemmMergeTails::kOn;
  merge.claim_order = o.claim;
  const std::vector<std::unique_ptr<kosmos::Gemm>> merged = plan_each_set(args, merge, "grouped, tails merged");
  r.rt_merged_raster = merged[0]->raster();
  // What the default options plan (one set is enough).
  r.rt_default_merges = plan_each_set({args[0]}, {}, "grouped, default")[0]->raster().find("merged") != std::string::npos;
  {
    Buf plain_c(c_el * 2);
    CK(cudaMemcpy(plain_c.p, C[0]->p, c_el * 2, cudaMemcpyDeviceToDevice));
    CK(cudaMemset(C[0]->p, 0xFF, c_el * 2));
    run_once_or_exit(*merged[0], "grouped, tails merged");
    r.rt_merged_equal = mismatches(C[0]->p, plain_c.h(), c_el) == 0;
  }
  // Our own dense GEMM of the same total M (every row times expert 0's weights): what grouping costs
  // the engine (padding of each group's last block, per-group B blocks), apart from the engine itself.
  std::vector<kosmos::GemmArguments> dense_args = args;
  for (kosmos::GemmArguments& d : dense_args) {
    d.num_groups = 0;
    d.group_m = d.group_offset = nullptr;
  }
  const std::vector<std::unique_ptr<kosmos::Gemm>> dense = plan_each_set(dense_args, {}, "dense");
  // All five alternate repetition by repetition (time_medians).
  std::vector<std::function<void(int)>> launchers = {
      [&](int s) { CK(kosmos::kernels::gemm::testing::launch_gemm_engine(P[s], sms, run, o.raster)); }, cublas_grouped,
      [&](int s) { cublas_gemm(cub, o.nn, total, int(N), int(K), A[s]->p, B[s]->p, C[s]->p); },
      [&](int s) { (void)plans[s]->run(); }, [&](int s) { (void)dense[s]->run(); },
      [&](int s) { (void)merged[s]->run(); }};
  // --pair-b with equal groups: the standalone engine in 2-CTA clusters sharing each B k block,
  // against the plain standalone engine (same static order) -- is the grouped tile bound by the L2's
  // throughput, which the multicast relieves by a third?
  const bool pair = o.pair_b && pair_b_applies(P[0], o.nn, run, gm);
  if (pair) {
    r.pair_equal = pair_b_matches_plain(P[0], C[0]->p, c_el, sms, run, o.raster);
    launchers.push_back([&](int s) { launch_pair_b(P[s], sms, run, o.raster); });
  } else if (o.pair_b) {
    std::fprintf(stderr,
                 "[gemm_engine_bench] --pair-b: %s skipped (needs --layout nt, 128x256 tiles and equal groups of whole "
                 "run pairs: --uniform-groups, --equal-groups)\n",
                 name);
  }
  const std::vector<float> t = time_medians(o.reps, sets, launchers);
  if (pair) r.pair_ms = t[6];
  r.ours_ms = t[0];
  r.ref_ms = t[1];
  r.ref2_ms = t[2];
  r.rt_ms = t[3];
  r.rt_dense_ms = t[4];
  r.rt_merged_ms = t[5];
  r.rt_dense_raster = dense[0]->raster();
  r.ref_name = "cublasGemmGroupedBatchedEx";
  r.ref2_name = "dense cublasGemmEx, same total M";
  r.flops = 2.0 * total * N * K;
  r.shape = "128x" + std::to_string(gemm_block_n(P[0].tile_shape)) + " r" + std::to_string(run);
  char nm[128];
  std::snprintf(nm, sizeof(nm), "%s G=%d rows=%d N=%lld K=%lld", name, G, total, (long long)N, (long long)K);
  r.name = nm;
  if (o.sweep_reps > 0) sweep_claim_orders(o, sms, sets, args, P[0], c_el, r.flops, r);
  if (!o.compare.empty() || o.compare_carry) compare_claim_orders(o, sets, args, c_el, r.flops, r);
  for (int s = 0; s < sets; ++s) delete A[s], delete B[s], delete C[s], delete ptrs[s];
  return r;
}

}  // namespace

constexpr const char* kUsage =
    "gemm_engine_bench: the GEMM engine (standalone kernel and kosmos::Gemm) against cuBLAS on the same\n"
    "inputs, dense shapes and grouped expert GEMMs (also against cublasGemmGroupedBatchedEx and one dense\n"
    "cuBLAS GEMM of the same rows). Needs a GPU (except --dump-groups PATH --dump-only).\n"
    "  gemm_engine_bench [--json PATH] [--reps N] [--run R|auto] [--raster G] [--shape auto|256|128|64]\n"
    "                    [--layout nt|nn] [--dense-only|--grouped-only] [--shapes MxNxK[,MxNxK...]]\n"
    "                    [--dump-groups PATH [--dump-only]] [--pair-b] [--raster-sweep R] [--uniform-groups]\n"
    "                    [--equal-groups G,ROWS] [--grouped-cases N,K[:N,K...]]\n"
    "                    [--claim-order M|N,RUN,GROUP] [--compare-orders M|N,RUN,GROUP[:...]] [--compare-carry]\n"
    "                    [--data uniform|normal]\n";

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (a == "--json") o.json = next();
    else if (a == "--reps") o.reps = std::atoi(next().c_str());
    else if (a == "--run") {
      const std::string v = next();
      o.run = v == "auto" ? 0 : std::atoi(v.c_str());
    }
    else if (a == "--raster") o.raster = std::atoi(next().c_str());
    else if (a == "--shape") o.shape = next();
    else if (a == "--layout") o.nn = next() == "nn";
    else if (a == "--dense-only") o.grouped = false;
    else if (a == "--grouped-only") o.dense = false;
    else if (a == "--dump-groups") o.dump_groups = next();
    else if (a == "--dump-only") o.dump_only = true;
    else if (a == "--pair-b") o.pair_b = true;
    else if (a == "--uniform-groups") g_equal_groups = 32, g_equal_rows = 768;
    else if (a == "--equal-groups") {  // G,ROWS
      const std::string v = next();
      char tail = 0;
      if (std::sscanf(v.c_str(), "%d,%d%c", &g_equal_groups, &g_equal_rows, &tail) != 2 || g_equal_groups <= 0 ||
          g_equal_groups > 1024 || g_equal_rows <= 0) {
        std::fprintf(stderr, "--equal-groups: expected G,ROWS (1 <= G <= 1024, ROWS >= 1), got '%s'\n", v.c_str());
        return 2;
      }
    }
    else if (a == "--grouped-cases") {  // N,K[:N,K...]
      const std::string v = next();
      if (!parse_grouped_cases(v)) {
        std::fprintf(stderr, "--grouped-cases: expected N,K[:N,K...] (positive multiples of 8), got '%s'\n", v.c_str());
        return 2;
      }
    }
    else if (a == "--data") {
      const std::string v = next();
      if (v != "uniform" && v != "normal") {
        std::fprintf(stderr, "--data: expected uniform or normal, got '%s'\n", v.c_str());
        return 2;
      }
      g_normal_data = v == "normal";
    }
    else if (a == "--claim-order") {  // M|N,RUN,GROUP
      const std::string v = next();
      char dir = 0;
      unsigned run = 0;
      int group = 0;
      if (std::sscanf(v.c_str(), "%c,%u,%d", &dir, &run, &group) != 3 || (dir != 'M' && dir != 'N') || run < 1 || run > 16 ||
          group < 1) {
        std::fprintf(stderr, "--claim-order: expected M|N,RUN,GROUP (RUN 1..16, GROUP >= 1), got '%s'\n", v.c_str());
        return 2;
      }
      o.claim = kosmos::GemmClaimOrder{run, dir == 'N', group};
    }
    else if (a == "--compare-carry") o.compare_carry = true;
    else if (a == "--compare-orders") {  // M|N,RUN,GROUP[:...]
      const std::string v = next();
      size_t at = 0;
      while (at <= v.size()) {
        const size_t end = std::min(v.find(':', at), v.size());
        const std::string one = v.substr(at, end - at);
        char dir = 0;
        unsigned run = 0;
        int group = 0;
        if (std::sscanf(one.c_str(), "%c,%u,%d", &dir, &run, &group) != 3 || (dir != 'M' && dir != 'N') || run < 1 ||
            run > 16 || group < 1) {
          std::fprintf(stderr, "--compare-orders: expected M|N,RUN,GROUP[:...] (RUN 1..16, GROUP >= 1), got '%s'\n", one.c_str());
          return 2;
        }
        o.compare.push_back(kosmos::GemmClaimOrder{run, dir == 'N', group});
        at = end + 1;
      }
    }
    else if (a == "--raster-sweep") o.sweep_reps = std::max(1, std::atoi(next().c_str()));
    else if (a == "--shapes") {
      std::string bad;
      if (!kosmos::kernels::gemm::parse_gemm_shapes(next(), &o.shapes, &bad)) {
        std::fprintf(stderr, "--shapes: expected MxNxK[,MxNxK...], got '%s'\n", bad.c_str());
        return 2;
      }
    }
    else {
      std::fprintf(stderr, "unknown argument %s\n%s", a.c_str(), kUsage);
      return 2;
    }
  }
  if (!o.dump_groups.empty() && !dump_groups(o.dump_groups)) return 1;
  if (o.dump_only) return 0;
  int dev = 0;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  int driver = 0;
  CK(cudaDriverGetVersion(&driver));
  const int sms = prop.multiProcessorCount;
  cublasHandle_t cub;
  CB(cublasCreate(&cub));
  Buf ws(64ull << 20);
  CB(cublasSetWorkspace(cub, ws.p, ws.bytes));
  std::printf("GPU %s, %d SMs, driver %d; run=%d raster=%d shape=%s layout=%s reps=%d data=%s\n", prop.name, sms, driver,
              o.run, o.raster, o.shape.c_str(), o.nn ? "NN (B [K,N])" : "NT (B [N,K])", o.reps,
              g_normal_data ? "normal" : "uniform");
  std::vector<Row> rows;
  if (o.dense) {
    if (o.shapes.empty()) o.shapes.assign(kosmos::kernels::gemm::kIssueGemmShapes.begin(), kosmos::kernels::gemm::kIssueGemmShapes.end());
    for (auto& s : o.shapes) rows.push_back(bench_dense(cub, o, sms, s[0], s[1], s[2]));
  }
  if (o.grouped) {
    for (const GroupedCase& c : g_grouped_cases) rows.push_back(bench_grouped(cub, o, sms, c.n, c.k, c.name.c_str()));
  }
  std::printf("%-40s %-12s %9s %9s %7s %9s %7s %9s\n", "shape (MxNxK)", "tile", "ours TF/s", "ref TF/s", "ratio",
              "ref2 TF/s", "ratio2", "rel.err");
  double log_sum = 0;
  int n_dense = 0;
  double min_ratio = 1e9;
  for (const auto& r : rows) {
    const double ours = r.flops / r.ours_ms * 1e-9, ref = r.flops / r.ref_ms * 1e-9;
    const double ref2 = r.ref2_ms > 0 ? r.flops / r.ref2_ms * 1e-9 : 0;
    std::printf("%-40s %-12s %9.1f %9.1f %7.3f %9.1f %7.3f %9.2e\n", r.name.c_str(), r.shape.c_str(), ours, ref,
                ours / ref, ref2, ref2 > 0 ? ours / ref2 : 0.0, r.err);
    if (r.rt_ms > 0) {
      const double rt = r.flops / r.rt_ms * 1e-9;
      std::printf("%-40s %-12s %9.1f %9.1f %7.3f %9.1f %7.3f   (%s)\n", "  as kosmos::Gemm, separate tiles", "", rt, ref, rt / ref, ref2,
                  ref2 > 0 ? rt / ref2 : 0.0, r.rt_raster.c_str());
    }
    if (r.rt_merged_ms > 0) {
      const double rm = r.flops / r.rt_merged_ms * 1e-9;
      std::printf("%-40s %-12s %9.1f %9.1f %7.3f %9.1f %7.3f   (merged / separate: %.3f; C bit for bit equal: %s; %s)\n",
                  "  kosmos::Gemm, merge_tails on", "", rm, ref, rm / ref, ref2, ref2 > 0 ? rm / ref2 : 0.0,
                  r.rt_ms / r.rt_merged_ms, r.rt_merged_equal ? "yes" : "NO", r.rt_merged_raster.c_str());
      std::printf("  kosmos::Gemm's default (merge_tails auto) plans %s\n", r.rt_default_merges ? "the merged tails" : "separate tiles");
    }
    if (r.rt_dense_ms > 0) {
      const double rd = r.flops / r.rt_dense_ms * 1e-9;
      std::printf("%-40s %-12s %9.1f %9s %7s %9.1f %7.3f   (%s)\n", "  kosmos::Gemm dense, same total M", "", rd, "", "", ref2,
                  ref2 > 0 ? rd / ref2 : 0.0, r.rt_dense_raster.c_str());
    }
    if (r.pair_ms > 0) {
      const double pr = r.flops / r.pair_ms * 1e-9;
      std::printf("%-40s %-12s %9.1f %9.1f %7.3f   (vs the plain engine %.3f; C bit for bit equal: %s)\n",
                  "  engine, 2-CTA clusters sharing B", "", pr, ref, pr / ref, pr / ours, r.pair_equal ? "yes" : "NO");
    }
    if (r.ref2_ms == 0) {
      log_sum += std::log(ours / ref);
      ++n_dense;
      min_ratio = std::min(min_ratio, ours / ref);
    }
  }
  if (n_dense) std::printf("dense geomean ratio %.3f, min %.3f\n", std::exp(log_sum / n_dense), min_ratio);
  if (!o.json.empty()) {
    FILE* f = std::fopen(o.json.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "cannot write %s\n", o.json.c_str());
      return 1;
    }
    // Commit: KOSMOS_COMMIT (the GPU machine's copy of the tree has no .git), as kosmos's benches.
    std::string command;
    for (int i = 0; i < argc; ++i) {
      if (i) command += ' ';
      command += argv[i];
    }
    const char* commit = std::getenv("KOSMOS_COMMIT");
    std::fprintf(f, "{\n  \"gpu\": \"%s\",\n  \"sms\": %d,\n  \"driver\": %d,\n  \"commit\": \"%s\",\n  \"command\": \"%s\",\n"
                 "  \"layout\": \"%s\",\n  \"run\": %d,\n  \"raster\": %d,\n  \"data\": \"%s\",\n  \"results\": [\n",
                 prop.name, sms, driver, commit && *commit ? commit : "unknown", command.c_str(), o.nn ? "NN" : "NT", o.run, o.raster,
                 g_normal_data ? "normal" : "uniform");
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      const double ours = r.flops / r.ours_ms * 1e-9, ref = r.flops / r.ref_ms * 1e-9;
      std::fprintf(f,
                   "    {\"shape\": \"%s\", \"tile\": \"%s\", \"ours_tflops\": %.2f, \"ours_ms\": %.4f, \"baseline\": \"%s\", "
                   "\"baseline_tflops\": %.2f, \"ratio\": %.4f",
                   r.name.c_str(), r.shape.c_str(), ours, r.ours_ms, r.ref_name.c_str(), ref, ours / ref);
      if (r.ref2_ms > 0) {
        const double ref2 = r.flops / r.ref2_ms * 1e-9;
        std::fprintf(f, ", \"baseline2\": \"%s\", \"baseline2_tflops\": %.2f, \"ratio2\": %.4f", r.ref2_name.c_str(),
                     ref2, ours / ref2);
      }
      if (r.rt_ms > 0)
        std::fprintf(f, ", \"runtime_tflops\": %.2f, \"runtime_ms\": %.4f, \"runtime_raster\": \"%s\"", r.flops / r.rt_ms * 1e-9,
                     r.rt_ms, r.rt_raster.c_str());
      if (r.rt_merged_ms > 0)
        std::fprintf(f, ", \"runtime_merged_tflops\": %.2f, \"runtime_merged_ms\": %.4f, \"runtime_merged_bitwise_equal\": %s, \"runtime_merged_raster\": \"%s\", \"runtime_default_merges\": %s",
                     r.flops / r.rt_merged_ms * 1e-9, r.rt_merged_ms, r.rt_merged_equal ? "true" : "false", r.rt_merged_raster.c_str(),
                     r.rt_default_merges ? "true" : "false");
      if (r.rt_dense_ms > 0)
        std::fprintf(f, ", \"runtime_dense_tflops\": %.2f, \"runtime_dense_raster\": \"%s\"", r.flops / r.rt_dense_ms * 1e-9,
                     r.rt_dense_raster.c_str());
      if (r.pair_ms > 0)
        std::fprintf(f, ", \"pair_b_tflops\": %.2f, \"pair_b_ms\": %.4f, \"pair_b_bitwise_equal\": %s", r.flops / r.pair_ms * 1e-9,
                     r.pair_ms, r.pair_equal ? "true" : "false");
      if (!r.sweep.empty()) {
        std::fprintf(f, ", \"claim_order_sweep\": [");
        for (size_t j = 0; j < r.sweep.size(); ++j) std::fprintf(f, "%s\n      %s", j ? "," : "", r.sweep[j].c_str());
        std::fprintf(f, "]");
      }
      std::fprintf(f, ", \"rel_err_vs_baseline\": %.3e}%s\n", r.err, i + 1 < rows.size() ? "," : "");
    }
    std::fprintf(f, "  ]\n}\n");
    std::fclose(f);
  }
  cublasDestroy(cub);
  return 0;
}
