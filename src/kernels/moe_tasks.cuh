// Device bodies of the MoE task kinds (route, offsets, dispatch, combine); math and buffers in
// moe_tasks.h. Called by ALL threads of the CTA (the op kernel: 384 threads = 12 warps) with the
// runtime's guarantees: the task's waits were acquired before the call, and after return the
// runtime does __syncthreads + fence + release-add of the task's signals (so plain stores here,
// local or to a peer's buffer, are published by the signal).
//
//   route    one CTA per source rank. Shared memory (the op kernel's dynamic smem): hist[12][E]
//            int32 (12 KB at E = 256). 12 warps take contiguous entry ranges; pass 1 counts per
//            warp, a column prefix over warps gives each warp its base per expert, pass 2 walks
//            the range again in 32-entry batches and ranks equal experts inside a batch with
//            __match_any_sync: stable (t-major, then j) without a sort.
//   offsets  one CTA per rank; E <= 256 experts, thread 0 does the per-owner prefix (E steps).
//   dispatch one warp per received row (H % 8 == 0): the source row(s) arrive by bulk copy into the
//            warp's shared-memory buffers (WarpRowBuffers; two when they fit, the next row loading
//            while this one is stored), then 16-byte stores; rows too wide go through registers.
//   combine  one warp per token: lanes 0..k-1 resolve the k source rows, every lane sums 8
//            columns at a time over j = 0..k-1 in order (fp32), stores bf16. Backward: the same
//            into dx, and lanes 0..k-1 gather the router-weight gradients.
//   swiglu_backward  thread 0 maps the task's slots to row ranges (smem: 3 x 64 + 1 int32), then one
//            warp per row, 8 columns per lane step; a data row's h1 and dA' arrive by bulk copy into
//            the warp's buffers as in dispatch; padding rows get zeros.
// Shared memory: at most kMoeSmemBytes (moe_tasks.h). Why bulk copies and not more loads in flight
// per lane: the op kernel has no registers to spare (docs/design/moe.md, "Memory-bound bodies").
#pragma once

#include <cuda_bf16.h>

#include "kernels/gemm/gemm_params.h"
#include "kernels/moe_tasks.h"
#include "runtime/persistent_kernel.cuh"

namespace kosmos::kernels {

namespace moe_detail {

// Bulk copies (the TMA's 1-D form) into shared memory, completing on an mbarrier: the bodies whose
// warps would otherwise wait one memory round trip per 16-byte vector per lane (registers are what
// the op kernel has none of to spare: batching loads in registers spilled it, sixteenth session).
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void mbar_init(uint64_t* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
}
// bytes: a multiple of 16; src and dst 16-byte aligned.
__device__ __forceinline__ uint4 ld_shared_v4(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
  return v;
}
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(smem_u32(dst)),
               "l"(src), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
}

// A warp's shared-memory buffers for items (rows) of item_bytes that bulk copies bring in: the
// MoE bodies' shared memory past `head` bytes split over the warps; two buffers when two items fit
// (the next item loads while one is used), one when one does, none otherwise (the caller reads
// global memory). Two mbarriers per warp at bars + 2 * warp, initialised here by lane 0; every
// load issued into a buffer must be waited for before the task ends.
struct WarpRowBuffers {
  char* base;
  uint64_t* bar;
  uint32_t item_bytes;
  int count;
  __device__ __forceinline__ WarpRowBuffers(char* smem, uint32_t head, uint64_t* bars, int warp_idx, int num_warps,
                                            uint32_t item, int lane_idx)
      : item_bytes(item) {
    const uint32_t per_warp = (uint32_t(kMoeSmemBytes) - head) / uint32_t(num_warps) / 16 * 16;
    count = 2 * item <= per_warp ? 2 : item <= per_warp ? 1 : 0;
    base = smem + head + size_t(warp_idx) * per_warp;
    bar = bars + 2 * warp_idx;
    if (count == 0) return;
    if (lane_idx == 0) {
      mbar_init(bar);
      mbar_init(bar + 1);
      // the barriers' init visible to the bulk copies; what other tasks stored (acquired through
      // the generic proxy) visible to them as well
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
      asm volatile("fence.proxy.async.global;" ::: "memory");
    }
    __syncwarp();
  }
  __device__ __forceinline__ char* at(int b) const { return base + size_t(b) * item_bytes; }
  // Lane 0: item b's expected bytes; the caller then issues bulk_load(at(b) + ..., bar + b) for them.
  __device__ __forceinline__ void expect(int b) const { mbar_expect_tx(bar + b, item_bytes); }
  // Waits for buffer b's load; parity: bit b is the phase its barrier completes next.
  __device__ __forceinline__ void wait(int b, uint32_t& parity) const {
    mbar_wait(bar + b, (parity >> b) & 1u);
    parity ^= 1u << b;
  }
};


__device__ __forceinline__ void route(const plan::Task& t, const MoeArgs& a, const runtime::TaskContext& ctx, char* smem,
                                      int num_threads) {
  const uint32_t s = t.rank, E = a.num_experts, N = a.tokens * a.top_k;
  const int warp_idx = ctx.thread_idx / 32, lane_idx = ctx.thread_idx % 32, num_warps = num_threads / 32;
  const int32_t* ids = static_cast<const int32_t*>(ctx.buffer(kMoeIds, s));
  int32_t* route = static_cast<int32_t*>(ctx.buffer(kMoeRoute, s));
  int32_t *cnt = route, *start = route + E, *pos = route + 2 * E, *perm = route + 2 * E + N;
  int32_t* hist = reinterpret_cast<int32_t*>(smem);           // [num_warps][E]
  int32_t* s_start = hist + size_t(num_warps) * E;             // [E]
  for (uint32_t i = ctx.thread_idx; i < uint32_t(num_warps) * E; i += num_threads) hist[i] = 0;
  __syncthreads();
  const uint32_t per = (N + num_warps - 1) / num_warps;
  const uint32_t lo = min(N, per * warp_idx), hi = min(N, lo + per);
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
  for (uint32_t e = ctx.thread_idx; e < E; e += num_threads) {
    int32_t run = 0;
    for (int w = 0; w < num_warps; ++w) {
      const int32_t v = hist[size_t(w) * E + e];
      hist[size_t(w) * E + e] = run;
      run += v;
    }
    cnt[e] = run;
    s_start[e] = run;  // temporarily the count
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
        start[e] = run;
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

// One warp copies a row of `vecs` 16-byte vectors through registers, four per lane at a time.
__device__ __forceinline__ void warp_copy_row(const uint4* src, uint4* dst, uint32_t vecs, int lane_idx) {
  uint32_t v = lane_idx;
  for (; v + 96 < vecs; v += 128) {
    const uint4 v0 = src[v], v1 = src[v + 32], v2 = src[v + 64], v3 = src[v + 96];
    dst[v] = v0;
    dst[v + 32] = v1;
    dst[v + 64] = v2;
    dst[v + 96] = v3;
  }
  for (; v < vecs; v += 32) dst[v] = src[v];
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
  // Rows i of the experts [b, c) with i % num_slices == slice, one warp per row. The warp's rows, in
  // order: each expert's m = m0, m0 + num_warps, ... (m0 balances the warps across experts).
  const int32_t slice = int32_t((a.a >> 16) & 0xFFu), num_slices = int32_t(max(1u, a.a >> 24));
  struct Cursor {
    uint32_t e;
    int32_t m = -1, mine = 0, first = 0, off = 0, row_base = 0;
    bool started = false;
  };
  // Moves c to the warp's next row; false past the last. i: the row within its expert's rows.
  auto advance = [&](Cursor& c, int32_t& i) -> bool {
    if (c.started) c.m += num_warps;
    while (!c.started || c.m >= c.mine) {
      if (c.started) {
        c.row_base += c.mine;
        ++c.e;
      }
      c.started = true;
      if (c.e >= a.c) return false;
      const int32_t n = __ldcg(cnt + c.e);
      c.first = __ldcg(start + c.e);
      c.off = __ldcg(send_off + c.e);
      c.mine = n > slice ? (n - slice + num_slices - 1) / num_slices : 0;
      c.m = (warp_idx - c.row_base % num_warps + num_warps) % num_warps;
    }
    i = slice + c.m * num_slices;
    return true;
  };
  // Each row's source (x, and dy in the backward that recomputes; dy alone after a forward that saved
  // its activations) arrives by bulk copy into the warp's shared-memory buffer (two when they fit:
  // the next row loads while this one is stored), then the warp stores it from there. Rows too wide
  // for one buffer are copied through registers.
  const bool two = backward && !dy_only;
  const uint32_t seg = 2 * H, item_bytes = (two ? 2 : 1) * seg;
  const WarpRowBuffers buf(smem, 256, reinterpret_cast<uint64_t*>(smem), warp_idx, num_warps, item_bytes, lane_idx);
  const int nbuf = buf.count;
  Cursor load{a.b}, proc{a.b};
  int32_t ent0 = 0, ent1 = 0;  // the routing slot of the row in buffer 0 / 1
  auto issue = [&](int bsel) {  // the next row's loads into buffer bsel
    int32_t i;
    if (!advance(load, i)) return;
    const int32_t entry = __ldcg(perm + load.first + i);
    if (bsel == 0) ent0 = entry;
    else ent1 = entry;
    if (lane_idx == 0) {
      const size_t src_row = size_t(entry / a.top_k);
      buf.expect(bsel);
      bulk_load(buf.at(bsel), src_rows + src_row * vecs, seg, buf.bar + bsel);
      if (two) bulk_load(buf.at(bsel) + seg, dy + src_row * vecs, seg, buf.bar + bsel);
    }
  };
  if (nbuf > 0) issue(0);
  uint32_t parity = 0u;  // bit b: the phase buffer b's barrier completes next
  int32_t i;
  for (int k = 0; advance(proc, i); ++k) {
    const size_t dst_row = size_t(proc.off + i);
    const int bsel = nbuf == 2 ? (k & 1) : 0;
    const int32_t entry = nbuf == 0 ? __ldcg(perm + proc.first + i) : bsel == 0 ? ent0 : ent1;
    const float wv = (!dy_only && lane_idx == 0) ? w[entry] : 0.0f;  // in flight with the row
    if (nbuf == 0) {
      const size_t src_row = size_t(entry / a.top_k);
      warp_copy_row(src_rows + src_row * vecs, dst_rows + dst_row * vecs, vecs, lane_idx);
      if (two) warp_copy_row(dy + src_row * vecs, recv_dy + dst_row * vecs, vecs, lane_idx);
    } else {
      if (nbuf == 2) issue(bsel ^ 1);  // that buffer's last reader was the previous row
      buf.wait(bsel, parity);
      const uint32_t sbuf = smem_u32(buf.at(bsel));
      uint4* dst = dst_rows + dst_row * vecs;
      for (uint32_t v = lane_idx; v < vecs; v += 32) dst[v] = ld_shared_v4(sbuf + 16 * v);
      if (two) {
        uint4* dst_dy = recv_dy + dst_row * vecs;
        for (uint32_t v = lane_idx; v < vecs; v += 32) dst_dy[v] = ld_shared_v4(sbuf + seg + 16 * v);
      }
      __syncwarp();  // every lane has read the buffer before it is loaded again
      if (nbuf == 1) issue(0);
    }
    if (!dy_only && lane_idx == 0) recv_w[dst_row] = wv;
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
    // What this task reads was acquired by this thread through the generic proxy; the bulk copies
    // below read it through the async proxy (as the GEMM tile's loads: op_kernel.cu).
    asm volatile("fence.proxy.async.global;" ::: "memory");
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
  // Each warp walks rows n = warp, warp + num_warps, ...; a data row's h1 (2I) and dA' (I) arrive by
  // bulk copy into the warp's shared-memory buffer (two buffers when they fit: the next row loads
  // while this one is computed), one lane issuing. Rows too wide for one buffer read global memory.
  const uint32_t row_bytes = 6 * I;  // h1 4I + dA' 2I bytes
  // past s_row0 / s_valid / s_first (772 B); the barriers at 776 (192 B)
  const WarpRowBuffers buf(smem, 1024, reinterpret_cast<uint64_t*>(smem + 776), warp_idx, num_warps, row_bytes, lane_idx);
  const int nbuf = buf.count;
  // Row n of the task: its receive row, and whether it holds data (padding rows get zeros).
  auto locate = [&](int32_t n, int& i, size_t& row) {
    while (n >= s_first[i + 1]) ++i;
    const int32_t local = n - s_first[i];
    row = size_t(s_row0[i] + local);
    return local < s_valid[i];
  };
  int i_next = 0;  // slot index of the next row to issue (rows are issued in order)
  auto issue = [&](int32_t n, int b) {  // lane 0: start row n's loads into buffer b (data rows only)
    size_t row;
    if (n >= total || !locate(n, i_next, row)) return;
    if (lane_idx == 0) {
      buf.expect(b);
      bulk_load(buf.at(b), h1 + row * 2 * iv, 4 * I, buf.bar + b);
      bulk_load(buf.at(b) + 4 * I, dap + row * iv, 2 * I, buf.bar + b);
    }
  };
  if (nbuf > 0) issue(warp_idx, 0);
  uint32_t parity = 0u;  // bit b: the phase buffer b's barrier completes next
  int i = 0, k = 0;  // k: this warp's row count (buffer k % nbuf)
  for (int32_t n = warp_idx; n < total; n += num_warps, ++k) {
    size_t row;
    if (!locate(n, i, row)) {  // padding row: zeros in every operand of the grouped-K GEMMs
      if (nbuf == 2) issue(n + num_warps, (k + 1) % 2);
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
      if (nbuf == 1) {
        __syncwarp();
        issue(n + num_warps, 0);
      }
      continue;
    }
    const int b = nbuf == 2 ? k % 2 : 0;
    if (nbuf == 2) issue(n + num_warps, b ^ 1);  // its buffer's last reader was the previous row
    const uint4* h1_row = h1 + row * 2 * iv;
    const uint4* dap_row = dap + row * iv;
    const uint32_t sbuf = smem_u32(buf.at(b));  // h1 at 0, dA' at 4I bytes
    if (nbuf > 0) buf.wait(b, parity);
    const float w = __ldcg(recv_w + row);
    float dot = 0.0f;
    for (uint32_t v = lane_idx; v < iv; v += 32) {
      uint4 graw, uraw, draw;
      if (nbuf > 0) {
        graw = ld_shared_v4(sbuf + 32 * v);
        uraw = ld_shared_v4(sbuf + 32 * v + 16);
        draw = ld_shared_v4(sbuf + 64 * iv + 16 * v);
      } else {
        graw = __ldcg(h1_row + 2 * v);
        uraw = __ldcg(h1_row + 2 * v + 1);
        draw = __ldcg(dap_row + v);
      }
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
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    if (lane_idx == 0) recv_dw[row] = dot;
    __syncwarp();  // every lane has read the buffer before it is loaded again
    if (nbuf == 1) issue(n + num_warps, 0);
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
