// Ring check shared by the one-rank GPU test and the multi-GPU tests: every rank r writes rank-
// and index-encoded words into rank (r+1)%W's buffer through its peer pointer and release-adds
// the counter there; rank r acquire-waits on its own counter (timeout) and verifies the words from
// rank (r-1+W)%W. Several rounds, separated by transport barriers. Works for one process per GPU
// (transports.size() == 1) and one process driving all ranks.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gpu/nccl_transport_test_kernels.h"
#include "kosmos/transport.h"

namespace kosmos::transport::testing {

// Buffer layout (bytes = kRingBytes): words [0, kRingWords) as uint32, then the counter (uint64) at
// kRingCounterOffset.
constexpr uint32_t kRingWords = 1u << 18;                     // 1 MiB of data
constexpr size_t kRingCounterOffset = size_t{kRingWords} * 4;
constexpr size_t kRingBytes = kRingCounterOffset + 256;
constexpr int kRingCtas = 8;                                  // counter += kRingCtas per round
constexpr uint64_t kRingTimeoutNs = 10ull * 1000 * 1000 * 1000;

inline uint32_t* words_of(void* base) { return static_cast<uint32_t*>(base); }
inline uint64_t* counter_of(void* base) {
  return reinterpret_cast<uint64_t*>(static_cast<char*>(base) + kRingCounterOffset);
}

#define RING_CUDA(call)                                                                  \
  do {                                                                                   \
    cudaError_t e_ = (call);                                                             \
    if (e_ != cudaSuccess) return ::testing::AssertionFailure() << #call << ": " << cudaGetErrorString(e_); \
  } while (0)
#define RING_OK(expr)                                                                    \
  do {                                                                                   \
    ::kosmos::Status s_ = (expr);                                                        \
    if (!s_.is_ok()) return ::testing::AssertionFailure() << #expr << ": " << s_.to_string(); \
  } while (0)

// transports[i] / buffers[i]: the ranks this process drives; world = transports[0]->world().
inline ::testing::AssertionResult run_ring(const std::vector<NcclTransport*>& transports,
                                           const std::vector<SymmetricBuffer>& buffers, int rounds) {
  const size_t n = transports.size();
  const int world = transports[0]->world();
  std::vector<cudaStream_t> streams(n);
  std::vector<VerifyResult*> results(n);
  for (size_t i = 0; i < n; ++i) {
    RING_CUDA(cudaSetDevice(transports[i]->device()));
    RING_CUDA(cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking));
    RING_CUDA(cudaMallocHost(reinterpret_cast<void**>(&results[i]), sizeof(VerifyResult) * rounds));
    if (buffers[i].peers.size() != static_cast<size_t>(world) || buffers[i].peers[transports[i]->rank()] != buffers[i].local) {
      return ::testing::AssertionFailure() << "rank " << transports[i]->rank() << ": bad peer table";
    }
    RING_CUDA(cudaMemsetAsync(buffers[i].local, 0, kRingBytes, streams[i]));
  }
  // No rank writes into a peer before that peer has zeroed its buffer.
  RING_OK(NcclTransport::barrier_all(transports, streams));
  for (int round = 0; round < rounds; ++round) {
    for (size_t i = 0; i < n; ++i) {
      const int rank = transports[i]->rank();
      void* next = buffers[i].peers[(rank + 1) % world];
      RING_CUDA(cudaSetDevice(transports[i]->device()));
      launch_put_signal(words_of(next), counter_of(next), kRingWords, rank, round, kRingCtas, streams[i]);
      launch_wait_verify(words_of(buffers[i].local), counter_of(buffers[i].local), uint64_t(kRingCtas) * (round + 1),
                         kRingWords, (rank + world - 1) % world, round, kRingTimeoutNs, &results[i][round],
                         streams[i]);
      RING_CUDA(cudaGetLastError());
    }
    // Nobody overwrites a peer's words for round+1 before that peer verified round.
    RING_OK(NcclTransport::barrier_all(transports, streams));
  }
  ::testing::AssertionResult verdict = ::testing::AssertionSuccess();
  for (size_t i = 0; i < n; ++i) {
    RING_CUDA(cudaSetDevice(transports[i]->device()));
    RING_CUDA(cudaStreamSynchronize(streams[i]));
    const int rank = transports[i]->rank();
    for (int round = 0; round < rounds; ++round) {
      const VerifyResult& r = results[i][round];
      if (r.timed_out || r.mismatches) {
        verdict = ::testing::AssertionFailure()
                  << "rank " << rank << " round " << round << ": from rank " << (rank + world - 1) % world
                  << (r.timed_out ? " timed out" : "") << ", counter " << r.counter_seen << " (expected "
                  << uint64_t(kRingCtas) * (round + 1) << "), " << r.mismatches << " bad words, first at "
                  << r.first_bad_index;
      }
    }
    cudaFreeHost(results[i]);
    cudaStreamDestroy(streams[i]);
  }
  return verdict;
}

}  // namespace kosmos::transport::testing
