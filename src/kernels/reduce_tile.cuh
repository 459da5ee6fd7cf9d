// Device body of the reduce tile (see reduce_tile.h for the math and the order guarantee).
// All threads of the CTA: each handles 8 consecutive columns (one 16-byte load per source) when
// the tile is 16-byte aligned, else single elements. Sources are read through the buffer table
// (peer pointers across GPUs), in rank order 0..num_sources-1.
#pragma once

#include <cuda_bf16.h>

#include "kernels/reduce_tile.h"
#include "runtime/persistent_kernel.cuh"

namespace kosmos::kernels {

__device__ __forceinline__ void reduce_tile_device(const plan::Task& t, const runtime::TaskContext& ctx, int num_threads) {
  const ReduceArgs a = t.args<ReduceArgs>();
  const uint32_t world = ctx.p->world;
  const bool vec = (a.col0 % 8 == 0) && (a.cols % 8 == 0) && (a.src_ld % 8 == 0) && (a.dst_ld % 8 == 0);
  const uint32_t per_row = vec ? a.cols / 8 : a.cols;
  const uint64_t items = uint64_t(a.rows) * per_row;
  for (uint64_t it = ctx.thread_idx; it < items; it += num_threads) {
    const uint32_t i = uint32_t(it / per_row), j = uint32_t(it % per_row) * (vec ? 8 : 1);
    const size_t src_off = size_t(a.src_row0 + i) * a.src_ld + a.col0 + j;
    const size_t dst_off = size_t(a.dst_row0 + i) * a.dst_ld + a.col0 + j;
    if (vec) {
      float sum[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (uint32_t s = 0; s < a.num_sources; ++s) {
        const __nv_bfloat16* p = static_cast<const __nv_bfloat16*>(ctx.buffer(a.src_buffer, s)) + src_off;
        const uint4 raw = *reinterpret_cast<const uint4*>(p);
        const __nv_bfloat16* v = reinterpret_cast<const __nv_bfloat16*>(&raw);
#pragma unroll
        for (int e = 0; e < 8; ++e) sum[e] += __bfloat162float(v[e]);
      }
      uint4 out;
      __nv_bfloat16* o = reinterpret_cast<__nv_bfloat16*>(&out);
#pragma unroll
      for (int e = 0; e < 8; ++e) o[e] = __float2bfloat16_rn(sum[e]);
      for (uint32_t r = 0; r < world; ++r) {
        if (!(a.flags & kReduceBroadcast) && r != t.rank) continue;
        *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(ctx.buffer(a.dst_buffer, r)) + dst_off) = out;
      }
    } else {
      float sum = 0.0f;
      for (uint32_t s = 0; s < a.num_sources; ++s)
        sum += __bfloat162float(static_cast<const __nv_bfloat16*>(ctx.buffer(a.src_buffer, s))[src_off]);
      const __nv_bfloat16 o = __float2bfloat16_rn(sum);
      for (uint32_t r = 0; r < world; ++r) {
        if (!(a.flags & kReduceBroadcast) && r != t.rank) continue;
        static_cast<__nv_bfloat16*>(ctx.buffer(a.dst_buffer, r))[dst_off] = o;
      }
    }
  }
}

}  // namespace kosmos::kernels
