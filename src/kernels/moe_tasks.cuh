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
//   dispatch one warp per received row, 16-byte vectors (H % 8 == 0), staged through the warp's two
//            8 KB shared-memory buffers by cp.async ("Staged copies" below).
//   combine  one warp per token: lanes 0..k-1 resolve the k source rows, every lane sums 8
//            columns at a time over j = 0..k-1 in order (fp32), stores bf16. Backward: the same
//            into dx, and lanes 0..k-1 gather the router-weight gradients.
//   swiglu_backward  thread 0 maps the task's slots to row ranges (smem: 3 x 64 + 1 int32), then one
//            warp per row, 8 columns per lane step, the row's h1 and dA' staged by cp.async in
//            column chunks; padding rows get zeros.
#pragma once

#include <cuda_bf16.h>

#include <cute/arch/copy_sm80.hpp>

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

// Staged copies (thirty-ninth session). Dispatch and the SwiGLU backward are bound by the memory
// round trip, not by HBM: with the vectors a lane can hold in registers (four; more spilled the op
// kernel: docs/design/moe.md, "Memory-bound bodies") a warp has ~2 KB in flight and an SM ~13 GB/s,
// half its share of HBM. So each warp stages its rows through two 8 KB shared-memory buffers of the
// op kernel's ~224 KB (idle during these tasks): every lane issues `cp.async` 16-byte copies of its
// vectors of the warp's next chunk, then works on the chunk before from shared memory, so a whole
// chunk per warp is in flight. Each lane reads back only the vectors it copied itself, so neither a
// warp barrier nor a fence is needed; cp.async is a generic-proxy operation and the results are
// ordinary stores (to a peer's buffer too), published by the runtime's release.
inline constexpr uint32_t kMoeStagingVecs = 512;                              // 16-byte vectors per buffer (8 KB)
inline constexpr uint32_t kMoeStagingBytesPerWarp = 2 * kMoeStagingVecs * 16;  // two buffers
inline constexpr uint32_t kMoeStagingOffset = 1024;  // past swiglu_backward's row maps (< 1 KB)
__host__ __device__ constexpr size_t moe_staging_bytes(int warps) {
  return kMoeStagingOffset + size_t(warps) * kMoeStagingBytesPerWarp;
}
// Buffer 0 of the warp's two; buffer 1 follows at kMoeStagingVecs.
__device__ __forceinline__ uint4* moe_staging(char* smem, int warp_idx) {
  return reinterpret_cast<uint4*>(smem + kMoeStagingOffset + size_t(warp_idx) * kMoeStagingBytesPerWarp);
}
// One 16-byte global -> shared copy (cp.async.cg: through L2 only).
__device__ __forceinline__ void stage_vec(const uint4* src, uint4* dst) {
  cute::SM80_CP_ASYNC_CACHEGLOBAL<uint4>::copy(*src, *dst);
}
// ld.shared of a staged vector (the runtime launders the smem pointer, so a plain read would be a
// generic load).
__device__ __forceinline__ uint4 staged_vec(const uint4* p) {
  uint4 r;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "r"(static_cast<uint32_t>(__cvta_generic_to_shared(p)))
               : "memory");
  return r;
}

__device__ __forceinline__ void dispatch(const plan::Task& t, const MoeArgs& a, const runtime::TaskContext& ctx, char* smem,
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
  const uint32_t chunks = (vecs + kMoeStagingVecs - 1) / kMoeStagingVecs;
  const uint32_t parts = (backward && !dy_only) ? 2 * chunks : chunks;  // a row's items: x (or dy) chunks, then dy's
  uint4* staging = moe_staging(smem, warp_idx);
  // The warp's items in order: its rows (rows i of the experts [b, c) with i % num_slices == slice,
  // one warp per row, the warps balanced across experts), each row's parts. Each step stages item j
  // into buffer j % 2 and moves item j - 1 out of the other one. Lane-uniform state.
  const int32_t slice = int32_t((a.a >> 16) & 0xFFu), num_slices = int32_t(max(1u, a.a >> 24));
  uint32_t next_e = a.b;  // the expert after the current one
  int32_t row_base = 0, m = 0, mine = 0, first = 0, off = 0;
  int32_t cur_dst = 0, nxt_src = 0, nxt_dst = 0;  // token row of the source, received row
  uint32_t cur_part = 0, nxt_part = parts - 1;  // as if at a row's last part: the first step finds row 0
  bool have = false;
#pragma unroll 1
  for (uint32_t b = 0;; b ^= 1u) {
    bool more = ++nxt_part < parts;
    if (!more) {  // the warp's next row: the current expert's m-th, else the next expert's first
      while (m >= mine && next_e < a.c) {
        row_base += mine;
        const uint32_t e = next_e++;
        const int32_t n = __ldcg(cnt + e);
        first = __ldcg(start + e);
        off = __ldcg(send_off + e);
        mine = n > slice ? (n - slice + num_slices - 1) / num_slices : 0;
        m = (warp_idx - row_base % num_warps + num_warps) % num_warps;
      }
      more = m < mine;
      if (more) {
        const int32_t i = slice + m * num_slices;
        const int32_t entry = __ldcg(perm + first + i);
        nxt_src = entry / int32_t(a.top_k);
        nxt_dst = off + i;
        nxt_part = 0;
        if (!dy_only && lane_idx == 0) recv_w[off + i] = w[entry];
        m += num_warps;
      }
    }
    if (more) {  // stage item j
      const bool second = nxt_part >= chunks;  // the backward's dy row
      const uint32_t q = (second ? nxt_part - chunks : nxt_part) * kMoeStagingVecs;
      const uint4* src = (second ? dy : src_rows) + size_t(nxt_src) * vecs + q;
      uint4* buf = staging + b * kMoeStagingVecs;
      const uint32_t n = min(kMoeStagingVecs, vecs - q);
      for (uint32_t v = lane_idx; v < n; v += 32) stage_vec(src + v, buf + v);
      cute::cp_async_fence();
    }
    if (have) {  // move item j - 1 out
      if (more) cute::cp_async_wait<1>();
      else cute::cp_async_wait<0>();
      const bool second = cur_part >= chunks;
      const uint32_t q = (second ? cur_part - chunks : cur_part) * kMoeStagingVecs;
      uint4* dst = (second ? recv_dy : dst_rows) + size_t(cur_dst) * vecs + q;
      const uint4* buf = staging + (b ^ 1u) * kMoeStagingVecs;
      const uint32_t n = min(kMoeStagingVecs, vecs - q);
      // Four reads in flight, then their stores; each pass defines all four (a guarded read would
      // leave the others live across passes: the first version spilled them, 160 B).
      uint32_t v = lane_idx;
      for (; v + 96 < n; v += 128) {
        const uint4 r0 = staged_vec(buf + v), r1 = staged_vec(buf + v + 32), r2 = staged_vec(buf + v + 64),
                    r3 = staged_vec(buf + v + 96);
        dst[v] = r0;
        dst[v + 32] = r1;
        dst[v + 64] = r2;
        dst[v + 96] = r3;
      }
      for (; v < n; v += 32) dst[v] = staged_vec(buf + v);
    }
    if (!more) return;
    cur_dst = nxt_dst;
    cur_part = nxt_part;
    have = true;
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
  // A row's act columns in nch chunks of cvecs vectors (a multiple of 32, so a lane keeps the
  // columns v = lane (mod 32) in increasing order: the dot product's order does not depend on the
  // chunking); a chunk's staging is its h1 gate / up pairs (2 cvecs vectors), then its dA' (cvecs).
  constexpr uint32_t kChunkMax = kMoeStagingVecs / 3 / 32 * 32;  // 160 vectors: 7.5 KB of staging
  const uint32_t nch = (iv + kChunkMax - 1) / kChunkMax;
  const uint32_t cvecs = ((iv + nch - 1) / nch + 31) / 32 * 32;
  uint4* staging = moe_staging(smem, warp_idx);
  struct Item {
    size_t row;
    uint32_t c;  // chunk
    float w;     // the row's router weight
  };
  int i = 0;
  int32_t n = warp_idx - num_warps;
  // The warp's next row with data (writing the padding rows' zeros on the way); false when none.
  auto next_row = [&](Item& it) -> bool {
    for (n += num_warps; n < total; n += num_warps) {
      while (n >= s_first[i + 1]) ++i;
      const int32_t local = n - s_first[i];
      const size_t row = size_t(s_row0[i] + local);
      if (local < s_valid[i]) {
        it = Item{row, 0, __ldcg(recv_w + row)};
        return true;
      }
      const uint4 z = make_uint4(0, 0, 0, 0);  // padding row: zeros in every operand of the grouped-K GEMMs
      for (uint32_t v = lane_idx; v < hv; v += 32) {
        recv_x[row * hv + v] = z;
        recv_dy[row * hv + v] = z;
      }
      for (uint32_t v = lane_idx; v < iv; v += 32) {
        act_w[row * iv + v] = z;
        dh1[row * 2 * iv + 2 * v] = z;
        dh1[row * 2 * iv + 2 * v + 1] = z;
      }
    }
    return false;
  };
  auto issue = [&](const Item& it, uint4* buf) {
    const uint32_t c0 = it.c * cvecs, cn = min(cvecs, iv - c0);
    const uint4* gu = h1 + it.row * 2 * iv + 2 * c0;
    const uint4* da = dap + it.row * iv + c0;
    for (uint32_t v = lane_idx; v < cn; v += 32) {
      stage_vec(gu + 2 * v, buf + 2 * v);
      stage_vec(gu + 2 * v + 1, buf + 2 * v + 1);
      stage_vec(da + v, buf + 2 * cvecs + v);
    }
    cute::cp_async_fence();
  };
  // As dispatch: item i staged into buffer i % 2 while item i - 1 is worked on; one call site each.
  Item cur, nxt{0, nch - 1, 0.0f};  // nxt: as if at a row's last chunk, so the first step finds row 0
  bool have = false;
  float dot = 0.0f;
  for (uint32_t b = 0;; b ^= 1u) {
    const bool more = ++nxt.c < nch || next_row(nxt);
    if (more) issue(nxt, staging + b * kMoeStagingVecs);
    if (have) {
      if (more) cute::cp_async_wait<1>();
      else cute::cp_async_wait<0>();
      // One 16-byte vector of gate, up and dA' (8 columns) -> dH1, w·a; dot in the lane's column order.
      const uint4* buf = staging + (b ^ 1u) * kMoeStagingVecs;
      const uint32_t c0 = cur.c * cvecs, cn = min(cvecs, iv - c0);
      const size_t row = cur.row;
      const float w = cur.w;
      for (uint32_t v = lane_idx; v < cn; v += 32) {
        const uint4 graw = staged_vec(buf + 2 * v), uraw = staged_vec(buf + 2 * v + 1);
        const uint4 draw = staged_vec(buf + 2 * cvecs + v);
        const __nv_bfloat16* gb = reinterpret_cast<const __nv_bfloat16*>(&graw);
        const __nv_bfloat16* ub = reinterpret_cast<const __nv_bfloat16*>(&uraw);
        const __nv_bfloat16* db = reinterpret_cast<const __nv_bfloat16*>(&draw);
        uint4 dg_out, du_out, aw_out;
        __nv_bfloat16* dgo = reinterpret_cast<__nv_bfloat16*>(&dg_out);
        __nv_bfloat16* duo = reinterpret_cast<__nv_bfloat16*>(&du_out);
        __nv_bfloat16* awo = reinterpret_cast<__nv_bfloat16*>(&aw_out);
#pragma unroll
        for (int q = 0; q < 8; ++q) {
          const float g = __bfloat162float(gb[q]), u = __bfloat162float(ub[q]), dav = __bfloat162float(db[q]);
          const float sg = 1.0f / (1.0f + expf(-g)), silu = g * sg, act = silu * u;
          dot += dav * act;
          const float dA = w * dav;
          dgo[q] = __float2bfloat16_rn(dA * u * sg * (1.0f + g * (1.0f - sg)));
          duo[q] = __float2bfloat16_rn(dA * silu);
          awo[q] = __float2bfloat16_rn(w * act);
        }
        const uint32_t gv = c0 + v;
        dh1[row * 2 * iv + 2 * gv] = dg_out;
        dh1[row * 2 * iv + 2 * gv + 1] = du_out;
        act_w[row * iv + gv] = aw_out;
      }
      if (cur.c + 1 == nch) {  // the row's last chunk: its dot product, a fixed xor tree
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
        if (lane_idx == 0) recv_dw[row] = dot;
        dot = 0.0f;
      }
    }
    if (!more) return;
    cur = nxt;
    have = true;
  }
}

}  // namespace moe_detail

__device__ __forceinline__ void moe_task_device(const plan::Task& t, const runtime::TaskContext& ctx, char* smem,
                                                int num_threads) {
  const MoeArgs a = t.args<MoeArgs>();
  switch (t.kind) {
    case plan::TaskKind::kMoeRoute: moe_detail::route(t, a, ctx, smem, num_threads); break;
    case plan::TaskKind::kMoeOffsets: moe_detail::offsets(t, a, ctx, smem, num_threads); break;
    case plan::TaskKind::kMoeDispatch: moe_detail::dispatch(t, a, ctx, smem, num_threads); break;
    case plan::TaskKind::kMoeCombine: moe_detail::combine(t, a, ctx, num_threads); break;
    case plan::TaskKind::kMoeSwigluBackward: moe_detail::swiglu_backward(t, a, ctx, smem, num_threads); break;
    default: break;
  }
}

}  // namespace kosmos::kernels
