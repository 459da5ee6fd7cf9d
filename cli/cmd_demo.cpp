// kosmos demo: the main job. Runs one fused layer — AllGather + GEMM of a tensor/sequence-parallel
// linear on W virtual ranks, one persistent launch — verifies it against an fp64 reference on
// sampled rows and against the unfused composition bit for bit, and times both. On a machine
// without a GPU it runs on the CPU executor at a small size.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>
#include <random>

#include "common.h"
#include "kernels/gemm/bf16.h"
#include "kosmos/tp.h"
#include "kosmos/trace.h"

namespace kosmos::cli {

namespace {
using kernels::gemm::bf16_to_float;

Status copy(void* dst, const void* src, size_t bytes, bool gpu, cudaMemcpyKind kind) {
  if (!gpu) {
    std::memcpy(dst, src, bytes);
    return Status::ok();
  }
  return cudaMemcpy(dst, src, bytes, kind) == cudaSuccess ? Status::ok() : Status(StatusCode::kCudaError, "cudaMemcpy failed");
}

double time_runs(TpLayer& L, int reps, bool gpu) {
  std::vector<double> v;
  for (int i = 0; i < reps + 1; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    throw_if_error(L.run(nullptr));
    throw_if_error(L.finish(nullptr));
    if (gpu) cudaDeviceSynchronize();
    if (i) v.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

void add_demo(CLI::App& app) {
  auto* cmd = app.add_subcommand("demo", "Run, verify and time one fused layer (AllGather+GEMM on virtual ranks)");
  struct Opts {
    std::string executor = "auto", svg;
    int world = 0;
    int64_t m = 0, n = 0, k = 0;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--executor", o->executor, "auto (GPU if present), gpu or cpu")->check(CLI::IsMember({"auto", "gpu", "cpu"}));
  cmd->add_option("--world", o->world, "Virtual ranks (default 8 on GPU, 4 on CPU)")->check(CLI::Range(1, 64));
  cmd->add_option("-m", o->m, "Tokens M (default 4096 on GPU, 256 on CPU)");
  cmd->add_option("-n", o->n, "Output features N of the full layer (default 14336 on GPU, 256 on CPU)");
  cmd->add_option("-k", o->k, "Input features K (default 4096 on GPU, 128 on CPU)");
  cmd->add_option("--svg", o->svg, "Also write a trace timeline SVG of one fused run");
  cmd->callback([o] {
    const std::string ex = pick_executor(o->executor);
    if (ex == "gpu" && !gpu_available()) throw Error(Status(StatusCode::kUnavailable, "no Hopper GPU visible; use --executor cpu"));
    const bool gpu = ex == "gpu";
    TpConfig cfg;
    cfg.op = TpOp::kAgGemm;
    cfg.cpu = !gpu;
    cfg.world = o->world ? o->world : (gpu ? 8 : 4);
    cfg.m = o->m ? o->m : (gpu ? 4096 : 256);
    cfg.n = o->n ? o->n : (gpu ? 14336 : 256);
    cfg.k = o->k ? o->k : (gpu ? 4096 : 128);
    cfg.trace = !o->svg.empty();
    std::cout << "kosmos demo: AllGather+GEMM, " << cfg.world << " virtual ranks, Y_r = AllGather(X) [" << cfg.m << " x " << cfg.k
              << "] . W_r [" << cfg.k << " x " << cfg.n / cfg.world << "], executor " << ex
              << (gpu ? "" : " (no GPU: small size)") << "\n";
    std::unique_ptr<TpLayer> fused, unfused;
    throw_if_error(TpLayer::plan(cfg, &fused));
    TpConfig cu = cfg;
    cu.fused = false;
    cu.trace = false;
    throw_if_error(TpLayer::plan(cu, &unfused));
    std::cout << "  plan: " << fused->describe() << "\n";
    // Inputs: fresh random bf16, the same in both layers; outputs poisoned.
    std::mt19937_64 rng(std::random_device{}());
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<std::vector<uint16_t>> X(cfg.world), W(cfg.world);
    for (int r = 0; r < cfg.world; ++r) {
      for (auto [buf, vec, scale] : {std::tuple{TpBuffer::kX, &X[r], 1.0f}, std::tuple{TpBuffer::kW, &W[r], 0.05f}}) {
        vec->resize(fused->buffer_bytes(buf) / 2);
        for (auto& x : *vec) x = kernels::gemm::float_to_bf16(u(rng) * scale);
        throw_if_error(copy(fused->buffer(buf, r), vec->data(), fused->buffer_bytes(buf), gpu, cudaMemcpyHostToDevice));
        throw_if_error(copy(unfused->buffer(buf, r), vec->data(), fused->buffer_bytes(buf), gpu, cudaMemcpyHostToDevice));
      }
      std::vector<uint16_t> poison(fused->buffer_bytes(TpBuffer::kY) / 2, 0x7FC1);
      throw_if_error(copy(fused->buffer(TpBuffer::kY, r), poison.data(), poison.size() * 2, gpu, cudaMemcpyHostToDevice));
    }
    throw_if_error(fused->run(nullptr));
    throw_if_error(fused->finish(nullptr));
    throw_if_error(unfused->run(nullptr));
    throw_if_error(unfused->finish(nullptr));
    // Verify: fused == unfused on every rank; fp64 on sampled rows of every rank.
    const int64_t R = cfg.m / cfg.world, nl = cfg.n / cfg.world;
    double num = 0, den = 0;
    bool same = true;
    for (int r = 0; r < cfg.world; ++r) {
      std::vector<uint16_t> y(fused->buffer_bytes(TpBuffer::kY) / 2), yu(y.size());
      throw_if_error(copy(y.data(), fused->buffer(TpBuffer::kY, r), y.size() * 2, gpu, cudaMemcpyDeviceToHost));
      throw_if_error(copy(yu.data(), unfused->buffer(TpBuffer::kY, r), y.size() * 2, gpu, cudaMemcpyDeviceToHost));
      same &= y == yu;
      for (int64_t i = r % 7; i < cfg.m; i += std::max<int64_t>(1, cfg.m / 16)) {
        const auto& xs = X[i / R];
        for (int64_t j = 0; j < nl; j += std::max<int64_t>(1, nl / 64)) {
          double ref = 0;
          for (int64_t kk = 0; kk < cfg.k; ++kk) ref += double(bf16_to_float(xs[(i % R) * cfg.k + kk])) * bf16_to_float(W[r][kk * nl + j]);
          const double got = bf16_to_float(y[i * nl + j]);
          if (!std::isfinite(got)) throw Error(Status(StatusCode::kInternal, "demo: an output was not written (NaN)"));
          num += (got - ref) * (got - ref);
          den += ref * ref;
        }
      }
    }
    const double err = std::sqrt(num / std::max(den, 1e-30));
    if (!same) throw Error(Status(StatusCode::kInternal, "demo: fused result differs from the unfused composition"));
    if (!(err < 1e-2)) throw Error(Status(StatusCode::kInternal, "demo: relative error vs fp64 " + std::to_string(err)));
    std::cout << "  verified: fused == unfused bit for bit on all ranks; relative error vs fp64 " << err << "\n";
    const int reps = gpu ? 10 : 2;
    const double tf = time_runs(*fused, reps, gpu), tu = time_runs(*unfused, reps, gpu);
    const double flops = 2.0 * cfg.m * cfg.n * cfg.k;
    std::cout << "  fused (" << (gpu ? "one persistent launch" : "one CPU-executor run") << "): " << tf << " ms  ("
              << flops / (tf * 1e-3) / 1e12 << " TFLOP/s)\n"
              << "  unfused (" << (gpu ? "two launches" : "two runs") << "): " << tu << " ms\n";
    if (!o->svg.empty()) {
      std::vector<runtime::TraceRecord> tr;
      throw_if_error(fused->read_trace(&tr));
      throw_if_error(runtime::write_trace_files(tr, "kosmos demo: AG+GEMM", "", o->svg));
      std::cout << "  wrote " << o->svg << "\n";
    }
  });
}

}  // namespace kosmos::cli
