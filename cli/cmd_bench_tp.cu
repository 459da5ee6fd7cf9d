// kosmos bench tp: fused TP/SP ops on virtual ranks (one GPU) against, in the same process:
//   (a) communication then GEMMs in sequence (device copies stand in for NCCL; cuBLAS GEMMs;
//       a reduce kernel for the ReduceScatter/AllReduce sum),
//   (b) the classic overlap: per chunk, copies on a comm stream and cuBLAS on a compute stream,
//       ordered by events,
//   (u) our own unfused composition (the same tasks as two launches),
// and the ideal overlap max(T_gemm, T_comm) from (a)'s parts. Outputs are verified: fused equals
// unfused bit for bit, and fused matches cuBLAS (a) within bf16 tolerance.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <random>

#include "bench_timing.h"
#include "bench_tp_report.h"
#include "bench_tp_nccl.h"
#include "common.h"
#include "kernels/gemm/bf16.h"
#include "kosmos/cuda_check.h"
#include "kosmos/tp.h"
#include "kosmos/trace.h"

namespace kosmos::cli {

namespace {

// Y[rows, cols] = sum_s P_s[row0 + i, :] (rank order, fp32), the baseline's reduce kernel.
struct ReducePtrs {
  const __nv_bfloat16* src[64];
};
__global__ void baseline_reduce(ReducePtrs p, int world, int64_t row0, int64_t rows, int64_t cols, __nv_bfloat16* dst) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float s = 0;
    for (int r = 0; r < world; ++r) s += __bfloat162float(p.src[r][row0 * cols + i]);
    dst[i] = __float2bfloat16_rn(s);
  }
}

struct Model {
  int64_t n, k;
};
const std::map<std::string, Model> kModels = {{"llama3-70b", {28672, 8192}},
                                              {"gpt3-175b", {49152, 12288}},
                                              {"llama3-405b", {53248, 16384}},
                                              {"llama3-8b", {14336, 4096}},
                                              {"small-m", {3584, 8192}}};

struct Ctx {
  TpConfig cfg;
  TpLayer* L = nullptr;
  cublasHandle_t h = nullptr;
  cudaStream_t s0 = nullptr, s1 = nullptr;
  std::vector<cudaEvent_t> ev;
};

__nv_bfloat16* B(Ctx& c, TpBuffer b, int r) { return static_cast<__nv_bfloat16*>(c.L->buffer(b, r)); }

// Row-major C[m, n] = op(A) op(B); a_col: A stored [k, m]; b_t: B stored [n, k].
Status rm_gemm(Ctx& c, cudaStream_t s, const void* A, bool a_col, int64_t lda, const void* Bm, bool b_t, int64_t ldb, void* C,
               int64_t ldc, int64_t m, int64_t n, int64_t k) {
  const float one = 1.0f, zero = 0.0f;
  cublasSetStream(c.h, s);
  auto st = cublasGemmEx(c.h, b_t ? CUBLAS_OP_T : CUBLAS_OP_N, a_col ? CUBLAS_OP_T : CUBLAS_OP_N, int(n), int(m), int(k), &one, Bm,
                         CUDA_R_16BF, int(ldb), A, CUDA_R_16BF, int(lda), &zero, C, CUDA_R_16BF, int(ldc), CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT);
  KOSMOS_CHECK_CODE(st == CUBLAS_STATUS_SUCCESS, StatusCode::kInternal, "cublasGemmEx failed: ", int(st));
  return Status::ok();
}

// The pieces of the baseline, each enqueued on a given stream.
Status ag_copies(Ctx& c, cudaStream_t s, TpBuffer src, TpBuffer dst, int64_t cols, int step /* -1: all */) {
  const int W = c.cfg.world;
  const int64_t R = c.cfg.m / W;
  for (int k = 0; k < W; ++k) {
    if (step >= 0 && k != step) continue;
    for (int r = 0; r < W; ++r) {
      const int ch = (r + k) % W;
      KOSMOS_CUDA_CHECK(cudaMemcpyAsync(B(c, dst, r) + ch * R * cols, B(c, src, ch), R * cols * 2, cudaMemcpyDeviceToDevice, s));
    }
  }
  return Status::ok();
}

Status reduce_rows(Ctx& c, cudaStream_t s, TpBuffer out, int64_t cols, int owner /* -1: all */, bool broadcast) {
  const int W = c.cfg.world;
  const int64_t R = c.cfg.m / W;
  ReducePtrs p{};
  for (int r = 0; r < W; ++r) p.src[r] = B(c, TpBuffer::kPartial, r);
  for (int o = 0; o < W; ++o) {
    if (owner >= 0 && o != owner) continue;
    for (int r = 0; r < W; ++r) {
      if (!broadcast && r != o) continue;
      __nv_bfloat16* dst = B(c, out, r) + (broadcast ? o * R * cols : 0);
      baseline_reduce<<<264, 256, 0, s>>>(p, W, o * R, R, cols, dst);
    }
  }
  KOSMOS_CUDA_CHECK(cudaGetLastError());
  return Status::ok();
}

// Baseline (a) and (b) for each op; returns the comm-only and gemm-only times too (from (a)'s parts).
Status baseline(Ctx& c, bool overlapped, int part /* 0 all, 1 comm only, 2 gemm only */) {
  const TpConfig& g = c.cfg;
  const int W = g.world;
  const int64_t M = g.m, N = g.n, K = g.k, R = M / W;
  const bool comm = part != 2, gemm = part != 1;
  cudaStream_t s0 = c.s0, s1 = overlapped ? c.s1 : c.s0;
  auto fork = [&] { return stream_wait(s1, s0, c.ev[63]); };  // s1 starts after s0's prior work
  auto join = [&] { return stream_wait(s0, s1, c.ev[62]); };  // s0 continues after s1's work
  if (W == 1) {  // the plain path: no communication, the GEMM(s) on the inputs
    if (!gemm) return Status::ok();
    switch (g.op) {
      case TpOp::kAgGemm:
      case TpOp::kGemmRs:
      case TpOp::kGemmAr:
        return rm_gemm(c, s0, B(c, TpBuffer::kX, 0), false, K, B(c, TpBuffer::kW, 0), false, N, B(c, TpBuffer::kY, 0), N, M, N, K);
      default:
        KOSMOS_RETURN_IF_ERROR(rm_gemm(c, s0, B(c, TpBuffer::kDY, 0), false, N, B(c, TpBuffer::kW, 0), true, N, B(c, TpBuffer::kDX, 0), K, M, K, N));
        return rm_gemm(c, s0, B(c, TpBuffer::kX, 0), true, K, B(c, TpBuffer::kDY, 0), false, N, B(c, TpBuffer::kDW, 0), N, K, N, M);
    }
  }
  KOSMOS_RETURN_IF_ERROR(fork());
  switch (g.op) {
    case TpOp::kAgGemm:
    case TpOp::kRowParallelBwd: {
      const bool fwd = g.op == TpOp::kAgGemm;
      const TpBuffer src = fwd ? TpBuffer::kX : TpBuffer::kDY;
      const int64_t cols = fwd ? K : N;
      for (int k = 0; k < W; ++k) {
        if (comm) KOSMOS_RETURN_IF_ERROR(ag_copies(c, s1, src, TpBuffer::kGathered, cols, k));
        if (overlapped) {
          KOSMOS_CUDA_CHECK(cudaEventRecord(c.ev[k], s1));
          KOSMOS_CUDA_CHECK(cudaStreamWaitEvent(s0, c.ev[k]));
        }
        if (!gemm || !overlapped) continue;
        for (int r = 0; r < W; ++r) {  // the chunk that just arrived
          const int ch = (r + k) % W;
          if (fwd) KOSMOS_RETURN_IF_ERROR(rm_gemm(c, s0, B(c, TpBuffer::kGathered, r) + ch * R * K, false, K, B(c, TpBuffer::kW, r), false, N / W,
                                                  B(c, TpBuffer::kY, r) + ch * R * (N / W), N / W, R, N / W, K));
          else KOSMOS_RETURN_IF_ERROR(rm_gemm(c, s0, B(c, TpBuffer::kGathered, r) + ch * R * N, false, N, B(c, TpBuffer::kW, r), true, N,
                                              B(c, TpBuffer::kDX, r) + ch * R * (K / W), K / W, R, K / W, N));
        }
      }
      if (gemm && !overlapped)
        for (int r = 0; r < W; ++r) {
          if (fwd) KOSMOS_RETURN_IF_ERROR(rm_gemm(c, s0, B(c, TpBuffer::kGathered, r), false, K, B(c, TpBuffer::kW, r), false, N / W,
                                                  B(c, TpBuffer::kY, r), N / W, M, N / W, K));
          else KOSMOS_RETURN_IF_ERROR(rm_gemm(c, s0, B(c, TpBuffer::kGathered, r), false, N, B(c, TpBuffer::kW, r), true, N,
                                              B(c, TpBuffer::kDX, r), K / W, M, K / W, N));
        }
      if (gemm && !fwd)  // dW = X_rᵀ · AG(dY), after the gather
        for (int r = 0; r < W; ++r)
          KOSMOS_RETURN_IF_ERROR(rm_gemm(c, s0, B(c, TpBuffer::kX, r), true, K / W, B(c, TpBuffer::kGathered, r), false, N,
                                         B(c, TpBuffer::kDW, r), N, K / W, N, M));
      break;
    }
    case TpOp::kGemmRs:
    case TpOp::kGemmAr:
    case TpOp::kColParallelBwd: {
      const bool bwd = g.op == TpOp::kColParallelBwd;
      const int64_t cols = bwd ? K : N;
      const TpBuffer out = bwd ? TpBuffer::kDX : TpBuffer::kY;
      const bool bc = g.op == TpOp::kGemmAr;
      for (int o = 0; o < W; ++o) {
        if (gemm)
          for (int s = 0; s < W; ++s) {
            if (!bwd) KOSMOS_RETURN_IF_ERROR(rm_gemm(c, s0, B(c, TpBuffer::kX, s) + o * R * (K / W), false, K / W, B(c, TpBuffer::kW, s), false, N,
                                                     B(c, TpBuffer::kPartial, s) + o * R * N, N, R, N, K / W));
            else KOSMOS_RETURN_IF_ERROR(rm_gemm(c, s0, B(c, TpBuffer::kDY, s) + o * R * (N / W), false, N / W, B(c, TpBuffer::kW, s), true, N / W,
                                                B(c, TpBuffer::kPartial, s) + o * R * K, K, R, K, N / W));
          }
        if (overlapped) {
          KOSMOS_CUDA_CHECK(cudaEventRecord(c.ev[o], s0));
          KOSMOS_CUDA_CHECK(cudaStreamWaitEvent(s1, c.ev[o]));
        }
        if (comm && overlapped) KOSMOS_RETURN_IF_ERROR(reduce_rows(c, s1, out, cols, o, bc));
      }
      if (comm && !overlapped) KOSMOS_RETURN_IF_ERROR(reduce_rows(c, s0, out, cols, -1, bc));
      if (bwd) {  // dW_r = AG(X)ᵀ · dY_r
        if (comm) KOSMOS_RETURN_IF_ERROR(ag_copies(c, s1, TpBuffer::kX, TpBuffer::kGathered, K, -1));
        KOSMOS_RETURN_IF_ERROR(join());
        if (gemm)
          for (int r = 0; r < W; ++r)
            KOSMOS_RETURN_IF_ERROR(rm_gemm(c, s0, B(c, TpBuffer::kGathered, r), true, K, B(c, TpBuffer::kDY, r), false, N / W,
                                           B(c, TpBuffer::kDW, r), N / W, K, N / W, M));
      }
      break;
    }
  }
  return join();
}

double flops(const TpConfig& c) {
  const double f = 2.0 * c.m * c.n * c.k;
  return (c.op == TpOp::kColParallelBwd || c.op == TpOp::kRowParallelBwd) ? 2 * f : f;
}


Status fill(void* p, size_t elems, uint64_t seed, float scale) {
  std::vector<uint16_t> h(elems);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  for (auto& x : h) x = kernels::gemm::float_to_bf16(u(rng));
  KOSMOS_CUDA_CHECK(cudaMemcpy(p, h.data(), elems * 2, cudaMemcpyHostToDevice));
  return Status::ok();
}

Status read(const TpLayer& L, TpBuffer b, int r, std::vector<uint16_t>* out) {
  out->resize(L.buffer_bytes(b) / 2);
  KOSMOS_CUDA_CHECK(cudaMemcpy(out->data(), L.buffer(b, r), L.buffer_bytes(b), cudaMemcpyDeviceToHost));
  return Status::ok();
}

std::vector<TpBuffer> outputs(TpOp op) {
  if (op == TpOp::kAgGemm || op == TpOp::kGemmRs || op == TpOp::kGemmAr) return {TpBuffer::kY};
  return {TpBuffer::kDX, TpBuffer::kDW};
}

}  // namespace

void add_bench_tp(CLI::App& bench) {
  auto* cmd = bench.add_subcommand("tp", "Fused TP/SP collectives + GEMM on virtual ranks (or one process per GPU over NCCL) vs "
                                         "sequential and two-stream baselines");
  struct Opts {
    std::string model = "llama3-70b", op = "ag_gemm", json, trace_svg, transport = "local";
    bool backward = false;
    int world = 8, reps = 20;
    int64_t m = 8192;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model, "llama3-70b | gpt3-175b | llama3-405b | llama3-8b | small-m (M=2048,N=3584,K=8192)")
      ->check(CLI::IsMember({"llama3-70b", "gpt3-175b", "llama3-405b", "llama3-8b", "small-m"}));
  cmd->add_option("--op", o->op, "ag_gemm | gemm_rs | gemm_ar")->check(CLI::IsMember({"ag_gemm", "gemm_rs", "gemm_ar"}));
  cmd->add_flag("--backward", o->backward, "Backward of the layer (ag_gemm: column-parallel, gemm_rs: row-parallel)");
  cmd->add_option("--world", o->world, "Virtual ranks on this GPU")->check(CLI::Range(1, 64));
  cmd->add_option("--tokens", o->m, "M (tokens per step); default 8192 (small-m: 2048)");
  cmd->add_option("--reps", o->reps, "Timed repetitions (median)")->check(CLI::Range(3, 1000));
  cmd->add_option("--json", o->json, "Write results as JSON here");
  cmd->add_option("--trace-svg", o->trace_svg, "Also write an SVG trace of one fused run");
  cmd->add_option("--transport", o->transport,
                  "local: virtual ranks on one GPU (default); nccl: one process per GPU, launched with RANK / WORLD_SIZE / "
                  "LOCAL_RANK / KOSMOS_NCCL_ID_FILE (scripts/run_multigpu_bench.sh), baselines NCCL + cuBLAS")
      ->check(CLI::IsMember({"local", "nccl"}));
  cmd->callback([o, cmd] {
    const bool nccl = o->transport == "nccl";
    if (nccl && cmd->count("--trace-svg")) throw Error(Status(StatusCode::kInvalidArgument, "--trace-svg is not available with --transport nccl"));
    if (!nccl && !gpu_available()) throw Error(Status(StatusCode::kUnavailable, "bench tp needs a Hopper GPU (none visible)"));
    const Model md = kModels.at(o->model);
    TpConfig cfg;
    cfg.world = o->world;
    cfg.m = o->model == "small-m" && o->m == 8192 ? 2048 : o->m;
    cfg.n = md.n;
    cfg.k = md.k;
    if (o->op == "ag_gemm") cfg.op = o->backward ? TpOp::kColParallelBwd : TpOp::kAgGemm;
    else if (o->op == "gemm_rs") cfg.op = o->backward ? TpOp::kRowParallelBwd : TpOp::kGemmRs;
    else {
      if (o->backward) throw Error(Status(StatusCode::kInvalidArgument, "--backward is defined for ag_gemm and gemm_rs"));
      cfg.op = TpOp::kGemmAr;
    }
    if (nccl) {  // one process per GPU: the world comes from WORLD_SIZE
      if (cmd->count("--world")) {
        const char* ws = std::getenv("WORLD_SIZE");
        if (ws && std::to_string(o->world) != ws)
          throw Error(Status(StatusCode::kInvalidArgument, "--world " + std::to_string(o->world) + " disagrees with WORLD_SIZE=" + ws +
                                                               " (with --transport nccl the world is WORLD_SIZE; drop --world)"));
      }
      TpNcclBenchOptions no;
      no.model = o->model;
      no.cfg = cfg;
      no.reps = o->reps;
      no.json = o->json;
      run_bench_tp_nccl(no);
      return;
    }
    std::fprintf(stderr, "[bench tp] %s %s W=%d M=%ld N=%ld K=%ld: planning...\n", o->model.c_str(), to_string(cfg.op), cfg.world,
                 cfg.m, cfg.n, cfg.k);
    std::unique_ptr<TpLayer> fused, unfused;
    throw_if_error(TpLayer::plan(cfg, &fused));
    TpConfig cu = cfg;
    cu.fused = false;
    throw_if_error(TpLayer::plan(cu, &unfused));
    for (TpBuffer b : {TpBuffer::kX, TpBuffer::kW, TpBuffer::kDY})
      for (int r = 0; r < cfg.world; ++r)
        if (fused->buffer_bytes(b)) {
          throw_if_error(fill(fused->buffer(b, r), fused->buffer_bytes(b) / 2, 31 * int(b) + r, b == TpBuffer::kW ? 0.05f : 1.0f));
          if (cudaMemcpy(unfused->buffer(b, r), fused->buffer(b, r), fused->buffer_bytes(b), cudaMemcpyDeviceToDevice) != cudaSuccess)
            throw Error(Status(StatusCode::kCudaError, "copy inputs"));
        }
    Ctx c;
    c.cfg = cfg;
    c.L = fused.get();
    cublasCreate(&c.h);
    cudaStreamCreateWithFlags(&c.s0, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&c.s1, cudaStreamNonBlocking);
    c.ev.resize(64);
    for (auto& e : c.ev) cudaEventCreateWithFlags(&e, cudaEventDisableTiming);

    // Verify: fused == unfused bit for bit; fused vs cuBLAS baseline (a) within bf16 tolerance.
    std::fprintf(stderr, "[bench tp] verifying...\n");
    throw_if_error(fused->run(c.s0));
    throw_if_error(fused->finish(c.s0));
    throw_if_error(unfused->run(c.s0));
    throw_if_error(unfused->finish(c.s0));
    std::map<std::pair<int, int>, std::vector<uint16_t>> mine;
    bool bitwise = true;
    for (TpBuffer b : outputs(cfg.op))
      for (int r = 0; r < cfg.world; ++r) {
        std::vector<uint16_t> x, y;
        throw_if_error(read(*fused, b, r, &x));
        throw_if_error(read(*unfused, b, r, &y));
        bitwise &= x == y;
        mine[{int(b), r}] = std::move(x);
      }
    throw_if_error(baseline(c, false, 0));  // writes the cuBLAS results into the fused layer's buffers
    if (cudaStreamSynchronize(c.s0) != cudaSuccess) throw Error(Status(StatusCode::kCudaError, "baseline failed"));
    double worst = 0;
    for (TpBuffer b : outputs(cfg.op))
      for (int r = 0; r < cfg.world; ++r) {
        std::vector<uint16_t> ref;
        throw_if_error(read(*fused, b, r, &ref));
        const auto& x = mine[{int(b), r}];
        double num = 0, den = 0;
        for (size_t i = 0; i < x.size(); ++i) {
          const double a = kernels::gemm::bf16_to_float(x[i]), d = kernels::gemm::bf16_to_float(ref[i]);
          if (!std::isfinite(a)) throw Error(Status(StatusCode::kInternal, "fused output is not finite"));
          num += (a - d) * (a - d);
          den += d * d;
        }
        worst = std::max(worst, std::sqrt(num / std::max(den, 1e-30)));
      }
    if (!bitwise) throw Error(Status(StatusCode::kInternal, "fused differs from the unfused composition"));
    if (!(worst < 2e-2)) throw Error(Status(StatusCode::kInternal, "fused vs cuBLAS relative error " + std::to_string(worst)));

    std::fprintf(stderr, "[bench tp] timing...\n");
    // All six alternate repetition by repetition (bench_timing.h).
    std::vector<double> med;
    throw_if_error(time_median_interleaved_ms(c.s0, o->reps,
                                              {[&](int) { return fused->run(c.s0); }, [&](int) { return unfused->run(c.s0); },
                                               [&](int) { return baseline(c, false, 0); }, [&](int) { return baseline(c, true, 0); },
                                               [&](int) { return baseline(c, false, 1); }, [&](int) { return baseline(c, false, 2); }},
                                              &med));
    throw_if_error(fused->finish(c.s0));
    throw_if_error(unfused->finish(c.s0));
    const double t_fused = med[0], t_unfused = med[1], t_a = med[2], t_b = med[3], t_comm = med[4], t_gemm = med[5];
    const double ideal = std::max(t_comm, t_gemm);
    std::printf("%s %s W=%d M=%ld N=%ld K=%ld (virtual ranks on one GPU; device copies stand in for NCCL)\n", o->model.c_str(),
                to_string(cfg.op), cfg.world, cfg.m, cfg.n, cfg.k);
    std::printf("  %s\n", fused->describe().c_str());
    std::printf("  %-44s %10s %10s %10s\n", "variant", "ms", "TFLOP/s", "fused x");
    auto line = [&](const char* name, double ms) {
      std::printf("  %-44s %10.3f %10.1f %10.3f\n", name, ms, flops(cfg) / (ms * 1e-3) / 1e12, ms / t_fused);
    };
    line("fused (kosmos, one launch)", t_fused);
    line("unfused kosmos composition (two launches)", t_unfused);
    line("(a) copies/reduce then cuBLAS, sequential", t_a);
    line("(b) chunked, copies || cuBLAS on 2 streams", t_b);
    line("    comm only (copies / reduce kernel)", t_comm);
    line("    cuBLAS GEMMs only", t_gemm);
    std::printf("  ideal overlap max(T_gemm, T_comm) = %.3f ms; fused reaches %.1f%% of it; bitwise fused==unfused: %s; "
                "rel.err vs cuBLAS %.2e\n",
                ideal, 100 * ideal / t_fused, bitwise ? "yes" : "no", worst);
    if (!o->trace_svg.empty()) {
      TpConfig ct = cfg;
      ct.trace = true;
      std::unique_ptr<TpLayer> traced;
      throw_if_error(TpLayer::plan(ct, &traced));
      throw_if_error(traced->run(c.s0));
      throw_if_error(traced->finish(c.s0));
      std::vector<runtime::TraceRecord> tr;
      throw_if_error(traced->read_trace(&tr));
      throw_if_error(runtime::write_trace_files(tr, std::string("kosmos ") + to_string(cfg.op) + " " + o->model + " W=" +
                                                        std::to_string(cfg.world) + " (virtual ranks, one H200)",
                                                "", o->trace_svg));
    }
    if (!o->json.empty()) {
      nlohmann::json j = run_metadata(command_line());
      j["bench"] = "tp";
      j["model"] = o->model;
      j["op"] = to_string(cfg.op);
      j["world"] = cfg.world;
      j["m"] = cfg.m;
      j["n"] = cfg.n;
      j["k"] = cfg.k;
      j["transport"] = "local virtual ranks (device copies stand in for NCCL)";
      put_tp_times(j, {t_fused, t_unfused, t_a, t_b, t_comm, t_gemm}, flops(cfg));
      j["bitwise_fused_eq_unfused"] = bitwise;
      j["rel_err_vs_cublas"] = worst;
      throw_if_error(write_json(o->json, j));
    }
  });
}

}  // namespace kosmos::cli
