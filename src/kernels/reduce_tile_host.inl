#pragma once
#include "kernels/gemm/bf16.h"

namespace kosmos::kernels {

template <class Lookup>
void reduce_tile_host(const ReduceArgs& a, uint32_t rank, uint32_t world, Lookup buffer) {
  for (uint32_t i = 0; i < a.rows; ++i) {
    for (uint32_t j = 0; j < a.cols; ++j) {
      float sum = 0.0f;
      for (uint32_t s = 0; s < a.num_sources; ++s) {
        const uint16_t* p = static_cast<const uint16_t*>(buffer(a.src_buffer, s));
        sum += gemm::bf16_to_float(p[size_t(a.src_row0 + i) * a.src_ld + a.col0 + j]);
      }
      const uint16_t v = gemm::float_to_bf16(sum);
      for (uint32_t r = 0; r < world; ++r) {
        if (!(a.flags & kReduceBroadcast) && r != rank) continue;
        uint16_t* d = static_cast<uint16_t*>(buffer(a.dst_buffer, r));
        d[size_t(a.dst_row0 + i) * a.dst_ld + a.col0 + j] = v;
      }
    }
  }
}

}  // namespace kosmos::kernels
