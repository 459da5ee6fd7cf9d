// kosmos bench gemm: the runtime's GEMM tiles against cuBLAS on the same inputs, same process.
//
// For each shape: fresh random bf16 inputs (several sets, rotated so L2 never holds the operands),
// outputs poisoned before the checked run, our result compared with cuBLAS's (relative error) and
// sampled entries with an fp64 host reference. Timing: CUDA events around each launch, warm-up,
// median of --reps. Prints a table; --json writes bench/results-style JSON.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <random>

#include "bench_timing.h"
#include "common.h"
#include "kernels/gemm/bf16.h"
#include "kernels/gemm/gemm_shapes.h"
#include "kosmos/cuda_check.h"
#include "kosmos/gemm.h"
#include "kosmos/runtime.h"

namespace kosmos::cli {

namespace {
using kernels::gemm::bf16_to_float;
using kernels::gemm::float_to_bf16;

struct DevBuf {
  void* p = nullptr;
  ~DevBuf() { if (p) cudaFree(p); }
};

Status fill_random(void* dev, size_t elems, uint64_t seed, float scale) {
  std::vector<uint16_t> h(elems);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  for (auto& v : h) v = float_to_bf16(u(rng));
  KOSMOS_CUDA_CHECK(cudaMemcpy(dev, h.data(), elems * 2, cudaMemcpyHostToDevice));
  return Status::ok();
}

struct ShapeResult {
  int64_t m, n, k;
  double ours_ms, cublas_ms, ours_tflops, cublas_tflops, rel_err_vs_cublas, rel_err_vs_fp64;
  int tile_n;
  uint32_t run;
  size_t tasks;
  std::string raster;
};

// nt: B stored [N, K] (b_transposed, the weight layout of nn.Linear); otherwise B is [K, N].
Status bench_shape(int64_t m, int64_t n, int64_t k, bool nt, int reps, cublasHandle_t handle, ShapeResult* r) {
  const size_t a_el = size_t(m) * k, b_el = size_t(k) * n, c_el = size_t(m) * n;
  const size_t set_bytes = (a_el + b_el) * 2;
  const int sets = int(std::clamp<size_t>((size_t(240) << 20) / std::max<size_t>(set_bytes, 1) + 1, 2, 8));
  std::vector<DevBuf> A(sets), B(sets);
  DevBuf C, Cref;
  for (int s = 0; s < sets; ++s) {
    KOSMOS_CUDA_CHECK(cudaMalloc(&A[s].p, a_el * 2));
    KOSMOS_CUDA_CHECK(cudaMalloc(&B[s].p, b_el * 2));
    KOSMOS_RETURN_IF_ERROR(fill_random(A[s].p, a_el, 1000 + s, 1.0f));
    KOSMOS_RETURN_IF_ERROR(fill_random(B[s].p, b_el, 2000 + s, 1.0f));
  }
  KOSMOS_CUDA_CHECK(cudaMalloc(&C.p, c_el * 2));
  KOSMOS_CUDA_CHECK(cudaMalloc(&Cref.p, c_el * 2));
  std::vector<std::unique_ptr<Gemm>> plans(sets);
  for (int s = 0; s < sets; ++s) {
    GemmArguments g;
    g.a = A[s].p;
    g.lda = k;
    g.b = B[s].p;
    g.ldb = nt ? k : n;
    g.b_transposed = nt;
    g.c = C.p;
    g.ldc = n;
    g.m = m;
    g.n = n;
    g.k = k;
    KOSMOS_RETURN_IF_ERROR(Gemm::plan(g, GemmOptions{}, &plans[s]));
  }
  r->tile_n = plans[0]->tile_n();
  r->run = plans[0]->run_length();
  r->tasks = plans[0]->num_tasks();
  r->raster = plans[0]->raster();
  cudaStream_t st;
  KOSMOS_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cublasSetStream(handle, st);
  const float alpha = 1.0f, beta = 0.0f;
  auto cublas = [&](int s, void* c) {
    // row-major C = A B  <=>  column-major C^T = B^T A^T
    return cublasGemmEx(handle, nt ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, int(n), int(m), int(k), &alpha, B[s].p,
                        CUDA_R_16BF, int(nt ? k : n),
                        A[s].p, CUDA_R_16BF, int(k), &beta, c, CUDA_R_16BF, int(n), CUBLAS_COMPUTE_32F,
                        CUBLAS_GEMM_DEFAULT);
  };
  // Correctness on set 0: poison, run both, compare.
  KOSMOS_CUDA_CHECK(cudaMemsetAsync(C.p, 0xFF, c_el * 2, st));  // 0xFFFF = NaN
  KOSMOS_RETURN_IF_ERROR(plans[0]->run(st));
  KOSMOS_RETURN_IF_ERROR(plans[0]->finish(st));
  KOSMOS_CHECK_CODE(cublas(0, Cref.p) == CUBLAS_STATUS_SUCCESS, StatusCode::kInternal, "cublasGemmEx failed");
  KOSMOS_CUDA_CHECK(cudaStreamSynchronize(st));
  std::vector<uint16_t> hc(c_el), hr(c_el);
  KOSMOS_CUDA_CHECK(cudaMemcpy(hc.data(), C.p, c_el * 2, cudaMemcpyDeviceToHost));
  KOSMOS_CUDA_CHECK(cudaMemcpy(hr.data(), Cref.p, c_el * 2, cudaMemcpyDeviceToHost));
  double num = 0, den = 0;
  for (size_t i = 0; i < c_el; ++i) {
    const double x = bf16_to_float(hc[i]), y = bf16_to_float(hr[i]);
    KOSMOS_CHECK_CODE(std::isfinite(x), StatusCode::kInternal, "bench gemm ", m, "x", n, "x", k, ": output ", i,
                      " is not finite (unwritten or NaN)");
    num += (x - y) * (x - y);
    den += y * y;
  }
  r->rel_err_vs_cublas = std::sqrt(num / std::max(den, 1e-30));
  {  // sampled fp64 reference
    std::vector<uint16_t> ha(a_el), hb(b_el);
    KOSMOS_CUDA_CHECK(cudaMemcpy(ha.data(), A[0].p, a_el * 2, cudaMemcpyDeviceToHost));
    KOSMOS_CUDA_CHECK(cudaMemcpy(hb.data(), B[0].p, b_el * 2, cudaMemcpyDeviceToHost));
    std::mt19937_64 rng(7);
    double n2 = 0, d2 = 0;
    for (int s = 0; s < 512; ++s) {
      const int64_t i = int64_t(rng() % m), j = int64_t(rng() % n);
      double ref = 0;
      for (int64_t kk = 0; kk < k; ++kk) ref += double(bf16_to_float(ha[i * k + kk])) * bf16_to_float(hb[nt ? j * k + kk : kk * n + j]);
      const double x = bf16_to_float(hc[i * n + j]);
      n2 += (x - ref) * (x - ref);
      d2 += ref * ref;
    }
    r->rel_err_vs_fp64 = std::sqrt(n2 / std::max(d2, 1e-30));
  }
  KOSMOS_CHECK_CODE(r->rel_err_vs_fp64 < 1e-2 && r->rel_err_vs_cublas < 1e-2, StatusCode::kInternal, "bench gemm ", m, "x",
                    n, "x", k, ": relative error vs fp64 ", r->rel_err_vs_fp64, ", vs cuBLAS ", r->rel_err_vs_cublas);

  // Ours and cuBLAS alternate repetition by repetition (bench_timing.h says why).
  std::vector<double> med;
  KOSMOS_RETURN_IF_ERROR(time_median_interleaved_ms(
      st, reps,
      {[&](int i) { return plans[i % sets]->run(st); },
       [&](int i) {
         return cublas(i % sets, Cref.p) == CUBLAS_STATUS_SUCCESS ? Status::ok()
                                                                   : Status(StatusCode::kInternal, "cublasGemmEx failed");
       }},
      &med));
  KOSMOS_RETURN_IF_ERROR(plans[0]->finish(st));
  r->ours_ms = med[0];
  r->cublas_ms = med[1];
  const double flop = 2.0 * m * n * k;
  r->m = m;
  r->n = n;
  r->k = k;
  r->ours_tflops = flop / (r->ours_ms * 1e-3) / 1e12;
  r->cublas_tflops = flop / (r->cublas_ms * 1e-3) / 1e12;
  cudaStreamDestroy(st);
  return Status::ok();
}
}  // namespace

void add_bench_gemm(CLI::App& bench) {
  auto* cmd = bench.add_subcommand("gemm", "GEMM tiles on the runtime vs cuBLAS (bf16, fp32 accumulate)");
  struct Opts {
    std::string json, shapes, layout = "nn";
    int reps = 30;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--json", o->json, "Write results as JSON here");
  cmd->add_option("--reps", o->reps, "Timed repetitions (median)")->check(CLI::Range(5, 10000));
  cmd->add_option("--layout", o->layout, "nn: B is [K, N]; nt: B is [N, K] (weights as nn.Linear stores them)")
      ->check(CLI::IsMember({"nn", "nt"}));
  cmd->add_option("--shapes", o->shapes, "Comma-separated MxNxK list (default: the issue's eight shapes)");
  cmd->callback([o] {
    if (!gpu_available()) throw Error(Status(StatusCode::kUnavailable, "bench gemm needs a Hopper GPU (none visible)"));
    using kernels::gemm::kIssueGemmShapes;
    std::vector<kernels::gemm::GemmShape> shapes(kIssueGemmShapes.begin(), kIssueGemmShapes.end());
    std::string bad;
    if (!o->shapes.empty() && !kernels::gemm::parse_gemm_shapes(o->shapes, &shapes, &bad))
      throw Error(Status(StatusCode::kInvalidArgument, "--shapes: '" + bad + "' is not MxNxK"));
    cublasHandle_t handle;
    if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) throw Error(Status(StatusCode::kInternal, "cublasCreate failed"));
    nlohmann::json j = run_metadata(command_line());
    j["bench"] = "gemm";
    j["layout"] = o->layout;
    j["rows"] = nlohmann::json::array();
    std::printf("layout %s\n", o->layout.c_str());
    std::printf("%-20s %6s %4s %6s %10s %10s %10s %10s %8s %10s\n", "MxNxK", "tileN", "run", "tasks", "ours ms",
                "cuBLAS ms", "ours TF/s", "cuBLAS TF", "ratio", "rel.err");
    double log_sum = 0;
    double worst = 1e9;
    for (auto [m, n, k] : shapes) {
      std::fprintf(stderr, "[bench gemm] %ldx%ldx%ld ...\n", m, n, k);
      ShapeResult r{};
      throw_if_error(bench_shape(m, n, k, o->layout == "nt", o->reps, handle, &r));
      const double ratio = r.ours_tflops / r.cublas_tflops;
      log_sum += std::log(ratio);
      worst = std::min(worst, ratio);
      std::printf("%-20s %6d %4u %6zu %10.4f %10.4f %10.1f %10.1f %8.3f %10.2e\n",
                  (std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k)).c_str(), r.tile_n, r.run, r.tasks,
                  r.ours_ms, r.cublas_ms, r.ours_tflops, r.cublas_tflops, ratio, r.rel_err_vs_fp64);
      j["rows"].push_back({{"m", m}, {"n", n}, {"k", k}, {"tile_n", r.tile_n}, {"run_length", r.run}, {"tasks", r.tasks},
                           {"ours_ms", r.ours_ms}, {"cublas_ms", r.cublas_ms}, {"ours_tflops", r.ours_tflops},
                           {"cublas_tflops", r.cublas_tflops}, {"ratio", ratio}, {"rel_err_vs_fp64", r.rel_err_vs_fp64},
                           {"rel_err_vs_cublas", r.rel_err_vs_cublas}, {"raster", r.raster}});
      std::printf("%20s claim order: %s\n", "", r.raster.c_str());
    }
    const double geo = std::exp(log_sum / shapes.size());
    std::printf("geometric mean ratio to cuBLAS: %.3f (goal >= 0.95), worst %.3f (goal >= 0.85)\n", geo, worst);
    j["geomean_ratio"] = geo;
    j["worst_ratio"] = worst;
    cublasDestroy(handle);
    if (!o->json.empty()) throw_if_error(write_json(o->json, j));
  });
}

}  // namespace kosmos::cli
