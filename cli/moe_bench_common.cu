// The MoE benchmarks' shared pieces (moe_bench_common.h).
#include "moe_bench_common.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>

#include "bench_timing.h"
#include "kernels/gemm/bf16.h"
#include "kosmos/cuda_check.h"
#include "kosmos/trace.h"

namespace kosmos::cli {

const std::map<std::string, MoeModel> kMoeModels = {{"deepseek-v3", {7168, 2048, 32, 0}}, {"qwen3-235b", {4096, 1536, 0, 128}}};

namespace {

// Element g = i + offset of a tensor: a splitmix hash of (g, seed) -> uniform in [-scale, scale).
__global__ void fill_bf16(__nv_bfloat16* p, size_t n, uint64_t seed, float scale, size_t offset) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint64_t z = (i + offset + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float u = float(z >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    p[i] = __float2bfloat16_rn((2.0f * u - 1.0f) * scale);
  }
}

double bf(uint16_t v) { return double(kernels::gemm::bf16_to_float(v)); }

// Regenerates n values of (what, rank) from element `offset` on this GPU and copies them to the host.
Status regenerate(const MoeConfig& c, MoeInput what, int rank, size_t offset, size_t n, std::vector<uint16_t>* out) {
  struct Scratch {
    void* p = nullptr;
    ~Scratch() { cudaFree(p); }
  } d;
  KOSMOS_CUDA_CHECK(cudaMalloc(&d.p, n * 2));
  KOSMOS_RETURN_IF_ERROR(fill_moe_input(d.p, n, what, rank, offset, c, nullptr));
  KOSMOS_CUDA_CHECK(cudaDeviceSynchronize());
  return download(d.p, n, 0, out);
}

}  // namespace

MoeRouting make_moe_routing(int W, int64_t T, int E, int k, const std::string& kind) {
  std::mt19937_64 rng(7);
  std::vector<double> p(E, 1.0);
  if (kind == "skewed")
    for (int e = 0; e < E; ++e) p[e] = e < std::max(1, E / 2) ? 1.0 / (e + 1) : 0.0;
  std::discrete_distribution<int> pick(p.begin(), p.end());
  std::uniform_real_distribution<float> uw(0.05f, 1.0f);
  std::vector<int32_t> order(static_cast<size_t>(E));
  for (int e = 0; e < E; ++e) order[size_t(e)] = e;
  if (kind == "balanced") std::shuffle(order.begin(), order.end(), rng);  // the other kinds' sequence unchanged
  MoeRouting r;
  r.rows_per_rank.assign(size_t(W), 0);
  for (int rank = 0; rank < W; ++rank) {
    std::vector<int32_t> ids(size_t(T) * k);
    std::vector<float> w(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      if (kind == "balanced") {
        // Entry i -> expert (rank offset + i) mod E through a fixed shuffle of the experts: every
        // expert gets T k / E entries (+-1), distinct experts per token while k <= E.
        ids[i] = order[size_t((int64_t(rank) * 7919 + int64_t(i)) % E)];
        w[i] = uw(rng);
        r.rows_per_rank[size_t(ids[i] / (E / W))]++;
        continue;
      }
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
      r.rows_per_rank[size_t(e / (E / W))]++;
    }
    r.ids.push_back(std::move(ids));
    r.weights.push_back(std::move(w));
  }
  return r;
}

uint64_t moe_input_seed(MoeInput what, int rank) {
  switch (what) {
    case MoeInput::kX: return 101 + uint64_t(rank);
    case MoeInput::kGateUp: return 202 + uint64_t(rank);
    case MoeInput::kDown: return 303 + uint64_t(rank);
    case MoeInput::kDy: return 404 + uint64_t(rank);
  }
  return 0;
}

float moe_input_scale(MoeInput what, const MoeConfig& c) {
  switch (what) {
    case MoeInput::kGateUp: return 2.0f / std::sqrt(float(c.hidden));
    case MoeInput::kDown: return 2.0f / std::sqrt(float(c.intermediate));
    default: return 1.0f;
  }
}

Status fill_moe_input(void* p, size_t n, MoeInput what, int rank, size_t offset, const MoeConfig& c, cudaStream_t s) {
  fill_bf16<<<1024, 256, 0, s>>>(static_cast<__nv_bfloat16*>(p), n, moe_input_seed(what, rank), moe_input_scale(what, c), offset);
  KOSMOS_CUDA_CHECK(cudaGetLastError());
  return Status::ok();
}

Status fill_moe_rank_inputs(const MoeLayer& L, int r, const MoeRouting& routing, cudaStream_t s) {
  const MoeConfig& c = L.config();
  KOSMOS_RETURN_IF_ERROR(fill_moe_input(L.buffer(MoeBuffer::kX, r), size_t(c.tokens * c.hidden), MoeInput::kX, r, 0, c, s));
  KOSMOS_RETURN_IF_ERROR(
      fill_moe_input(L.buffer(MoeBuffer::kGateUp, r), L.buffer_bytes(MoeBuffer::kGateUp) / 2, MoeInput::kGateUp, r, 0, c, s));
  KOSMOS_RETURN_IF_ERROR(fill_moe_input(L.buffer(MoeBuffer::kDown, r), L.buffer_bytes(MoeBuffer::kDown) / 2, MoeInput::kDown, r, 0, c, s));
  if (c.backward)
    KOSMOS_RETURN_IF_ERROR(fill_moe_input(L.buffer(MoeBuffer::kDy, r), size_t(c.tokens * c.hidden), MoeInput::kDy, r, 0, c, s));
  KOSMOS_CUDA_CHECK(cudaMemcpyAsync(L.buffer(MoeBuffer::kIds, r), routing.ids[size_t(r)].data(), routing.ids[size_t(r)].size() * 4,
                                    cudaMemcpyHostToDevice, s));
  KOSMOS_CUDA_CHECK(cudaMemcpyAsync(L.buffer(MoeBuffer::kWeights, r), routing.weights[size_t(r)].data(),
                                    routing.weights[size_t(r)].size() * 4, cudaMemcpyHostToDevice, s));
  KOSMOS_CUDA_CHECK(cudaStreamSynchronize(s));  // the routing's host memory may go away
  return Status::ok();
}

MoeRefSource moe_ref_from_layer(const MoeLayer& L, int rank) {
  MoeRefSource src;
  src.token_row = [&L, rank](MoeInput what, int64_t t, std::vector<uint16_t>* row) {
    const int64_t H = L.config().hidden;
    return download(L.buffer(what == MoeInput::kDy ? MoeBuffer::kDy : MoeBuffer::kX, rank), size_t(H), size_t(t * H), row);
  };
  src.expert = [&L](int e, std::vector<uint16_t>* gu, std::vector<uint16_t>* dn) {
    const MoeConfig& c = L.config();
    const int64_t H = c.hidden, I = c.intermediate, Lx = c.num_experts / c.world;
    KOSMOS_RETURN_IF_ERROR(download(L.buffer(MoeBuffer::kGateUp, int(e / Lx)), size_t(H * 2 * I), size_t((e % Lx) * H * 2 * I), gu));
    return download(L.buffer(MoeBuffer::kDown, int(e / Lx)), size_t(I * H), size_t((e % Lx) * I * H), dn);
  };
  return src;
}

MoeRefSource moe_ref_regenerated(const MoeConfig& c, int rank) {
  MoeRefSource src;
  src.token_row = [c, rank](MoeInput what, int64_t t, std::vector<uint16_t>* row) {
    return regenerate(c, what, rank, size_t(t * c.hidden), size_t(c.hidden), row);
  };
  src.expert = [c](int e, std::vector<uint16_t>* gu, std::vector<uint16_t>* dn) {
    const int64_t H = c.hidden, I = c.intermediate, Lx = c.num_experts / c.world;
    const int owner = int(e / Lx);
    KOSMOS_RETURN_IF_ERROR(regenerate(c, MoeInput::kGateUp, owner, size_t((e % Lx) * H * 2 * I), size_t(H * 2 * I), gu));
    return regenerate(c, MoeInput::kDown, owner, size_t((e % Lx) * I * H), size_t(I * H), dn);
  };
  return src;
}

Status moe_reference_token(const MoeConfig& c, const MoeRefSource& src, int64_t t, const std::vector<int32_t>& ids,
                           const std::vector<float>& w, std::vector<double>* y) {
  const int64_t H = c.hidden, I = c.intermediate;
  std::vector<uint16_t> x, gu, dn;
  KOSMOS_RETURN_IF_ERROR(src.token_row(MoeInput::kX, t, &x));
  y->assign(size_t(H), 0.0);
  for (int j = 0; j < c.top_k; ++j) {
    const int e = ids[t * c.top_k + j];
    if (e < 0 || e >= c.num_experts) continue;  // a dropped slot adds nothing
    KOSMOS_RETURN_IF_ERROR(src.expert(e, &gu, &dn));
    std::vector<double> acc(size_t(2 * I), 0.0);
    for (int64_t h = 0; h < H; ++h) {
      const double xv = bf(x[h]);
      for (int64_t n = 0; n < 2 * I; ++n) acc[n] += xv * bf(gu[h * 2 * I + n]);
    }
    for (int64_t i = 0; i < I; ++i) {
      const double g = acc[16 * (i / 8) + i % 8], u = acc[16 * (i / 8) + 8 + i % 8];
      const double a = g / (1.0 + std::exp(-g)) * u * w[t * c.top_k + j];
      for (int64_t h = 0; h < H; ++h) (*y)[h] += a * bf(dn[i * H + h]);
    }
  }
  return Status::ok();
}

Status moe_reference_token_backward(const MoeConfig& c, const MoeRefSource& src, int64_t t, const std::vector<int32_t>& ids,
                                    const std::vector<float>& w, std::vector<double>* dx, std::vector<double>* dw) {
  const int64_t H = c.hidden, I = c.intermediate;
  std::vector<uint16_t> x, dy, gu, dn;
  KOSMOS_RETURN_IF_ERROR(src.token_row(MoeInput::kX, t, &x));
  KOSMOS_RETURN_IF_ERROR(src.token_row(MoeInput::kDy, t, &dy));
  dx->assign(size_t(H), 0.0);
  dw->assign(size_t(c.top_k), 0.0);
  for (int j = 0; j < c.top_k; ++j) {
    const int e = ids[t * c.top_k + j];
    if (e < 0 || e >= c.num_experts) continue;
    KOSMOS_RETURN_IF_ERROR(src.expert(e, &gu, &dn));
    std::vector<double> acc(size_t(2 * I), 0.0), dh(size_t(2 * I), 0.0);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t n = 0; n < 2 * I; ++n) acc[n] += bf(x[h]) * bf(gu[h * 2 * I + n]);
    for (int64_t i = 0; i < I; ++i) {
      const int64_t gc = 16 * (i / 8) + i % 8;  // interleaved gate column; up = gc + 8
      const double g = acc[gc], u = acc[gc + 8], sg = 1.0 / (1.0 + std::exp(-g));
      double da = 0.0;
      for (int64_t h = 0; h < H; ++h) da += bf(dn[i * H + h]) * bf(dy[h]);
      (*dw)[j] += da * g * sg * u;
      const double dA = w[t * c.top_k + j] * da;
      dh[gc] = dA * u * sg * (1.0 + g * (1.0 - sg));
      dh[gc + 8] = dA * g * sg;
    }
    for (int64_t h = 0; h < H; ++h)
      for (int64_t n = 0; n < 2 * I; ++n) (*dx)[h] += dh[n] * bf(gu[h * 2 * I + n]);
  }
  return Status::ok();
}

Status moe_reference_error(const MoeConfig& c, const MoeRefSource& src, const std::vector<int32_t>& ids,
                           const std::vector<float>& w, const uint16_t* y, double* rel) {
  const int64_t T = c.tokens, H = c.hidden;
  double num = 0, den = 0;
  for (int64_t t : {int64_t(0), T / 2, T - 1}) {
    std::vector<double> ref;
    KOSMOS_RETURN_IF_ERROR(moe_reference_token(c, src, t, ids, w, &ref));
    for (int64_t h = 0; h < H; ++h) {
      const double v = bf(y[t * H + h]);
      if (!std::isfinite(v)) {
        *rel = INFINITY;
        return Status::ok();
      }
      num += (v - ref[h]) * (v - ref[h]);
      den += ref[h] * ref[h];
    }
  }
  *rel = std::sqrt(num / std::max(den, 1e-30));
  return Status::ok();
}

Status moe_reference_error_backward(const MoeConfig& c, const MoeRefSource& src, const std::vector<int32_t>& ids,
                                    const std::vector<float>& w, const uint16_t* dx, const float* dw, double* rel) {
  const int64_t T = c.tokens, H = c.hidden;
  const int k = c.top_k;
  double num = 0, den = 0;
  for (int64_t t : {int64_t(0), T / 2, T - 1}) {
    std::vector<double> rdx, rdw;
    KOSMOS_RETURN_IF_ERROR(moe_reference_token_backward(c, src, t, ids, w, &rdx, &rdw));
    for (int64_t h = 0; h < H; ++h) {
      const double v = bf(dx[t * H + h]);
      num += (v - rdx[h]) * (v - rdx[h]);
      den += rdx[h] * rdx[h];
    }
    for (int j = 0; j < k; ++j) {
      num += (dw[t * k + j] - rdw[j]) * (dw[t * k + j] - rdw[j]);
      den += rdw[j] * rdw[j];
    }
  }
  *rel = std::isfinite(num) ? std::sqrt(num / std::max(den, 1e-30)) : INFINITY;
  return Status::ok();
}

void poison_on(cudaStream_t s, void* p, size_t bytes) {
  if (cudaMemsetAsync(p, 0xFF, bytes, s) != cudaSuccess) throw Error(Status(StatusCode::kCudaError, "poison"));
}

std::string non_finite_bf16(const uint16_t* v, size_t n, int64_t cols) {
  size_t bad = 0, first = 0;
  for (size_t e = 0; e < n; ++e)
    if (!std::isfinite(kernels::gemm::bf16_to_float(v[e])) && bad++ == 0) first = e;
  if (bad == 0) return "";
  char raw[8];
  std::snprintf(raw, sizeof raw, "%04x", v[first]);
  return std::to_string(bad) + " elements, first at row " + std::to_string(first / size_t(cols)) + " col " +
         std::to_string(first % size_t(cols)) + " (raw 0x" + raw + ")";
}

namespace {
// Every rank's routed rows, W T k (no dropping).
double moe_routed_rows(const MoeConfig& c) {
  return double(c.world) * double(c.tokens) * double(c.top_k);
}
// Every routed row through gate_up (H x 2I) and down (I x H).
double moe_gate_up_flops(const MoeConfig& c) {
  return 2.0 * moe_routed_rows(c) * double(c.hidden) * 2.0 * double(c.intermediate);
}
double moe_down_flops(const MoeConfig& c) { return moe_gate_up_flops(c) / 2.0; }
}  // namespace

// Each GEMM label's useful FLOPs in `layer`'s plan of one direction: the layer's FLOPs per routed row
// (MoeLayer::gemm_flops_per_row, where the problems are named) times every rank's T k rows.
std::map<std::string, double> moe_gemm_label_flops(const MoeLayer& layer, bool backward) {
  const double rows = moe_routed_rows(layer.config());
  std::map<std::string, double> out;
  for (const auto& [label, per_row] : layer.gemm_flops_per_row(backward)) out[label] = per_row * rows;
  return out;
}

Status trace_moe_run(MoeLayer& L, bool backward, const std::string& title, const std::string& svg_path, cudaStream_t s,
                     bool all_ranks) {
  int dev = 0, sms = 0;
  KOSMOS_CUDA_CHECK(cudaGetDevice(&dev));
  KOSMOS_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const std::vector<std::string>& phases = L.phase_names(backward);
  const std::map<std::string, double> flops =
      all_ranks ? moe_gemm_label_flops(L, backward) : std::map<std::string, double>{};
  std::vector<runtime::TraceRecord> tr;
  std::string csv;
  // The fused runner's last run, then each unfused launch's last run: breakdown and CSV rows.
  auto report_fused = [&](const char* what, int launch) -> Status {
    KOSMOS_RETURN_IF_ERROR(L.read_trace(&tr, backward));
    std::printf("  %s:\n%s", what, trace_breakdown(tr, L.task_labels(backward), sms, &flops).c_str());
    csv += trace_csv(tr, L.task_labels(backward), launch, csv.empty());
    return Status::ok();
  };
  auto report_unfused = [&](const char* what, int first_launch) -> Status {
    for (size_t i = 0; i < phases.size(); ++i) {
      KOSMOS_RETURN_IF_ERROR(L.read_phase_trace(i, &tr, backward));
      std::printf("  %s %zu (%s):\n%s", what, i + 1, phases[i].c_str(),
                  trace_breakdown(tr, L.phase_task_labels(i, backward), sms, &flops).c_str());
      csv += trace_csv(tr, L.phase_task_labels(i, backward), first_launch + int(i), false);
    }
    return Status::ok();
  };
  // First what the timed runs left (every run records its trace), under the timing's alternation --
  // the card's clock then has the same history for both, which the runs below (after this host
  // work) need not have. CSV launches 100+.
  KOSMOS_RETURN_IF_ERROR(report_fused("the last timed fused run", 100));
  KOSMOS_RETURN_IF_ERROR(report_unfused("the last timed run of unfused launch", 101));
  // Then one more fused run for the SVG (CSV launch 0) and the unfused composition once more right
  // after it (CSV launches 1..): the same tiles in their own launches. The SVG is written after both.
  KOSMOS_RETURN_IF_ERROR(backward ? L.run_backward_composition(true, s) : L.run_composition(true, s));
  KOSMOS_RETURN_IF_ERROR(L.finish(s));
  KOSMOS_RETURN_IF_ERROR(report_fused("one more fused run", 0));
  const std::vector<runtime::TraceRecord> fused_records = tr;
  KOSMOS_RETURN_IF_ERROR(backward ? L.run_backward_composition(false, s) : L.run_composition(false, s));
  KOSMOS_RETURN_IF_ERROR(L.finish(s));
  KOSMOS_RETURN_IF_ERROR(report_unfused("unfused launch", 1));
  KOSMOS_RETURN_IF_ERROR(runtime::write_trace_files(fused_records, title, "", svg_path));
  std::ofstream f(svg_path + ".csv");
  KOSMOS_CHECK(f.good(), "trace: cannot write '", svg_path, ".csv'");
  f << csv;
  return Status::ok();
}

void put_moe_shape(nlohmann::json& j, const std::string& model, const std::string& routing, const MoeConfig& c) {
  j["model"] = model;
  j["world"] = c.world;
  j["tokens"] = c.tokens;
  j["hidden"] = c.hidden;
  j["intermediate"] = c.intermediate;
  j["experts"] = c.num_experts;
  j["top_k"] = c.top_k;
  j["routing"] = routing;
}

double moe_forward_flops(const MoeConfig& c) { return moe_gate_up_flops(c) + moe_down_flops(c); }

double moe_backward_flops(const MoeConfig& c) {
  return 2.0 * moe_forward_flops(c) + (c.save_activations ? 0.0 : moe_gate_up_flops(c));
}

}  // namespace kosmos::cli
