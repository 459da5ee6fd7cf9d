// Parameters of the op kernel variant (GEMM tiles + reduce tiles + the built-in kinds), kept in
// the runtime's __grid_constant__ body blob so TMA descriptors stay in param space.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/gemm/gemm_params.h"

namespace kosmos::ops {

inline constexpr int kMaxGemmProblems = 40;  // 40 x 640 B fits the 28 KB body blob (static_assert in op_kernel.cu); the MoE backward needs 5 per rank at W = 8

// How a GEMM tile's producer waits for its operand rows (deferred waits, checked per k-block):
//   counter = counter_base + (m_rows ? m_block * BM / m_rows : 0) + (k_rows ? k_block * BK / k_rows : 0)
// and it waits until that counter holds everything signalled into it this run (kWaitAll).
// counter_base == kNoWait: the tile never waits inside its body.
// join_counter (optional): a counter signalled by every producer of all the rule's counters. The
// first wait of a task checks it once, without spinning; when it is already complete the task's
// tiles wait for nothing more (one fence). Without it, a K-sliced rule (k_rows = 128) makes the
// producer thread spin-load a counter and fence the async proxy every second k-block, on the TMA
// issue path, even when everything arrived long ago (the TP backward's dW tiles run last).
struct GemmWaitRule {
  static constexpr uint32_t kNoWait = 0xFFFFFFFFu;
  uint32_t counter_base = kNoWait;
  uint32_t m_rows = 0;  // rows of A (in the M dimension) covered by one counter
  uint32_t k_rows = 0;  // rows of the K dimension covered by one counter
  uint32_t join_counter = kNoWait;
};

// The rule's counter for k block k_block of row block m_block (the formula above), and the first k
// block past the K slice that counter covers (none -- INT_MAX -- without K steps): the in-body
// waiter (op_body.cuh RuntimeGemmWaiter) computes both once per tile and K slice, not before every
// k block's loads.
KOSMOS_HOST_DEVICE inline uint32_t gemm_wait_counter(const GemmWaitRule& r, int m_block, int k_block) {
  return r.counter_base + (r.m_rows ? uint32_t(m_block) * kernels::gemm::kGemmBlockM / r.m_rows : 0u) +
         (r.k_rows ? uint32_t(k_block) * kernels::gemm::kGemmBlockK / r.k_rows : 0u);
}
KOSMOS_HOST_DEVICE inline int gemm_wait_slice_end(const GemmWaitRule& r, int k_block) {
  constexpr uint32_t kBK = kernels::gemm::kGemmBlockK;
  if (r.k_rows == 0) return 0x7FFFFFFF;
  const uint32_t kq = uint32_t(k_block) * kBK / r.k_rows;  // ceil((kq + 1) * k_rows / kBK)
  return int(((kq + 1) * r.k_rows + kBK - 1) / kBK);
}

// Rules first, problems last: the bytes an op needs are gemm_body_bytes(its problem count), and a
// body of up to three problems fits the runtime's small parameter blob (a cheaper launch).
struct GemmBodyParams {
  uint32_t num_problems;
  GemmWaitRule rules[kMaxGemmProblems];
  kernels::gemm::GemmParams problems[kMaxGemmProblems];
};

inline constexpr size_t gemm_body_bytes(size_t num_problems) {
  return offsetof(GemmBodyParams, problems) + num_problems * sizeof(kernels::gemm::GemmParams);
}

}  // namespace kosmos::ops
