// Shared by the CPU and GPU MoE tests: routing (uniform / skewed with empty experts / dropped
// slots), inputs into a layer with poisoned outputs and workspaces, the fp64 reference.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gemm_reference.h"
#include "kosmos/moe.h"

namespace kosmos::test {

enum class Routing { kUniform, kSkewed, kSkewedWithDrops };
inline std::string routing_name(Routing r) {
  return r == Routing::kUniform ? "uniform" : r == Routing::kSkewed ? "skewed" : "drops";
}

struct MoeHost {
  MoeConfig cfg;
  std::vector<std::vector<uint16_t>> x, y, gate_up_plain, down;  // per rank
  std::vector<std::vector<int32_t>> ids;
  std::vector<std::vector<float>> w;
};

// Skewed: only the first half of the experts is ever chosen (the rest stay empty), with
// probability ~ 1 / (i + 1): expert 0 is hot. Drops: about 1 slot in 16 gets id -1 or E.
inline void make_routing(MoeHost& h, uint64_t seed, Routing routing) {
  const MoeConfig& c = h.cfg;
  const int E = c.num_experts, k = c.top_k;
  std::mt19937_64 rng(seed);
  std::vector<double> p(E, 1.0);
  if (routing != Routing::kUniform)
    for (int e = 0; e < E; ++e) p[e] = e < std::max(1, E / 2) ? 1.0 / (e + 1) : 0.0;
  std::discrete_distribution<int> pick(p.begin(), p.end());
  std::uniform_real_distribution<float> uw(0.05f, 1.0f);
  h.ids.assign(c.world, {});
  h.w.assign(c.world, {});
  for (int r = 0; r < c.world; ++r) {
    h.ids[r].resize(size_t(c.tokens) * k);
    h.w[r].resize(size_t(c.tokens) * k);
    for (size_t i = 0; i < h.ids[r].size(); ++i) {
      h.ids[r][i] = pick(rng);
      h.w[r][i] = uw(rng);
      if (routing == Routing::kSkewedWithDrops && rng() % 16 == 0) h.ids[r][i] = (rng() & 1) ? -1 : E;
    }
  }
}

inline void to_layer(const MoeConfig& c, void* dst, const void* src, size_t bytes) {
  if (c.cpu) std::memcpy(dst, src, bytes);
  else cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
}
inline void from_layer(const MoeConfig& c, void* dst, const void* src, size_t bytes) {
  if (c.cpu) std::memcpy(dst, src, bytes);
  else cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
}

// Poisons (NaN bf16 / fp32, -1 ints) the output and every workspace buffer.
inline void poison(MoeLayer& L, int only_rank = -1) {
  const MoeConfig& c = L.config();
  for (MoeBuffer b : {MoeBuffer::kY, MoeBuffer::kCounts, MoeBuffer::kRoute, MoeBuffer::kLayout, MoeBuffer::kRecvX,
                      MoeBuffer::kRecvW, MoeBuffer::kAct, MoeBuffer::kOut}) {
    const size_t bytes = L.buffer_bytes(b);
    std::vector<uint8_t> v(bytes, 0xFF);  // bf16 0xFFFF and fp32 0xFFFFFFFF are NaN, int32 is -1
    for (int r = 0; r < c.world; ++r)
      if (only_rank < 0 || r == only_rank) to_layer(c, L.buffer(b, r), v.data(), bytes);
  }
}

// Random inputs (weights of the experts of each rank), routing, into the layer; outputs poisoned.
// only_rank >= 0: a distributed layer; all ranks' data is made on the host, only that rank's written.
inline void fill_moe(MoeLayer& L, MoeHost& h, uint64_t seed, Routing routing, int only_rank = -1) {
  const MoeConfig& c = h.cfg;
  const int W = c.world, Lx = c.num_experts / c.world;
  const int64_t T = c.tokens, H = c.hidden, I = c.intermediate;
  make_routing(h, seed, routing);
  h.x.assign(W, {});
  h.gate_up_plain.assign(W, {});
  h.down.assign(W, {});
  h.y.assign(W, std::vector<uint16_t>(size_t(T) * H));
  for (int r = 0; r < W; ++r) {
    h.x[r] = random_bf16(size_t(T) * H, seed * 7 + 11 * r + 1, 1.0f);
    h.gate_up_plain[r] = random_bf16(size_t(Lx) * H * 2 * I, seed * 7 + 11 * r + 2, 1.0f / std::sqrt(float(H)) * 2);
    h.down[r] = random_bf16(size_t(Lx) * I * H, seed * 7 + 11 * r + 3, 1.0f / std::sqrt(float(I)) * 2);
    std::vector<uint16_t> inter(h.gate_up_plain[r].size());
    for (int l = 0; l < Lx; ++l)
      moe_interleave_gate_up(h.gate_up_plain[r].data() + size_t(l) * H * 2 * I, inter.data() + size_t(l) * H * 2 * I, H, I);
    if (only_rank >= 0 && r != only_rank) continue;
    to_layer(c, L.buffer(MoeBuffer::kX, r), h.x[r].data(), h.x[r].size() * 2);
    to_layer(c, L.buffer(MoeBuffer::kIds, r), h.ids[r].data(), h.ids[r].size() * 4);
    to_layer(c, L.buffer(MoeBuffer::kWeights, r), h.w[r].data(), h.w[r].size() * 4);
    to_layer(c, L.buffer(MoeBuffer::kGateUp, r), inter.data(), inter.size() * 2);
    to_layer(c, L.buffer(MoeBuffer::kDown, r), h.down[r].data(), h.down[r].size() * 2);
  }
  poison(L, only_rank);
}

inline std::vector<uint16_t> read_y(MoeLayer& L, int r) {
  std::vector<uint16_t> y(L.buffer_bytes(MoeBuffer::kY) / 2);
  from_layer(L.config(), y.data(), L.buffer(MoeBuffer::kY, r), y.size() * 2);
  return y;
}

// fp64 reference of rank r's output (no intermediate rounding).
inline std::vector<double> reference_moe(const MoeHost& h, int r) {
  const MoeConfig& c = h.cfg;
  const int Lx = c.num_experts / c.world, k = c.top_k;
  const int64_t T = c.tokens, H = c.hidden, I = c.intermediate;
  std::vector<double> y(size_t(T) * H, 0.0), g(I), u(I);
  for (int64_t t = 0; t < T; ++t)
    for (int j = 0; j < k; ++j) {
      const int e = h.ids[r][t * k + j];
      if (e < 0 || e >= c.num_experts) continue;
      const auto& gu = h.gate_up_plain[e / Lx];
      const auto& dn = h.down[e / Lx];
      const size_t gu0 = size_t(e % Lx) * H * 2 * I, dn0 = size_t(e % Lx) * I * H;
      std::fill(g.begin(), g.end(), 0.0);
      std::fill(u.begin(), u.end(), 0.0);
      for (int64_t hh = 0; hh < H; ++hh) {
        const double xv = bf16_to_float(h.x[r][t * H + hh]);
        for (int64_t i = 0; i < I; ++i) {
          g[i] += xv * bf16_to_float(gu[gu0 + hh * 2 * I + i]);
          u[i] += xv * bf16_to_float(gu[gu0 + hh * 2 * I + I + i]);
        }
      }
      const double wv = h.w[r][t * k + j];
      for (int64_t i = 0; i < I; ++i) {
        const double a = g[i] / (1.0 + std::exp(-g[i])) * u[i] * wv;
        for (int64_t hh = 0; hh < H; ++hh) y[t * H + hh] += a * bf16_to_float(dn[dn0 + i * H + hh]);
      }
    }
  return y;
}

// "" or the first rank whose output misses the reference (NaN never passes).
inline std::string check_moe(MoeLayer& L, MoeHost& h, double tol = 1e-2, int only_rank = -1) {
  for (int r = 0; r < h.cfg.world; ++r) {
    if (only_rank >= 0 && r != only_rank) continue;
    h.y[r] = read_y(L, r);
    const auto ref = reference_moe(h, r);
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      const double v = bf16_to_float(h.y[r][i]);
      if (!std::isfinite(v)) return "y of rank " + std::to_string(r) + " has a non-finite value at " + std::to_string(i);
      num += (v - ref[i]) * (v - ref[i]);
      den += ref[i] * ref[i];
    }
    const double err = std::sqrt(num / std::max(den, 1e-30));
    if (!(err < tol)) return "y of rank " + std::to_string(r) + ": relative error " + std::to_string(err);
  }
  return "";
}

inline MoeConfig moe_config(int W, int64_t T, int64_t H, int64_t I, int E, int k, bool cpu) {
  MoeConfig c;
  c.world = W;
  c.tokens = T;
  c.hidden = H;
  c.intermediate = I;
  c.num_experts = E;
  c.top_k = k;
  c.cpu = cpu;
  if (cpu) c.watchdog_seconds = 60;  // host threads on a 2-core CI machine can be slow
  return c;
}

}  // namespace kosmos::test
