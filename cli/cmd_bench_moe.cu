// kosmos bench moe: the fused MoE forward (one launch) against, in the same process and on the
// same buffers, the unfused pipeline made of our own kernels as separate launches (route,
// offsets, dispatch = permute + all-to-all by device stores, grouped GEMM1 with SwiGLU, grouped
// GEMM2 with the router-weight scale, combine: six persistent launches). Virtual ranks on one GPU.
// Verified: fused == unfused bit for bit, and a few tokens of rank 0 against an fp64 host
// reference. Reported: median ms, TFLOP/s, ratio to the unfused pipeline, and the weight-read
// floor (all expert weight bytes / 4.2 TB/s, the H200's measured device copy rate).
// --backward: the fused backward (one launch) against its unfused composition (seven launches:
// route, offsets, dispatch of x and dy, H1 recompute + dA', SwiGLU backward, dX + weight
// gradients, combine); verified bit for bit on every output (dx, d_weights, dGateUp, dDown) and
// dx / d_weights of three tokens of rank 0 against fp64 (the weight gradients are checked against
// fp64 by the GPU tests). FLOPs = 2 x the forward's GEMM FLOPs + the recomputed GEMM1.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>

#include "bench_timing.h"
#include "common.h"
#include "kernels/gemm/bf16.h"
#include "kosmos/cuda_check.h"
#include "kosmos/moe.h"
#include "kosmos/trace.h"

namespace kosmos::cli {

namespace {

struct MoeModel {
  int64_t hidden, intermediate;
  int experts_per_rank;  // default E = experts_per_rank * world (DeepSeek: 32 local experts, as in issue 5's proxy)
  int fixed_experts;     // > 0: E regardless of the world (Qwen3-235B: 128)
};
const std::map<std::string, MoeModel> kMoeModels = {{"deepseek-v3", {7168, 2048, 32, 0}}, {"qwen3-235b", {4096, 1536, 0, 128}}};

__global__ void fill_bf16(__nv_bfloat16* p, size_t n, uint64_t seed, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint64_t z = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float u = float(z >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    p[i] = __float2bfloat16_rn((2.0f * u - 1.0f) * scale);
  }
}


template <class T>
Status download(const void* src, size_t count, size_t offset, std::vector<T>* out) {
  out->resize(count);
  KOSMOS_CUDA_CHECK(cudaMemcpy(out->data(), static_cast<const T*>(src) + offset, count * sizeof(T), cudaMemcpyDeviceToHost));
  return Status::ok();
}

// fp64 reference of token t of rank 0, reading the (interleaved) expert weights from the device.
Status reference_token(const MoeLayer& L, int64_t t, const std::vector<int32_t>& ids, const std::vector<float>& w,
                       std::vector<double>* y) {
  const MoeConfig& c = L.config();
  const int64_t H = c.hidden, I = c.intermediate, Lx = c.num_experts / c.world;
  std::vector<uint16_t> x, gu, dn;
  KOSMOS_RETURN_IF_ERROR(download(L.buffer(MoeBuffer::kX, 0), size_t(H), size_t(t * H), &x));
  y->assign(size_t(H), 0.0);
  for (int j = 0; j < c.top_k; ++j) {
    const int e = ids[t * c.top_k + j];
    KOSMOS_RETURN_IF_ERROR(download(L.buffer(MoeBuffer::kGateUp, int(e / Lx)), size_t(H * 2 * I), size_t((e % Lx) * H * 2 * I), &gu));
    KOSMOS_RETURN_IF_ERROR(download(L.buffer(MoeBuffer::kDown, int(e / Lx)), size_t(I * H), size_t((e % Lx) * I * H), &dn));
    std::vector<double> acc(size_t(2 * I), 0.0);
    for (int64_t h = 0; h < H; ++h) {
      const double xv = kernels::gemm::bf16_to_float(x[h]);
      for (int64_t n = 0; n < 2 * I; ++n) acc[n] += xv * kernels::gemm::bf16_to_float(gu[h * 2 * I + n]);
    }
    for (int64_t i = 0; i < I; ++i) {
      const double g = acc[16 * (i / 8) + i % 8], u = acc[16 * (i / 8) + 8 + i % 8];
      const double a = g / (1.0 + std::exp(-g)) * u * w[t * c.top_k + j];
      for (int64_t h = 0; h < H; ++h) (*y)[h] += a * kernels::gemm::bf16_to_float(dn[i * H + h]);
    }
  }
  return Status::ok();
}

// fp64 dx and d_weights of token t of rank 0 (expert weights read back from the device).
Status reference_token_backward(const MoeLayer& L, int64_t t, const std::vector<int32_t>& ids, const std::vector<float>& w,
                                std::vector<double>* dx, std::vector<double>* dw) {
  const MoeConfig& c = L.config();
  const int64_t H = c.hidden, I = c.intermediate, Lx = c.num_experts / c.world;
  std::vector<uint16_t> x, dy, gu, dn;
  KOSMOS_RETURN_IF_ERROR(download(L.buffer(MoeBuffer::kX, 0), size_t(H), size_t(t * H), &x));
  KOSMOS_RETURN_IF_ERROR(download(L.buffer(MoeBuffer::kDy, 0), size_t(H), size_t(t * H), &dy));
  dx->assign(size_t(H), 0.0);
  dw->assign(size_t(c.top_k), 0.0);
  auto f = [](uint16_t v) { return double(kernels::gemm::bf16_to_float(v)); };
  for (int j = 0; j < c.top_k; ++j) {
    const int e = ids[t * c.top_k + j];
    KOSMOS_RETURN_IF_ERROR(download(L.buffer(MoeBuffer::kGateUp, int(e / Lx)), size_t(H * 2 * I), size_t((e % Lx) * H * 2 * I), &gu));
    KOSMOS_RETURN_IF_ERROR(download(L.buffer(MoeBuffer::kDown, int(e / Lx)), size_t(I * H), size_t((e % Lx) * I * H), &dn));
    std::vector<double> acc(size_t(2 * I), 0.0), dh(size_t(2 * I), 0.0);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t n = 0; n < 2 * I; ++n) acc[n] += f(x[h]) * f(gu[h * 2 * I + n]);
    for (int64_t i = 0; i < I; ++i) {
      const int64_t gc = 16 * (i / 8) + i % 8;  // interleaved gate column; up = gc + 8
      const double g = acc[gc], u = acc[gc + 8], sg = 1.0 / (1.0 + std::exp(-g));
      double da = 0.0;
      for (int64_t h = 0; h < H; ++h) da += f(dn[i * H + h]) * f(dy[h]);
      (*dw)[j] += da * g * sg * u;
      const double dA = w[t * c.top_k + j] * da;
      dh[gc] = dA * u * sg * (1.0 + g * (1.0 - sg));
      dh[gc + 8] = dA * g * sg;
    }
    for (int64_t h = 0; h < H; ++h)
      for (int64_t n = 0; n < 2 * I; ++n) (*dx)[h] += dh[n] * f(gu[h * 2 * I + n]);
  }
  return Status::ok();
}

// The backward outputs of every rank, as raw bytes (for the bitwise comparison).
Status download_grads(const MoeLayer& L, std::vector<std::vector<uint8_t>>* out) {
  out->clear();
  for (int r = 0; r < L.config().world; ++r)
    for (MoeBuffer b : {MoeBuffer::kDx, MoeBuffer::kDWeights, MoeBuffer::kDGateUp, MoeBuffer::kDDown}) {
      std::vector<uint8_t> v;
      KOSMOS_RETURN_IF_ERROR(download(L.buffer(b, r), L.buffer_bytes(b), 0, &v));
      out->push_back(std::move(v));
    }
  return Status::ok();
}

}  // namespace

void add_bench_moe(CLI::App& bench) {
  auto* cmd = bench.add_subcommand("moe", "Fused MoE forward (one launch) on virtual ranks vs the unfused pipeline of our kernels");
  struct Opts {
    std::string model = "deepseek-v3", routing = "uniform", json, trace_svg;
    int world = 1, reps = 20, experts = 0, top_k = 8;
    int64_t tokens = 4096;
    bool backward = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model, "deepseek-v3 (H 7168, I 2048, 32 experts per rank) | qwen3-235b (H 4096, I 1536, E 128)")
      ->check(CLI::IsMember({"deepseek-v3", "qwen3-235b"}));
  cmd->add_option("--tokens", o->tokens, "Tokens per rank (4096 training, 128 decode)")->check(CLI::Range(int64_t(1), int64_t(16384)));
  cmd->add_option("--world", o->world, "Virtual ranks on this GPU")->check(CLI::Range(1, 16));
  cmd->add_option("--routing", o->routing, "uniform | skewed (half the experts empty, p ~ 1/(i+1) over the rest)")
      ->check(CLI::IsMember({"uniform", "skewed"}));
  cmd->add_option("--experts", o->experts, "Override E (total experts)");
  cmd->add_option("--reps", o->reps, "Timed repetitions (median)")->check(CLI::Range(3, 1000));
  cmd->add_option("--json", o->json, "Write results as JSON here");
  cmd->add_option("--trace-svg", o->trace_svg, "Record a trace of one fused run and write it as SVG");
  cmd->add_flag("--backward", o->backward, "Benchmark the backward pass (world <= 8) instead of the forward");
  cmd->callback([o] {
    if (!gpu_available()) throw Error(Status(StatusCode::kUnavailable, "bench moe needs a Hopper GPU (none visible)"));
    const MoeModel md = kMoeModels.at(o->model);
    MoeConfig cfg;
    cfg.world = o->world;
    cfg.tokens = o->tokens;
    cfg.hidden = md.hidden;
    cfg.intermediate = md.intermediate;
    cfg.num_experts = o->experts > 0 ? o->experts : md.fixed_experts > 0 ? md.fixed_experts : md.experts_per_rank * o->world;
    cfg.top_k = o->top_k;
    cfg.trace = !o->trace_svg.empty();
    cfg.backward = o->backward;
    std::fprintf(stderr, "[bench moe]%s %s W=%d T=%ld H=%ld I=%ld E=%d k=%d %s: planning...\n", o->backward ? " backward" : "", o->model.c_str(), cfg.world,
                 cfg.tokens, cfg.hidden, cfg.intermediate, cfg.num_experts, cfg.top_k, o->routing.c_str());
    std::unique_ptr<MoeLayer> L;
    throw_if_error(MoeLayer::plan(cfg, &L));
    const int W = cfg.world, E = cfg.num_experts, k = cfg.top_k;
    const int64_t T = cfg.tokens, H = cfg.hidden, I = cfg.intermediate;
    // Inputs: weights and x on the device (hash RNG), routing on the host.
    for (int r = 0; r < W; ++r) {
      fill_bf16<<<1024, 256>>>(static_cast<__nv_bfloat16*>(L->buffer(MoeBuffer::kX, r)), size_t(T * H), 101 + r, 1.0f);
      fill_bf16<<<1024, 256>>>(static_cast<__nv_bfloat16*>(L->buffer(MoeBuffer::kGateUp, r)), L->buffer_bytes(MoeBuffer::kGateUp) / 2,
                               202 + r, 2.0f / std::sqrt(float(H)));
      fill_bf16<<<1024, 256>>>(static_cast<__nv_bfloat16*>(L->buffer(MoeBuffer::kDown, r)), L->buffer_bytes(MoeBuffer::kDown) / 2,
                               303 + r, 2.0f / std::sqrt(float(I)));
    }
    std::mt19937_64 rng(7);
    std::vector<double> p(E, 1.0);
    if (o->routing == "skewed")
      for (int e = 0; e < E; ++e) p[e] = e < std::max(1, E / 2) ? 1.0 / (e + 1) : 0.0;
    std::discrete_distribution<int> pick(p.begin(), p.end());
    std::uniform_real_distribution<float> uw(0.05f, 1.0f);
    std::vector<int32_t> ids0;
    std::vector<float> w0;
    std::vector<int64_t> rows_per_rank(W, 0);
    for (int r = 0; r < W; ++r) {
      std::vector<int32_t> ids(size_t(T) * k);
      std::vector<float> w(ids.size());
      for (size_t i = 0; i < ids.size(); ++i) {
        // distinct experts per token when possible (as a top-k router picks them)
        int e = pick(rng);
        for (int tries = 0; tries < 64; ++tries) {
          bool dup = false;
          for (size_t j = i - i % k; j < i; ++j) dup |= ids[j] == e;
          if (!dup) break;
          e = pick(rng);
        }
        ids[i] = e;
        w[i] = uw(rng);
        rows_per_rank[e / (E / W)]++;
      }
      if (cudaMemcpy(L->buffer(MoeBuffer::kIds, r), ids.data(), ids.size() * 4, cudaMemcpyHostToDevice) != cudaSuccess ||
          cudaMemcpy(L->buffer(MoeBuffer::kWeights, r), w.data(), w.size() * 4, cudaMemcpyHostToDevice) != cudaSuccess)
        throw Error(Status(StatusCode::kCudaError, "upload routing"));
      if (r == 0) {
        ids0 = ids;
        w0 = w;
      }
    }
    if (o->backward)
      for (int r = 0; r < W; ++r)
        fill_bf16<<<1024, 256>>>(static_cast<__nv_bfloat16*>(L->buffer(MoeBuffer::kDy, r)), size_t(T * H), 404 + r, 1.0f);
    if (cudaDeviceSynchronize() != cudaSuccess) throw Error(Status(StatusCode::kCudaError, "input fill failed"));
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (o->backward) {
      std::fprintf(stderr, "[bench moe] backward: verifying...\n");
      throw_if_error(L->run_backward_composition(false, s));
      throw_if_error(L->finish(s));
      std::vector<std::vector<uint8_t>> unf, fus;
      throw_if_error(download_grads(*L, &unf));
      for (int r = 0; r < W; ++r)
        for (MoeBuffer b : {MoeBuffer::kDx, MoeBuffer::kDWeights, MoeBuffer::kDGateUp, MoeBuffer::kDDown})
          if (cudaMemset(L->buffer(b, r), 0xFF, L->buffer_bytes(b)) != cudaSuccess) throw Error(Status(StatusCode::kCudaError, "poison"));
      throw_if_error(L->run_backward_composition(true, s));
      throw_if_error(L->finish(s));
      throw_if_error(download_grads(*L, &fus));
      const bool bitwise = fus == unf;
      for (size_t i = 0; i < fus.size(); i += 4) {  // every bf16 / fp32 output finite (0xFFFF poison is NaN)
        for (size_t q : {size_t(0), size_t(2), size_t(3)}) {
          const auto* v = reinterpret_cast<const uint16_t*>(fus[i + q].data());
          for (size_t e = 0; e < fus[i + q].size() / 2; ++e)
            if (!std::isfinite(kernels::gemm::bf16_to_float(v[e])))
              throw Error(Status(StatusCode::kInternal, "fused backward output is not finite"));
        }
      }
      double num = 0, den = 0;
      const auto* dx0 = reinterpret_cast<const uint16_t*>(fus[0].data());
      const auto* dw0 = reinterpret_cast<const float*>(fus[1].data());
      for (int64_t t : {int64_t(0), T / 2, T - 1}) {
        std::vector<double> rdx, rdw;
        throw_if_error(reference_token_backward(*L, t, ids0, w0, &rdx, &rdw));
        for (int64_t h = 0; h < H; ++h) {
          const double v = kernels::gemm::bf16_to_float(dx0[t * H + h]);
          num += (v - rdx[h]) * (v - rdx[h]);
          den += rdx[h] * rdx[h];
        }
        for (int j = 0; j < k; ++j) {
          num += (dw0[t * k + j] - rdw[j]) * (dw0[t * k + j] - rdw[j]);
          den += rdw[j] * rdw[j];
        }
      }
      const double rel = std::sqrt(num / std::max(den, 1e-30));
      if (!bitwise) throw Error(Status(StatusCode::kInternal, "fused backward differs from the unfused composition"));
      if (!(rel < 2e-2)) throw Error(Status(StatusCode::kInternal, "fused backward vs fp64: relative error " + std::to_string(rel)));
      std::fprintf(stderr, "[bench moe] backward: timing...\n");
      double t_fused = 0, t_unfused = 0;
      throw_if_error(time_median_ms(s, o->reps, [&] { return L->run_backward_composition(true, s); }, &t_fused));
      throw_if_error(L->finish(s));
      throw_if_error(time_median_ms(s, o->reps, [&] { return L->run_backward_composition(false, s); }, &t_unfused));
      throw_if_error(L->finish(s));
      const double rows = double(W) * T * k;
      const double gemm1 = 2.0 * rows * double(H) * 2 * I, gemm2 = 2.0 * rows * double(I) * H;
      const double flops = 2.0 * (gemm1 + gemm2) + gemm1;  // dX + dGU, dA' + dD, recomputed h1
      std::printf("moe backward %s W=%d T=%ld H=%ld I=%ld E=%d k=%d routing=%s (virtual ranks on one GPU)\n", o->model.c_str(), W,
                  T, H, I, E, k, o->routing.c_str());
      std::printf("  %s\n", L->describe().c_str());
      std::printf("  %-46s %10s %10s %10s\n", "variant", "ms", "TFLOP/s", "x fused");
      auto line = [&](const char* name, double ms) {
        std::printf("  %-46s %10.3f %10.1f %10.3f\n", name, ms, flops / (ms * 1e-3) / 1e12, ms / t_fused);
      };
      line("fused backward (kosmos, one launch)", t_fused);
      line("unfused backward (same kernels, 7 launches)", t_unfused);
      std::printf("  bitwise fused==unfused (dx, d_weights, dGateUp, dDown of every rank): %s; rel.err of dx, d_weights vs "
                  "fp64 (3 tokens of rank 0) %.2e\n",
                  bitwise ? "yes" : "no", rel);
      if (!o->json.empty()) {
        nlohmann::json j = run_metadata(command_line());
        j["bench"] = "moe_backward";
        j["model"] = o->model;
        j["world"] = W;
        j["tokens"] = T;
        j["hidden"] = H;
        j["intermediate"] = I;
        j["experts"] = E;
        j["top_k"] = k;
        j["routing"] = o->routing;
        j["transport"] = "local virtual ranks (device stores between ranks' buffers)";
        j["plan"] = L->describe();
        j["fused_ms"] = t_fused;
        j["unfused_ms"] = t_unfused;
        j["speedup_vs_unfused"] = t_unfused / t_fused;
        j["flops"] = flops;
        j["fused_tflops"] = flops / (t_fused * 1e-3) / 1e12;
        j["unfused_tflops"] = flops / (t_unfused * 1e-3) / 1e12;
        j["bitwise_fused_eq_unfused"] = bitwise;
        j["rel_err_vs_fp64"] = rel;
        throw_if_error(write_json(o->json, j));
      }
      cudaStreamDestroy(s);
      return;
    }

    std::fprintf(stderr, "[bench moe] verifying...\n");
    throw_if_error(L->run_composition(false, s));
    throw_if_error(L->finish(s));
    std::vector<uint16_t> y_unfused, y_fused;
    std::vector<std::vector<uint16_t>> unf(W);
    for (int r = 0; r < W; ++r) throw_if_error(download(L->buffer(MoeBuffer::kY, r), size_t(T * H), 0, &unf[r]));
    if (cudaMemset(L->buffer(MoeBuffer::kY, 0), 0xFF, L->buffer_bytes(MoeBuffer::kY)) != cudaSuccess)
      throw Error(Status(StatusCode::kCudaError, "poison"));
    throw_if_error(L->run_composition(true, s));
    throw_if_error(L->finish(s));
    bool bitwise = true;
    for (int r = 0; r < W; ++r) {
      std::vector<uint16_t> yf;
      throw_if_error(download(L->buffer(MoeBuffer::kY, r), size_t(T * H), 0, &yf));
      bitwise &= yf == unf[r];
      if (r == 0) y_fused = yf;
    }
    double num = 0, den = 0;
    for (int64_t t : {int64_t(0), T / 2, T - 1}) {
      std::vector<double> ref;
      throw_if_error(reference_token(*L, t, ids0, w0, &ref));
      for (int64_t h = 0; h < H; ++h) {
        const double v = kernels::gemm::bf16_to_float(y_fused[t * H + h]);
        if (!std::isfinite(v)) throw Error(Status(StatusCode::kInternal, "fused output is not finite"));
        num += (v - ref[h]) * (v - ref[h]);
        den += ref[h] * ref[h];
      }
    }
    const double rel = std::sqrt(num / std::max(den, 1e-30));
    if (!bitwise) throw Error(Status(StatusCode::kInternal, "fused differs from the unfused composition"));
    if (!(rel < 2e-2)) throw Error(Status(StatusCode::kInternal, "fused vs fp64 reference: relative error " + std::to_string(rel)));

    std::fprintf(stderr, "[bench moe] timing...\n");
    double t_fused = 0, t_unfused = 0;
    throw_if_error(time_median_ms(s, o->reps, [&] { return L->run_composition(true, s); }, &t_fused));
    throw_if_error(L->finish(s));
    throw_if_error(time_median_ms(s, o->reps, [&] { return L->run_composition(false, s); }, &t_unfused));
    throw_if_error(L->finish(s));
    const double weight_bytes = double(W) * (L->buffer_bytes(MoeBuffer::kGateUp) + L->buffer_bytes(MoeBuffer::kDown));
    const double floor_ms = weight_bytes / 4.2e12 * 1e3;
    const double flops = 2.0 * double(W) * T * k * (double(H) * 2 * I + double(I) * H);
    const int64_t max_rows = *std::max_element(rows_per_rank.begin(), rows_per_rank.end());
    std::printf("moe %s W=%d T=%ld H=%ld I=%ld E=%d k=%d routing=%s (virtual ranks on one GPU)\n", o->model.c_str(), W, T, H, I, E,
                k, o->routing.c_str());
    std::printf("  %s\n", L->describe().c_str());
    std::printf("  rows received: max %ld per rank (worst-case buffers %ld)\n", max_rows, int64_t(W) * T * k);
    std::printf("  %-46s %10s %10s %10s\n", "variant", "ms", "TFLOP/s", "x fused");
    auto line = [&](const char* name, double ms) {
      std::printf("  %-46s %10.3f %10.1f %10.3f\n", name, ms, flops / (ms * 1e-3) / 1e12, ms / t_fused);
    };
    line("fused (kosmos, one launch)", t_fused);
    line("unfused (same kernels, 6 launches)", t_unfused);
    std::printf("  weight-read floor %.3f ms (%.2f GB / 4.2 TB/s): fused at %.2fx the floor; bitwise fused==unfused: %s; "
                "rel.err vs fp64 (3 tokens of rank 0) %.2e\n",
                floor_ms, weight_bytes / 1e9, t_fused / floor_ms, bitwise ? "yes" : "no", rel);
    if (!o->trace_svg.empty()) {
      throw_if_error(L->run_composition(true, s));
      throw_if_error(L->finish(s));
      std::vector<runtime::TraceRecord> tr;
      throw_if_error(L->read_trace(&tr));
      throw_if_error(runtime::write_trace_files(tr, "kosmos moe forward " + o->model + " W=" + std::to_string(W) + " T=" +
                                                        std::to_string(T) + " (virtual ranks, one H200)",
                                                "", o->trace_svg));
    }
    if (!o->json.empty()) {
      nlohmann::json j = run_metadata(command_line());
      j["bench"] = "moe";
      j["model"] = o->model;
      j["world"] = W;
      j["tokens"] = T;
      j["hidden"] = H;
      j["intermediate"] = I;
      j["experts"] = E;
      j["top_k"] = k;
      j["routing"] = o->routing;
      j["transport"] = "local virtual ranks (device stores between ranks' buffers)";
      j["plan"] = L->describe();
      j["fused_ms"] = t_fused;
      j["unfused_ms"] = t_unfused;
      j["speedup_vs_unfused"] = t_unfused / t_fused;
      j["fused_tflops"] = flops / (t_fused * 1e-3) / 1e12;
      j["weight_bytes"] = weight_bytes;
      j["weight_floor_ms"] = floor_ms;
      j["fused_over_floor"] = t_fused / floor_ms;
      j["max_rows_per_rank"] = max_rows;
      j["bitwise_fused_eq_unfused"] = bitwise;
      j["rel_err_vs_fp64"] = rel;
      j["trace_enabled"] = cfg.trace;
      throw_if_error(write_json(o->json, j));
    }
    cudaStreamDestroy(s);
  });
}

}  // namespace kosmos::cli
