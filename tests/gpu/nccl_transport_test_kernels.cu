// Kernels for tests/gpu/test_nccl_transport.cpp and tests/multigpu/test_nccl_multigpu.cpp.
// Protocol (one round): sender CTAs store words into the receiver's buffer through a peer pointer,
// __syncthreads, then thread 0 of each CTA does red.release.sys.global.add.u64 on the receiver's
// counter (the release is cumulative over the CTA's stores ordered before it by the barrier).
// The receiver's thread 0 spins with ld.acquire.sys.global.u64 until the counter reaches the
// expected value (with a globaltimer timeout), then the CTA verifies the words.
#include "gpu/nccl_transport_test_kernels.h"

#include <nccl.h>
#include <nccl_device.h>

namespace kosmos::transport::testing {
namespace {

__device__ __forceinline__ void red_add_release_sys(uint64_t* addr, uint64_t v) {
  asm volatile("red.release.sys.global.add.u64 [%0], %1;" ::"l"(addr), "l"(v) : "memory");
}
__device__ __forceinline__ uint64_t ld_acquire_sys(const uint64_t* addr) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(addr) : "memory");
  return v;
}
__device__ __forceinline__ uint64_t globaltimer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__host__ __device__ __forceinline__ uint32_t encode(int src, int round, uint32_t i) {
  return (static_cast<uint32_t>(src + 1) << 24) ^ (static_cast<uint32_t>(round) << 20) ^ (i * 2654435761u) ^ 1u;
}

__global__ void put_signal_kernel(uint32_t* dst_words, uint64_t* dst_counter, uint32_t num_words, int src,
                                  int round) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < num_words; i += gridDim.x * blockDim.x) {
    dst_words[i] = encode(src, round, i);
  }
  __syncthreads();
  if (threadIdx.x == 0) red_add_release_sys(dst_counter, 1);
}

__global__ void wait_verify_kernel(const uint32_t* words, const uint64_t* counter, uint64_t expected,
                                   uint32_t num_words, int src, int round, uint64_t timeout_ns,
                                   VerifyResult* result) {
  __shared__ unsigned int timed_out;
  if (threadIdx.x == 0) {
    const uint64_t start = globaltimer_ns();
    uint64_t seen = ld_acquire_sys(counter);
    while (seen < expected && globaltimer_ns() - start < timeout_ns) {
      __nanosleep(100);
      seen = ld_acquire_sys(counter);
    }
    timed_out = seen < expected ? 1u : 0u;
    result->counter_seen = seen;
    result->timed_out = timed_out;
    result->mismatches = 0;
    result->first_bad_index = 0xffffffffu;
    result->first_bad_value = 0;
  }
  __syncthreads();
  if (timed_out) return;
  for (uint32_t i = threadIdx.x; i < num_words; i += blockDim.x) {
    const uint32_t got = words[i];
    if (got != encode(src, round, i)) {
      atomicAdd(&result->mismatches, 1u);
      if (atomicMin(&result->first_bad_index, i) > i) result->first_bad_value = got;  // best effort
    }
  }
}

__global__ void read_alias_kernel(ncclWindow_t window, uint32_t num_words, uint32_t* out, void** alias_out) {
  const uint32_t* alias = static_cast<const uint32_t*>(ncclGetLocalPointer(window, 0));
  if (blockIdx.x == 0 && threadIdx.x == 0) *alias_out = const_cast<uint32_t*>(alias);
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < num_words; i += gridDim.x * blockDim.x) {
    out[i] = alias[i];
  }
}

}  // namespace

void launch_put_signal(uint32_t* dst_words, uint64_t* dst_counter, uint32_t num_words, int src, int round,
                       int num_ctas, cudaStream_t stream) {
  put_signal_kernel<<<num_ctas, 256, 0, stream>>>(dst_words, dst_counter, num_words, src, round);
}

void launch_wait_verify(const uint32_t* words, const uint64_t* counter, uint64_t expected, uint32_t num_words,
                        int src, int round, uint64_t timeout_ns, VerifyResult* result, cudaStream_t stream) {
  wait_verify_kernel<<<1, 256, 0, stream>>>(words, counter, expected, num_words, src, round, timeout_ns, result);
}

void launch_read_through_nccl_alias(void* nccl_window, uint32_t num_words, uint32_t* out, void** alias_out,
                                    cudaStream_t stream) {
  read_alias_kernel<<<4, 256, 0, stream>>>(static_cast<ncclWindow_t>(nccl_window), num_words, out, alias_out);
}

}  // namespace kosmos::transport::testing
