// Device bodies of the MoE task kinds (route, offsets, dispatch, combine); math and buffers in
// moe_tasks.h. Called by ALL threads of the CTA (the op kernel: 384 threads = 12 warps) with the
// runtime's guarantees: the task's waits were acquired before the call, and after return the
// runtime does __syncthreads + fence + release-add of the task's signals (so plain stores here,
// local or to a peer's buffer, are published by the signal).
//
//   route    one CTA per (source rank, chunk of the entries, stage). Shared memory (the op kernel's
//            dynamic smem): hist[12][E] int32 (12 KB at E = 256). 12 warps take contiguous entry
//            ranges of the chunk; pass 1 counts per warp (the count stage stores the sum and
//            stops), a column prefix over warps on top of the earlier chunks' counts gives each
//            warp its base per expert, pass 2 walks the range again in 32-entry batches and ranks
//            equal experts inside a batch with __match_any_sync: stable (t-major, then j) without
//            a sort. Chunk 0 of the rank stage writes cnt, start and pushes the counts.
//   offsets  one CTA per rank; E <= 256 experts, thread 0 does the per-owner prefix (E steps).
//   dispatch one warp per received row, 16-byte vectors (H % 8 == 0).
//   combine  one warp per token: lanes 0..k-1 resolve the k source rows, every lane sums 8
//            columns at a time over j = 0..k-1 in order (fp32), stores bf16. Backward: the same
//            into dx, and lanes 0..k-1 gather the router-weight gradients.
//   swiglu_backward  thread 0 maps the task's slots to row ranges (smem: 3 x 64 + 1 int32), then one
//            warp per row, 8 columns per lane step; padding rows get zeros.
#pragma once

#include <cuda_bf16.h>

#include "kernels/gemm/gemm_params.h"
#include "kernels/moe_tasks.h"
#include "runtime/persistent_kernel.cuh"

namespace kosmos::kernels {

namespace moe_detail {


__device__ __forceinline__ void route(const plan::Task& t, const MoeArgs& a, const runtime::TaskContext& ctx, char* smem,
                                      int num_threads) {
  const uint32_t s = t.rank, E = a.num_experts, N = a.tokens * a.top_k;
  const uint32_t chunk = a.a & 0xFFFFu, chunks = max(1u, a.a >> 16);
  const bool count_stage = chunks > 1 && a.b != kMoeRouteStageRank;
  const int warp_idx = ctx.thread_idx / 32, lane_idx = ctx.thread_idx % 32, num_warps = num_threads / 32;
  const int32_t* ids = static_cast<const int32_t*>(ctx.buffer(kMoeIds, s));
  int32_t* route = static_cast<int32_t*>(ctx.buffer(kMoeRoute, s));
  int32_t *cnt = route, *start = route + E, *pos = route + 2 * E, *perm = route + 2 * E + N;
  int32_t* chunk_cnt = route + 2 * E + 2 * N;                 // [chunks][E]
  int32_t* hist = reinterpret_cast<int32_t*>(smem);           // [num_warps][E]
  int32_t* s_start = hist + size_t(num_warps) * E;             // [E]
  for (uint32_t i = ctx.thread_idx; i < uint32_t(num_warps) * E; i += num_threads) hist[i] = 0;
  __syncthreads();
  const uint32_t per_chunk = (N + chunks - 1) / chunks;
  const uint32_t c_lo = min(N, per_chunk * chunk), c_n = min(N, c_lo + per_chunk) - c_lo;
  const uint32_t per = (c_n + num_warps - 1) / num_warps;
  const uint32_t lo = c_lo + min(c_n, per * warp_idx), hi = c_lo + min(c_n, per * warp_idx + per);
  int32_t* my = hist + size_t(warp_idx) * E;
  // Both passes read the warp's ids kRouteAhead batches of 32 at a time: the loads of a group are in
  // flight together instead of one L2 round trip per batch (pass 2's __syncwarp keeps the compiler
  // from hoisting them; one batch at a time the route task took 93 us at T k = 32768, with the
  // other 131 SMs idle: thirteenth session's trace).
  constexpr int kRouteAhead = 8;
  // This lane's ids of batches b0, b0 + 32, ... (kRouteAhead of them); -1 past the warp's range or
  // for a dropped slot (id outside [0, E)).
  auto load_batches = [&](uint32_t b0, int32_t (&ev)[kRouteAhead]) {
#pragma unroll
    for (int u = 0; u < kRouteAhead; ++u) {
      const uint32_t i = b0 + 32 * u + lane_idx;
      const int32_t e = i < hi ? __ldg(ids + i) : -1;
      ev[u] = (e >= 0 && uint32_t(e) < E) ? e : -1;
    }
  };
  for (uint32_t b0 = lo; b0 < hi; b0 += 32 * kRouteAhead) {
    int32_t ev[kRouteAhead];
    load_batches(b0, ev);
#pragma unroll
    for (int u = 0; u < kRouteAhead; ++u)
      if (ev[u] >= 0) atomicAdd(my + ev[u], 1);
  }
  __syncthreads();
  if (count_stage) {  // count(s, c): the chunk's per-expert counts, for every rank(s, c')
    for (uint32_t e = ctx.thread_idx; e < E; e += num_threads) {
      int32_t run = 0;
      for (int w = 0; w < num_warps; ++w) run += hist[size_t(w) * E + e];
      chunk_cnt[size_t(chunk) * E + e] = run;
    }
    return;
  }
  // Each warp's base per expert: the entries of earlier chunks (written by other CTAs' counts,
  // acquired by this task's wait: read past L1), then of earlier warps of this chunk.
  for (uint32_t e = ctx.thread_idx; e < E; e += num_threads) {
    int32_t run = 0, total = 0;
    if (chunks > 1)
      for (uint32_t c = 0; c < chunks; ++c) {
        const int32_t v = __ldcg(chunk_cnt + size_t(c) * E + e);
        if (c < chunk) run += v;
        total += v;
      }
    for (int w = 0; w < num_warps; ++w) {
      const int32_t v = hist[size_t(w) * E + e];
      hist[size_t(w) * E + e] = run;
      run += v;
    }
    if (chunks == 1) total = run;
    if (chunk == 0) cnt[e] = total;
    s_start[e] = total;  // temporarily the count
  }
  __syncthreads();
  if (warp_idx == 0) {  // exclusive prefix over E <= 256 experts: 8 per lane, then a warp scan
    int32_t v[8], local = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint32_t e = lane_idx * 8 + j;
      v[j] = e < E ? s_start[e] : 0;
      local += v[j];
    }
    int32_t incl = local;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int32_t n = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane_idx >= o) incl += n;
    }
    int32_t run = incl - local;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint32_t e = lane_idx * 8 + j;
      if (e < E) {
        s_start[e] = run;
        if (chunk == 0) start[e] = run;
      }
      run += v[j];
    }
  }
  __syncthreads();
  const unsigned lt = (1u << lane_idx) - 1u;
  for (uint32_t b0 = lo; b0 < hi; b0 += 32 * kRouteAhead) {
    int32_t ev[kRouteAhead];
    load_batches(b0, ev);
#pragma unroll
    for (int u = 0; u < kRouteAhead; ++u) {  // the batches in order, as one at a time: same ranks
      const uint32_t i = b0 + 32 * u + lane_idx;
      const int32_t e = ev[u];
      const unsigned same = __match_any_sync(0xffffffffu, e);
      if (e >= 0) {
        const int32_t p = my[e] + __popc(same & lt);
        pos[i] = p;
        perm[s_start[e] + p] = int32_t(i);
      } else if (i < hi) {
        pos[i] = -1;
      }
      __syncwarp();
      if (e >= 0 && (same & lt) == 0) my[e] += __popc(same);  // the lowest lane of each expert
      __syncwarp();
    }
  }
  if (chunk != 0) return;
  __syncthreads();
  for (uint32_t i = ctx.thread_idx; i < a.world * E; i += num_threads) {
    const uint32_t r = i / E, e = i % E;
    static_cast<int32_t*>(ctx.buffer(kMoeCounts, r))[size_t(s) * E + e] = cnt[e];
  }
}

__device__ __forceinline__ void offsets(const plan::Task& t, const MoeArgs& a, const runtime::TaskContext& ctx, char* smem,
                                        int num_threads) {
  const uint32_t r = t.rank, E = a.num_experts, L = a.local_experts, W = a.world;
  const int32_t* counts = static_cast<const int32_t*>(ctx.buffer(kMoeCounts, r));
  int32_t* layout = static_cast<int32_t*>(ctx.buffer(kMoeLayout, r));
  int32_t *group_m = layout, *group_offset = layout + L, *send_off = layout + 2 * L;
  int32_t* s_total = reinterpret_cast<int32_t*>(smem);  // [E]
  int32_t* s_before = s_total + E;                       // [E]
  int32_t* s_base = s_before + E;                        // [E]
  for (uint32_t e = ctx.thread_idx; e < E; e += num_threads) {
    int32_t total = 0, before = 0;
    for (uint32_t s = 0; s < W; ++s) {
      const int32_t c = __ldcg(counts + size_t(s) * E + e);
      total += c;
      if (s < r) before += c;
    }
    s_total[e] = total;
    s_before[e] = before;
  }
  __syncthreads();
  if (ctx.thread_idx == 0) {  // prefix per owner (E <= 256 shared-memory steps)
    const int32_t align = (a.flags & (kMoeFlagBackward | kMoeFlagPadRows)) ? kMoeRowAlign : 1;
    int32_t base = 0;
    for (uint32_t e = 0; e < E; ++e) {
      if (e % L == 0) base = 0;
      s_base[e] = base;
      base += (s_total[e] + align - 1) / align * align;
    }
  }
  __syncthreads();
  for (uint32_t e = ctx.thread_idx; e < E; e += num_threads) {
    if (e / L == r) {
      group_m[e % L] = s_total[e];
      group_offset[e % L] = s_base[e];
    }
    send_off[e] = s_base[e] + s_before[e];
  }
}

__device__ __forceinline__ void dispatch(const plan::Task& t, const MoeArgs& a, const runtime::TaskContext& ctx,
                                         int num_threads) {
  const uint32_t s = t.rank, d = a.a & 0xFFFFu, E = a.num_experts, H = a.hidden, N = a.tokens * a.top_k;
  const int warp_idx = ctx.thread_idx / 32, lane_idx = ctx.thread_idx % 32, num_warps = num_threads / 32;
  const int32_t* route = static_cast<const int32_t*>(ctx.buffer(kMoeRoute, s));
  const int32_t *cnt = route, *start = route + E, *perm = route + 2 * E + N;
  const int32_t* send_off = static_cast<const int32_t*>(ctx.buffer(kMoeLayout, s)) + 2 * a.local_experts;
  const uint4* x = static_cast<const uint4*>(ctx.buffer(kMoeX, s));
  const float* w = static_cast<const float*>(ctx.buffer(kMoeWeights, s));
  uint4* recv_x = static_cast<uint4*>(ctx.buffer(kMoeRecvX, d));
  float* recv_w = static_cast<float*>(ctx.buffer(kMoeRecvW, d));
  const bool backward = (a.flags & kMoeFlagBackward) != 0;
  const uint4* dy = backward ? static_cast<const uint4*>(ctx.buffer(kMoeDy, s)) : nullptr;
  uint4* recv_dy = backward ? static_cast<uint4*>(ctx.buffer(kMoeRecvDy, d)) : nullptr;
  // kMoeFlagDyOnly: x rows and weights are where the forward left them; only dy moves.
  const bool dy_only = backward && (a.flags & kMoeFlagDyOnly) != 0;
  const uint4* src_rows = dy_only ? dy : x;
  uint4* dst_rows = dy_only ? recv_dy : recv_x;
  const uint32_t vecs = H / 8;
  // Rows i of the experts [b, c) with i % num_slices == slice, one warp per row.
  const int32_t slice = int32_t((a.a >> 16) & 0xFFu), num_slices = int32_t(max(1u, a.a >> 24));
  int32_t row_base = 0;  // rows of this task before expert e (balances warps across experts)
  for (uint32_t e = a.b; e < a.c; ++e) {
    const int32_t n = __ldcg(cnt + e), first = __ldcg(start + e), off = __ldcg(send_off + e);
    const int32_t mine = n > slice ? (n - slice + num_slices - 1) / num_slices : 0;
    for (int32_t m = (warp_idx - row_base % num_warps + num_warps) % num_warps; m < mine; m += num_warps) {
      const int32_t i = slice + m * num_slices;
      const int32_t entry = __ldcg(perm + first + i);
      const uint4* src = src_rows + size_t(entry / a.top_k) * vecs;
      uint4* dst = dst_rows + size_t(off + i) * vecs;
      uint32_t v = lane_idx;
      for (; v + 96 < vecs; v += 128) {
        const uint4 v0 = src[v], v1 = src[v + 32], v2 = src[v + 64], v3 = src[v + 96];
        dst[v] = v0;
        dst[v + 32] = v1;
        dst[v + 64] = v2;
        dst[v + 96] = v3;
      }
      for (; v < vecs; v += 32) dst[v] = src[v];
      if (dy_only) continue;
      if (backward) {
        const uint4* src_dy = dy + size_t(entry / a.top_k) * vecs;
        uint4* dst_dy = recv_dy + size_t(off + i) * vecs;
        for (uint32_t u = lane_idx; u < vecs; u += 32) dst_dy[u] = src_dy[u];
      }
      if (lane_idx == 0) recv_w[off + i] = w[entry];
    }
    row_base += mine;
  }
}

__device__ __forceinline__ void combine(const plan::Task& t, const MoeArgs& a, const runtime::TaskContext& ctx,
                                        int num_threads) {
  const uint32_t s = t.rank, E = a.num_experts, H = a.hidden, k = a.top_k;
  const int warp_idx = ctx.thread_idx / 32, lane_idx = ctx.thread_idx % 32, num_warps = num_threads / 32;
  const int32_t* ids = static_cast<const int32_t*>(ctx.buffer(kMoeIds, s));
  const int32_t* pos = static_cast<const int32_t*>(ctx.buffer(kMoeRoute, s)) + 2 * E;
  const int32_t* send_off = static_cast<const int32_t*>(ctx.buffer(kMoeLayout, s)) + 2 * a.local_experts;
  const bool backward = (a.flags & kMoeFlagBackward) != 0;
  uint4* y = static_cast<uint4*>(ctx.buffer(backward ? kMoeDx : kMoeY, s));
  float* dw = backward ? static_cast<float*>(ctx.buffer(kMoeDWeights, s)) : nullptr;
  const uint32_t vecs = H / 8;
  for (uint32_t tok = a.b + warp_idx; tok < a.c; tok += num_warps) {
    const uint4* row = nullptr;  // lane j < k: source row of slot j (nullptr: dropped)
    if (uint32_t(lane_idx) < k) {
      const uint32_t i = tok * k + lane_idx;
      const int32_t p = __ldcg(pos + i);
      float dwv = 0.0f;
      if (p >= 0) {
        const int32_t e = __ldcg(ids + i);
        const uint32_t d = uint32_t(e) / a.local_experts;
        const int32_t src_row = __ldcg(send_off + e) + p;
        row = static_cast<const uint4*>(ctx.buffer(kMoeOut, d)) + size_t(src_row) * vecs;
        if (backward) dwv = __ldcg(static_cast<const float*>(ctx.buffer(kMoeRecvDw, d)) + src_row);
      }
      if (backward) dw[i] = dwv;
    }
    const uint4* rows[kMaxTopK];
#pragma unroll
    for (uint32_t j = 0; j < kMaxTopK; ++j)
      rows[j] = reinterpret_cast<const uint4*>(
          __shfl_sync(0xffffffffu, static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(row)), j));
    for (uint32_t v = lane_idx; v < vecs; v += 32) {
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
      for (uint32_t j = 0; j < kMaxTopK; ++j) {
        if (j >= k || rows[j] == nullptr) continue;
        const uint4 raw = __ldcg(rows[j] + v);
        const __nv_bfloat16* b = reinterpret_cast<const __nv_bfloat16*>(&raw);
#pragma unroll
        for (int q = 0; q < 8; ++q) acc[q] += __bfloat162float(b[q]);
      }
      uint4 out;
      __nv_bfloat16* o = reinterpret_cast<__nv_bfloat16*>(&out);
#pragma unroll
      for (int q = 0; q < 8; ++q) o[q] = __float2bfloat16_rn(acc[q]);
      y[size_t(tok) * vecs + v] = out;
    }
  }
}

// SwiGLU backward of the rows of slots [a.a, a.a + a.b) (see moe_tasks.h). Thread 0 maps the
// slots to row ranges (shared memory: 3 x kMoeSlotsPerTaskMax + 1 int32), then one warp per row; a
// lane handles blocks of 8 output columns (gate block, up block of h1: two 16-byte loads).
// The dot product <dA', act> is a per-lane fp32 sum in column order followed by a fixed xor tree:
// deterministic.
__device__ __forceinline__ void swiglu_backward(const plan::Task& t, const MoeArgs& a, const runtime::TaskContext& ctx,
                                                char* smem, int num_threads) {
  const uint32_t d = t.rank, L = a.local_experts, H = a.hidden, I = a.intermediate;
  const int warp_idx = ctx.thread_idx / 32, lane_idx = ctx.thread_idx % 32, num_warps = num_threads / 32;
  const int32_t* layout = static_cast<const int32_t*>(ctx.buffer(kMoeLayout, d));
  int32_t* s_row0 = reinterpret_cast<int32_t*>(smem);          // [slots] first row
  int32_t* s_valid = s_row0 + kMoeSlotsPerTaskMax;             // [slots] rows with data
  int32_t* s_first = s_valid + kMoeSlotsPerTaskMax;            // [slots + 1] prefix of rows (valid + padding)
  const int num_slots = min(int(a.b), kMoeSlotsPerTaskMax);
  if (ctx.thread_idx == 0) {
    int32_t g = 0, blocks_before = 0, acc = 0;
    for (int i = 0; i < num_slots; ++i) {
      const int32_t slot = int32_t(a.a) + i;
      int32_t blocks = 0;
      for (; g < int32_t(L); ++g) {
        blocks = (__ldcg(layout + g) + gemm::kGemmBlockM - 1) / gemm::kGemmBlockM;
        if (slot < blocks_before + blocks) break;
        blocks_before += blocks;
      }
      s_first[i] = acc;
      if (g == int32_t(L)) {
        s_row0[i] = 0;
        s_valid[i] = 0;
        continue;
      }
      const int32_t m = __ldcg(layout + g), padded = (m + kMoeRowAlign - 1) / kMoeRowAlign * kMoeRowAlign;
      const int32_t first = (slot - blocks_before) * gemm::kGemmBlockM, last = min(first + gemm::kGemmBlockM, padded);
      s_row0[i] = __ldcg(layout + L + g) + first;
      s_valid[i] = min(last, m) - first;
      acc += last - first;
    }
    s_first[num_slots] = acc;
  }
  __syncthreads();
  const int32_t total = s_first[num_slots];
  const uint4* h1 = static_cast<const uint4*>(ctx.buffer(kMoeH1, d));
  const uint4* dap = static_cast<const uint4*>(ctx.buffer(kMoeDAct, d));
  const float* recv_w = static_cast<const float*>(ctx.buffer(kMoeRecvW, d));
  uint4* dh1 = static_cast<uint4*>(ctx.buffer(kMoeDH1, d));
  uint4* act_w = static_cast<uint4*>(ctx.buffer(kMoeAct, d));
  float* recv_dw = static_cast<float*>(ctx.buffer(kMoeRecvDw, d));
  uint4* recv_x = static_cast<uint4*>(ctx.buffer(kMoeRecvX, d));
  uint4* recv_dy = static_cast<uint4*>(ctx.buffer(kMoeRecvDy, d));
  const uint32_t iv = I / 8, hv = H / 8;  // 16-byte vectors per row of act / of x
  int i = 0;
  for (int32_t n = warp_idx; n < total; n += num_warps) {
    while (n >= s_first[i + 1]) ++i;
    const int32_t local = n - s_first[i];
    const size_t row = size_t(s_row0[i] + local);
    if (local >= s_valid[i]) {  // padding row: zeros in every operand of the grouped-K GEMMs
      const uint4 z = make_uint4(0, 0, 0, 0);
      for (uint32_t v = lane_idx; v < hv; v += 32) {
        recv_x[row * hv + v] = z;
        recv_dy[row * hv + v] = z;
      }
      for (uint32_t v = lane_idx; v < iv; v += 32) {
        act_w[row * iv + v] = z;
        dh1[row * 2 * iv + 2 * v] = z;
        dh1[row * 2 * iv + 2 * v + 1] = z;
      }
      continue;
    }
    const float w = __ldcg(recv_w + row);
    float dot = 0.0f;
    // One 16-byte vector of gate, up and dA' (8 columns) -> dH1, w·a; dot in the lane's column order.
    auto step = [&](const uint4& graw, const uint4& uraw, const uint4& draw, uint32_t v) {
      const __nv_bfloat16* gb = reinterpret_cast<const __nv_bfloat16*>(&graw);
      const __nv_bfloat16* ub = reinterpret_cast<const __nv_bfloat16*>(&uraw);
      const __nv_bfloat16* db = reinterpret_cast<const __nv_bfloat16*>(&draw);
      uint4 dg_out, du_out, aw_out;
      __nv_bfloat16* dgo = reinterpret_cast<__nv_bfloat16*>(&dg_out);
      __nv_bfloat16* duo = reinterpret_cast<__nv_bfloat16*>(&du_out);
      __nv_bfloat16* awo = reinterpret_cast<__nv_bfloat16*>(&aw_out);
#pragma unroll
      for (int q = 0; q < 8; ++q) {
        const float g = __bfloat162float(gb[q]), u = __bfloat162float(ub[q]), da = __bfloat162float(db[q]);
        const float sg = 1.0f / (1.0f + expf(-g)), silu = g * sg, act = silu * u;
        dot += da * act;
        const float dA = w * da;
        dgo[q] = __float2bfloat16_rn(dA * u * sg * (1.0f + g * (1.0f - sg)));
        duo[q] = __float2bfloat16_rn(dA * silu);
        awo[q] = __float2bfloat16_rn(w * act);
      }
      dh1[row * 2 * iv + 2 * v] = dg_out;
      dh1[row * 2 * iv + 2 * v + 1] = du_out;
      act_w[row * iv + v] = aw_out;
    };
    // Two vectors per lane per round: their six loads are in flight together (the body is bound
    // by the memory round trip, not by bandwidth).
    for (uint32_t v = lane_idx; v < iv; v += 64) {
      const uint32_t v2 = v + 32;
      const bool second = v2 < iv;
      const uint4 g0 = __ldcg(h1 + row * 2 * iv + 2 * v), u0 = __ldcg(h1 + row * 2 * iv + 2 * v + 1);
      const uint4 d0 = __ldcg(dap + row * iv + v);
      uint4 g1 = make_uint4(0, 0, 0, 0), u1 = g1, d1 = g1;
      if (second) {
        g1 = __ldcg(h1 + row * 2 * iv + 2 * v2);
        u1 = __ldcg(h1 + row * 2 * iv + 2 * v2 + 1);
        d1 = __ldcg(dap + row * iv + v2);
      }
      step(g0, u0, d0, v);
      if (second) step(g1, u1, d1, v2);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    if (lane_idx == 0) recv_dw[row] = dot;
  }
}

}  // namespace moe_detail

__device__ __forceinline__ void moe_task_device(const plan::Task& t, const runtime::TaskContext& ctx, char* smem,
                                                int num_threads) {
  const MoeArgs a = t.args<MoeArgs>();
  switch (t.kind) {
    case plan::TaskKind::kMoeRoute: moe_detail::route(t, a, ctx, smem, num_threads); break;
    case plan::TaskKind::kMoeOffsets: moe_detail::offsets(t, a, ctx, smem, num_threads); break;
    case plan::TaskKind::kMoeDispatch: moe_detail::dispatch(t, a, ctx, num_threads); break;
    case plan::TaskKind::kMoeCombine: moe_detail::combine(t, a, ctx, num_threads); break;
    case plan::TaskKind::kMoeSwigluBackward: moe_detail::swiglu_backward(t, a, ctx, smem, num_threads); break;
    default: break;
  }
}

}  // namespace kosmos::kernels
