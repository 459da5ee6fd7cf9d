// Reduce tile: the fixed-order cross-rank sum behind GEMM+ReduceScatter and GEMM+AllReduce.
//
//   out[dst_row0 + i, col0 + j] = bf16( sum_{s = 0 .. num_sources-1, in this order} float(P_s[src_row0 + i, col0 + j]) )
//
// P_s is buffer `src_buffer` of rank s (read through the buffer table: local memory for virtual
// ranks, an LSA peer pointer across GPUs); out is buffer `dst_buffer` of the task's rank, or of
// every rank with kReduceBroadcast. The order is fixed, so results are the same run to run and
// equal the unfused composition bit for bit (no float atomics).
#pragma once

#include <cstdint>

#include "kosmos/plan.h"

namespace kosmos::kernels {

inline constexpr uint16_t kReduceBroadcast = 1;

struct ReduceArgs {
  uint16_t src_buffer, dst_buffer, num_sources, flags;
  uint32_t src_row0, dst_row0, col0, rows, cols;
  uint32_t src_ld, dst_ld;  // elements
};
static_assert(sizeof(ReduceArgs) <= plan::kTaskArgWords * 4);

// Host implementation (CPU executor). `buffer(b, r)` resolves buffer b of rank r.
template <class Lookup>
void reduce_tile_host(const ReduceArgs& a, uint32_t rank, uint32_t world, Lookup buffer);

}  // namespace kosmos::kernels

#include "kernels/reduce_tile_host.inl"
