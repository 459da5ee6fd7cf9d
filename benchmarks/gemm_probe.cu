// Diagnostic: where the time of one GEMM tile goes. Runs the engine's standalone kernel (built with
// KOSMOS_GEMM_PROBE, so gemm_tile records SM-clock marks per tile) on one M x N x K problem and
// prints, over all tiles, the consumer's wait for its first k-block, its mainloop, its epilogue and
// the gap to the next tile, next to the kernel's event-timed TFLOP/s.
// cuBLAS (cublasGemmEx) runs on the same buffers for a same-conditions ratio; --data random fills
// uniform [-1, 1) bf16 (the tensor cores draw more power on it than on small integers, so clocks differ).
// --sets S rotates S operand sets (S > 1: inputs not in L2, as `kosmos bench gemm` does); the
// product path (kosmos::Gemm, the persistent runtime) is timed on the same sets.
//   gemm_probe M N K [--layout nn|nt] [--shape auto|256|128|64] [--run R] [--data ints|random] [--sets S]
//              [--stream default|nonblocking]
#define KOSMOS_GEMM_PROBE 1
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_util.cuh"
#include "gemm_engine_test_kernel.cuh"
#include "kosmos/gemm.h"
#include "ops/gemm_args.h"
#include "kernels/gemm/gemm_host.h"
#include "ops/op_runner.h"

using namespace kosmos::kernels::gemm;

namespace {

__global__ void fill_small_ints(uint16_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const int v = int((i * 2654435761u + seed) >> 13) % 5 - 2;  // bf16 of -2..2: exact
    const float f = float(v);
    p[i] = uint16_t(__float_as_uint(f) >> 16);
  }
}


template <class F>
double median_ms(F&& launch, cudaStream_t stream = nullptr) {  // launch(i): i counts launches (rotating sets)
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int i = 0; i < 5; ++i) launch(i);
  std::vector<float> ms;
  for (int i = 0; i < 20; ++i) {
    CK(cudaEventRecord(e0, stream));
    launch(i);
    CK(cudaEventRecord(e1, stream));
    CK(cudaEventSynchronize(e1));
    float t;
    CK(cudaEventElapsedTime(&t, e0, e1));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

struct Stat {
  std::vector<double> v;
  void add(double x) { v.push_back(x); }
  double median() {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  }
  double mean() const {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? 0 : s / v.size();
  }
};

using Marks = long long[probe::kMaxCtas][probe::kMaxTiles][probe::kMarks];

using KernelNs = long long[probe::kMaxCtas][2];

void print_phases(const char* what, const Marks& marks, const int (&seq)[probe::kMaxCtas][2], const KernelNs& kns,
                  double event_ms, int sms, int kb, int clock_khz) {
  const double us_per_cycle = 1e3 / clock_khz;  // at the reported (max) SM clock
  Stat fill_first, fill, main_loop, epi, gap, lead;
  int tiles = 0;
  for (int cta = 0; cta < std::min(sms, probe::kMaxCtas); ++cta) {
    const int n = std::min(seq[cta][0], probe::kMaxTiles);
    for (int s = 0; s < n; ++s) {
      const long long* m = marks[cta][s];
      ++tiles;
      (s == 0 ? fill_first : fill).add((m[1] - m[0]) * us_per_cycle);
      main_loop.add((m[2] - m[1]) * us_per_cycle);
      epi.add((m[3] - m[2]) * us_per_cycle);
      lead.add((m[1] - m[4]) * us_per_cycle);
      if (s + 1 < n) gap.add((marks[cta][s + 1][0] - m[3]) * us_per_cycle);
    }
  }
  // Wall time (globaltimer ns) from the earliest tile start to the latest epilogue end, and the
  // clock the SMs actually ran at (cycles over ns summed over each CTA's tiles).
  long long t_first = -1, t_last = 0;
  double cycles = 0, ns = 0;
  for (int cta = 0; cta < std::min(sms, probe::kMaxCtas); ++cta) {
    const int n = std::min(seq[cta][0], probe::kMaxTiles);
    for (int s = 0; s < n; ++s) {
      const long long* m = marks[cta][s];
      if (t_first < 0 || m[6] < t_first) t_first = m[6];
      t_last = std::max(t_last, m[7]);
      cycles += double(m[3] - m[0]);
      ns += double(m[7] - m[6]);
    }
  }
  long long entry = -1, exit_ = 0;
  for (int cta = 0; cta < std::min(sms, probe::kMaxCtas); ++cta) {
    if (kns[cta][0] == 0) continue;  // CTA not launched (grid smaller than the SM count)
    if (entry < 0 || kns[cta][0] < entry) entry = kns[cta][0];
    exit_ = std::max(exit_, kns[cta][1]);
  }
  std::printf("  %s: event time %.1f us = kernel span (first CTA entry to last CTA exit) %.1f us + %.1f us outside; inside: "
              "entry -> first tile start %.1f us, tiles %.1f us, last tile end -> last exit %.1f us; SM clock in tiles %.0f MHz\n",
              what, event_ms * 1e3, (exit_ - entry) * 1e-3, event_ms * 1e3 - (exit_ - entry) * 1e-3, (t_first - entry) * 1e-3,
              (t_last - t_first) * 1e-3, (exit_ - t_last) * 1e-3, ns > 0 ? cycles / ns * 1e3 : 0.0);
  std::printf("  %s, %d tiles, per tile (median / mean us): first-k-block wait %.2f / %.2f (first tile of a CTA: %.2f / %.2f); "
              "mainloop %.2f / %.2f (%.3f us per k-block); epilogue %.2f / %.2f; gap to next tile %.2f / %.2f; first TMA "
              "issue -> data %.2f / %.2f\n",
              what, tiles, fill.median(), fill.mean(), fill_first.median(), fill_first.mean(), main_loop.median(),
              main_loop.mean(), main_loop.median() / kb, epi.median(), epi.mean(), gap.median(), gap.mean(), lead.median(),
              lead.mean());
}

}  // namespace

namespace kosmos::ops::probe_access {  // src/ops/op_kernel.cu, probe build
cudaError_t reset();
cudaError_t read(void* marks, void* seq, void* kernel_ns);
}  // namespace kosmos::ops::probe_access

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: gemm_probe M N K [--layout nn|nt] [--shape auto|256|128|64] [--run R]\n");
    return 2;
  }
  const int64_t M = std::atoll(argv[1]), N = std::atoll(argv[2]), K = std::atoll(argv[3]);
  bool nn = true, random = false, own_stream = false;
  int sets = 1;
  int run = 0;
  GemmTileShape shape = GemmTileShape::kAuto;
  for (int i = 4; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--layout") nn = v == "nn";
    else if (a == "--run") run = std::atoi(v.c_str());
    else if (a == "--data") random = v == "random";
    else if (a == "--stream") own_stream = v == "nonblocking";
    else if (a == "--sets") sets = std::max(1, std::atoi(v.c_str()));
    else if (a == "--shape") shape = gemm_tile_shape_of_width(std::atoi(v.c_str()));
  }
  int sms = 0, clock_khz = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  std::vector<uint16_t*> A(sets), B(sets), C(sets);
  std::vector<GemmParams> P(sets);
  std::vector<std::unique_ptr<kosmos::Gemm>> plans(sets);
  for (int s = 0; s < sets; ++s) {
    CK(cudaMalloc(&A[s], M * K * 2));
    CK(cudaMalloc(&B[s], N * K * 2));
    CK(cudaMalloc(&C[s], M * N * 2));
    if (random) {
      bench_util::fill_random_bf16<<<1024, 256>>>(A[s], M * K, 1 + 17 * s);
      bench_util::fill_random_bf16<<<1024, 256>>>(B[s], N * K, 2 + 17 * s);
    } else {
      fill_small_ints<<<1024, 256>>>(A[s], M * K, 1 + 17 * s);
      fill_small_ints<<<1024, 256>>>(B[s], N * K, 2 + 17 * s);
    }
    kosmos::GemmArguments ga;
    ga.a = A[s];
    ga.lda = K;
    ga.b = B[s];
    ga.b_transposed = !nn;
    ga.ldb = nn ? N : K;
    ga.c = C[s];
    ga.ldc = N;
    ga.m = M;
    ga.n = N;
    ga.k = K;
    GemmDesc d = kosmos::ops::to_gemm_desc(ga);
    d.num_sms = sms;
    d.tile_shape = shape;
    const auto st = make_gemm_params(d, &P[s]);
    const kosmos::Status planned = kosmos::Gemm::plan(ga, kosmos::GemmOptions{}, &plans[s]);
    if (!st.is_ok() || !planned.is_ok()) {
      std::fprintf(stderr, "%s %s\n", st.to_string().c_str(), planned.to_string().c_str());
      return 1;
    }
  }
  const GemmParams& p = P[0];
  if (run <= 0) run = int(kosmos::ops::choose_run_length(p.num_m_tiles, p.num_n_tiles, sms));
  const double t_ms = median_ms([&](int i) { CK(testing::launch_gemm_engine(P[i % sets], sms, run, 16)); });
  cudaStream_t rs = nullptr;  // --stream nonblocking: time the runtime on its own stream
  if (own_stream) CK(cudaStreamCreateWithFlags(&rs, cudaStreamNonBlocking));
  const double rt_ms = median_ms([&](int i) { (void)plans[i % sets]->run(rs); }, rs);
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 1;
  const float alpha = 1.f, beta = 0.f;
  const double cublas_ms = median_ms([&](int i) {
    const int s = i % sets;
    cublasGemmEx(h, nn ? CUBLAS_OP_N : CUBLAS_OP_T, CUBLAS_OP_N, int(N), int(M), int(K), &alpha, B[s], CUDA_R_16BF,
                 int(nn ? N : K), A[s], CUDA_R_16BF, int(K), &beta, C[s], CUDA_R_16BF, int(N), CUBLAS_COMPUTE_32F,
                 CUBLAS_GEMM_DEFAULT);
  });
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  // One more run with the marks reset (the sequence counters count every tile of every run).
  static int zero_seq[probe::kMaxCtas][2];
  CK(cudaMemcpyToSymbol(probe::g_seq, zero_seq, sizeof(zero_seq)));
  CK(cudaEventRecord(e0));
  CK(testing::launch_gemm_engine(p, sms, run, 16));
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  float probed_ms;
  CK(cudaEventElapsedTime(&probed_ms, e0, e1));
  static Marks marks;
  static int seq[probe::kMaxCtas][2];
  static KernelNs kns;
  CK(cudaMemcpyFromSymbol(marks, probe::g_marks, sizeof(marks)));
  CK(cudaMemcpyFromSymbol(seq, probe::g_seq, sizeof(seq)));
  CK(cudaMemcpyFromSymbol(kns, probe::g_kernel_ns, sizeof(kns)));
  const int kb = int((K + kGemmBlockK - 1) / kGemmBlockK);
  const double flops = 2.0 * M * N * K;
  std::printf("gemm_probe %lldx%lldx%lld %s %s data, %d operand sets, tile 128x%d run %d: standalone %.4f ms (%.1f TFLOP/s, "
              "x%.3f cuBLAS; probed run %.4f ms); kosmos::Gemm %.4f ms (%.1f TFLOP/s, x%.3f cuBLAS; %s); cuBLAS %.4f ms (%.1f TFLOP/s); "
              "%d k-blocks per tile, marks at %.0f MHz\n",
              (long long)M, (long long)N, (long long)K, nn ? "NN" : "NT", random ? "random" : "small-int", sets,
              gemm_block_n(p.tile_shape), run, t_ms, flops / t_ms * 1e-9, cublas_ms / t_ms, probed_ms, rt_ms,
              flops / rt_ms * 1e-9, cublas_ms / rt_ms, plans[0]->raster().c_str(), cublas_ms, flops / cublas_ms * 1e-9,
              kb, clock_khz / 1e3);
  print_phases("standalone engine", marks, seq, kns, probed_ms, sms, kb, clock_khz);
  // The same tiles inside the runtime's op kernel (this binary links its probe build).
  CK(kosmos::ops::probe_access::reset());
  CK(cudaEventRecord(e0));
  (void)plans[0]->run();
  CK(cudaEventRecord(e1));
  if (!plans[0]->finish().is_ok()) return 1;
  float rt_probed_ms;
  CK(cudaEventElapsedTime(&rt_probed_ms, e0, e1));
  CK(kosmos::ops::probe_access::read(marks, seq, kns));
  print_phases("kosmos::Gemm (runtime op kernel)", marks, seq, kns, rt_probed_ms, sms, kb, clock_khz);
  const double ideal_kb_us = 2.0 * 128 * gemm_block_n(p.tile_shape) * 64 / (989e12 / sms) * 1e6;
  std::printf("  dense bf16 peak (989 TFLOP/s) would take %.3f us per k-block of this tile\n", ideal_kb_us);
  return 0;
}
