// Host bodies of the MoE task kinds (CPU executor). Same math and same order as moe_tasks.cuh;
// see moe_tasks.h for the buffers and the definitions.
#include "kernels/moe_tasks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/gemm/bf16.h"
#include "kernels/gemm/gemm_params.h"

namespace kosmos::kernels {

namespace {

template <class T>
T* buf(MoeBufferLookup lookup, const void* ctx, uint32_t b, uint32_t rank) {
  return static_cast<T*>(lookup(ctx, b, rank));
}

void route_host(const plan::Task& t, const MoeArgs& a, MoeBufferLookup lookup, const void* ctx) {
  const uint32_t s = t.rank, E = a.num_experts, N = a.tokens * a.top_k;
  const uint32_t chunk = a.a & 0xFFFFu, chunks = std::max(1u, a.a >> 16);
  const int32_t* ids = buf<int32_t>(lookup, ctx, kMoeIds, s);
  int32_t* route = buf<int32_t>(lookup, ctx, kMoeRoute, s);
  int32_t *cnt = route, *start = route + E, *pos = route + 2 * E, *perm = route + 2 * E + N;
  int32_t* chunk_cnt = route + 2 * E + 2 * N;
  const uint32_t per_chunk = (N + chunks - 1) / chunks;
  const uint32_t lo = std::min(N, per_chunk * chunk), hi = std::min(N, lo + per_chunk);
  auto valid = [&](int32_t e) { return e >= 0 && uint32_t(e) < E; };
  if (chunks > 1 && a.b != kMoeRouteStageRank) {  // count(s, c)
    int32_t* mine = chunk_cnt + size_t(chunk) * E;
    std::fill(mine, mine + E, 0);
    for (uint32_t i = lo; i < hi; ++i)
      if (valid(ids[i])) ++mine[ids[i]];
    return;
  }
  // rank(s, c): totals and this chunk's bases from the counts of every chunk (one chunk: count here).
  std::vector<int32_t> total(E, 0), base(E, 0), first(E, 0);
  if (chunks == 1) {
    for (uint32_t i = 0; i < N; ++i)
      if (valid(ids[i])) ++total[ids[i]];
  } else {
    for (uint32_t c = 0; c < chunks; ++c)
      for (uint32_t e = 0; e < E; ++e) {
        total[e] += chunk_cnt[size_t(c) * E + e];
        if (c < chunk) base[e] += chunk_cnt[size_t(c) * E + e];
      }
  }
  for (uint32_t e = 1; e < E; ++e) first[e] = first[e - 1] + total[e - 1];
  for (uint32_t i = lo; i < hi; ++i) {
    const int32_t e = ids[i];
    pos[i] = valid(e) ? base[e]++ : -1;
    if (pos[i] >= 0) perm[first[e] + pos[i]] = int32_t(i);
  }
  if (chunk != 0) return;
  std::copy(total.begin(), total.end(), cnt);
  std::copy(first.begin(), first.end(), start);
  for (uint32_t r = 0; r < a.world; ++r) std::memcpy(buf<int32_t>(lookup, ctx, kMoeCounts, r) + size_t(s) * E, cnt, E * 4);
}

void offsets_host(const plan::Task& t, const MoeArgs& a, MoeBufferLookup lookup, const void* ctx) {
  const uint32_t r = t.rank, E = a.num_experts, L = a.local_experts, W = a.world;
  const int32_t* counts = buf<int32_t>(lookup, ctx, kMoeCounts, r);
  int32_t* layout = buf<int32_t>(lookup, ctx, kMoeLayout, r);
  int32_t *group_m = layout, *group_offset = layout + L, *send_off = layout + 2 * L;
  const int32_t align = (a.flags & (kMoeFlagBackward | kMoeFlagPadRows)) ? kMoeRowAlign : 1;
  int32_t base = 0;  // first row of expert e in its owner's receive buffer (resets per owner)
  for (uint32_t e = 0; e < E; ++e) {
    if (e % L == 0) base = 0;
    int32_t total = 0, before = 0;
    for (uint32_t s = 0; s < W; ++s) {
      const int32_t c = counts[size_t(s) * E + e];
      total += c;
      if (s < r) before += c;
    }
    if (e / L == r) {
      group_m[e % L] = total;
      group_offset[e % L] = base;
    }
    send_off[e] = base + before;
    base += (total + align - 1) / align * align;
  }
}

void dispatch_host(const plan::Task& t, const MoeArgs& a, MoeBufferLookup lookup, const void* ctx) {
  const uint32_t s = t.rank, d = a.a & 0xFFFFu, E = a.num_experts, H = a.hidden, N = a.tokens * a.top_k;
  const int32_t slice = int32_t((a.a >> 16) & 0xFFu), num_slices = int32_t(std::max(1u, a.a >> 24));
  const int32_t* route = buf<int32_t>(lookup, ctx, kMoeRoute, s);
  const int32_t *cnt = route, *start = route + E, *perm = route + 2 * E + N;
  const int32_t* send_off = buf<int32_t>(lookup, ctx, kMoeLayout, s) + 2 * a.local_experts;
  const uint16_t* x = buf<uint16_t>(lookup, ctx, kMoeX, s);
  const float* w = buf<float>(lookup, ctx, kMoeWeights, s);
  uint16_t* recv_x = buf<uint16_t>(lookup, ctx, kMoeRecvX, d);
  float* recv_w = buf<float>(lookup, ctx, kMoeRecvW, d);
  const bool backward = (a.flags & kMoeFlagBackward) != 0;
  const uint16_t* dy = backward ? buf<uint16_t>(lookup, ctx, kMoeDy, s) : nullptr;
  uint16_t* recv_dy = backward ? buf<uint16_t>(lookup, ctx, kMoeRecvDy, d) : nullptr;
  for (uint32_t e = a.b; e < a.c; ++e)
    for (int32_t i = slice; i < cnt[e]; i += num_slices) {
      const int32_t entry = perm[start[e] + i];
      const size_t row = size_t(send_off[e] + i);
      if (backward) std::memcpy(recv_dy + row * H, dy + size_t(entry / a.top_k) * H, size_t(H) * 2);
      if (backward && (a.flags & kMoeFlagDyOnly)) continue;  // x rows and weights: the forward's
      std::memcpy(recv_x + row * H, x + size_t(entry / a.top_k) * H, size_t(H) * 2);
      recv_w[row] = w[entry];
    }
}

void combine_host(const plan::Task& t, const MoeArgs& a, MoeBufferLookup lookup, const void* ctx) {
  const uint32_t s = t.rank, E = a.num_experts, H = a.hidden, k = a.top_k, N = a.tokens * k;
  const int32_t* ids = buf<int32_t>(lookup, ctx, kMoeIds, s);
  const int32_t* pos = buf<int32_t>(lookup, ctx, kMoeRoute, s) + 2 * E;
  const int32_t* send_off = buf<int32_t>(lookup, ctx, kMoeLayout, s) + 2 * a.local_experts;
  const bool backward = (a.flags & kMoeFlagBackward) != 0;
  uint16_t* y = buf<uint16_t>(lookup, ctx, backward ? kMoeDx : kMoeY, s);
  float* dw = backward ? buf<float>(lookup, ctx, kMoeDWeights, s) : nullptr;
  (void)N;
  std::vector<float> acc(H);
  for (uint32_t tok = a.b; tok < a.c; ++tok) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (uint32_t j = 0; j < k; ++j) {
      const uint32_t i = tok * k + j;
      if (backward) dw[i] = 0.0f;
      if (pos[i] < 0) continue;
      const int32_t e = ids[i];
      if (backward)
        dw[i] = buf<float>(lookup, ctx, kMoeRecvDw, uint32_t(e) / a.local_experts)[send_off[e] + pos[i]];
      const uint16_t* row = buf<uint16_t>(lookup, ctx, kMoeOut, uint32_t(e) / a.local_experts) + size_t(send_off[e] + pos[i]) * H;
      for (uint32_t h = 0; h < H; ++h) acc[h] += gemm::bf16_to_float(row[h]);
    }
    for (uint32_t h = 0; h < H; ++h) y[size_t(tok) * H + h] = gemm::float_to_bf16(acc[h]);
  }
}

// Rows [row0, row0 + rows_valid) get the SwiGLU backward, [row0 + rows_valid, row0 + rows_total)
// zeros; see moe_tasks.h.
void swiglu_backward_rows(const plan::Task& t, const MoeArgs& a, MoeBufferLookup lookup, const void* ctx, int64_t row0,
                          int64_t rows_valid, int64_t rows_total) {
  const uint32_t d = t.rank, H = a.hidden, I = a.intermediate;
  const uint16_t* h1 = buf<uint16_t>(lookup, ctx, kMoeH1, d);
  const uint16_t* dap = buf<uint16_t>(lookup, ctx, kMoeDAct, d);
  const float* recv_w = buf<float>(lookup, ctx, kMoeRecvW, d);
  uint16_t* dh1 = buf<uint16_t>(lookup, ctx, kMoeDH1, d);
  uint16_t* act_w = buf<uint16_t>(lookup, ctx, kMoeAct, d);
  float* recv_dw = buf<float>(lookup, ctx, kMoeRecvDw, d);
  for (int64_t row = row0; row < row0 + rows_valid; ++row) {
    const float w = recv_w[row];
    float dot = 0.0f;
    for (uint32_t c = 0; c < I; ++c) {
      const int64_t gc = row * 2 * I + 16 * (c / 8) + c % 8;  // gate column; up = gc + 8
      const float g = gemm::bf16_to_float(h1[gc]), u = gemm::bf16_to_float(h1[gc + 8]);
      const float da = gemm::bf16_to_float(dap[row * I + c]);
      const float sg = 1.0f / (1.0f + std::exp(-g)), silu = g * sg, act = silu * u;
      dot += da * act;
      const float dA = w * da;
      dh1[gc] = gemm::float_to_bf16(dA * u * sg * (1.0f + g * (1.0f - sg)));
      dh1[gc + 8] = gemm::float_to_bf16(dA * silu);
      act_w[row * I + c] = gemm::float_to_bf16(w * act);
    }
    recv_dw[row] = dot;
  }
  uint16_t* recv_x = buf<uint16_t>(lookup, ctx, kMoeRecvX, d);
  uint16_t* recv_dy = buf<uint16_t>(lookup, ctx, kMoeRecvDy, d);
  for (int64_t row = row0 + rows_valid; row < row0 + rows_total; ++row) {
    std::memset(recv_x + row * H, 0, size_t(H) * 2);
    std::memset(recv_dy + row * H, 0, size_t(H) * 2);
    std::memset(act_w + row * I, 0, size_t(I) * 2);
    std::memset(dh1 + row * 2 * I, 0, size_t(I) * 4);
  }
}

void swiglu_backward_host(const plan::Task& t, const MoeArgs& a, MoeBufferLookup lookup, const void* ctx) {
  const uint32_t L = a.local_experts;
  const int32_t* layout = buf<int32_t>(lookup, ctx, kMoeLayout, t.rank);
  const int32_t *group_m = layout, *group_offset = layout + L;
  for (uint32_t i = 0; i < a.b; ++i) {
    int64_t s = int64_t(a.a) + i;
    int32_t g = 0;
    for (; g < int32_t(L); ++g) {  // slot -> (group g, 128-row block s), as the grouped GEMMs map it
      const int64_t blocks = (int64_t(group_m[g]) + gemm::kGemmBlockM - 1) / gemm::kGemmBlockM;
      if (s < blocks) break;
      s -= blocks;
    }
    if (g == int32_t(L)) return;  // past the last block
    const int64_t m = group_m[g], padded = (m + kMoeRowAlign - 1) / kMoeRowAlign * kMoeRowAlign;
    const int64_t first = s * gemm::kGemmBlockM, last = std::min<int64_t>(first + gemm::kGemmBlockM, padded);
    swiglu_backward_rows(t, a, lookup, ctx, group_offset[g] + first, std::min<int64_t>(last, m) - first, last - first);
  }
}

}  // namespace

void moe_task_host(const plan::Task& t, MoeBufferLookup lookup, const void* ctx) {
  const MoeArgs a = t.args<MoeArgs>();
  switch (t.kind) {
    case plan::TaskKind::kMoeRoute: route_host(t, a, lookup, ctx); break;
    case plan::TaskKind::kMoeOffsets: offsets_host(t, a, lookup, ctx); break;
    case plan::TaskKind::kMoeDispatch: dispatch_host(t, a, lookup, ctx); break;
    case plan::TaskKind::kMoeCombine: combine_host(t, a, lookup, ctx); break;
    case plan::TaskKind::kMoeSwigluBackward: swiglu_backward_host(t, a, lookup, ctx); break;
    default: break;
  }
}

}  // namespace kosmos::kernels
