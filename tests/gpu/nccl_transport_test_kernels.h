// Test kernels for the nccl transport: a put of rank- and index-encoded words through a peer
// pointer followed by a release-add on a peer counter, and the matching acquire-wait + verify.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace kosmos::transport::testing {

// Word i written by rank `src` in round `round`: unique per (src, i, round), never 0.
inline uint32_t encode_word(int src, int round, uint32_t i) {
  return (static_cast<uint32_t>(src + 1) << 24) ^ (static_cast<uint32_t>(round) << 20) ^ (i * 2654435761u) ^ 1u;
}

struct VerifyResult {
  unsigned long long counter_seen;  // counter value when the wait ended
  unsigned int timed_out;           // 1: the counter never reached `expected`
  unsigned int mismatches;          // words that differ from encode_word(src, round, i)
  unsigned int first_bad_index;     // smallest mismatching index (0xffffffff if none)
  unsigned int first_bad_value;
};

// Writes encode_word(src, round, i) to dst_words[i] for i < num_words (grid-stride), then each
// CTA does __syncthreads and one red.release.sys.global.add.u64 of 1 on *dst_counter — so the
// receiver expects `num_ctas` more per round. dst_* are peer (or local) pointers.
void launch_put_signal(uint32_t* dst_words, uint64_t* dst_counter, uint32_t num_words, int src, int round,
                       int num_ctas, cudaStream_t stream);

// One CTA: thread 0 spins with ld.acquire.sys until *counter >= expected or timeout_ns passes
// (globaltimer), then all threads check words[i] == encode_word(src, round, i).
void launch_wait_verify(const uint32_t* words, const uint64_t* counter, uint64_t expected, uint32_t num_words,
                        int src, int round, uint64_t timeout_ns, VerifyResult* result, cudaStream_t stream);

// Reads NCCL's own mapping of this rank's window (ncclGetLocalPointer) — a second VA alias of
// the ncclMemAlloc memory — and copies num_words words from it into out.
void launch_read_through_nccl_alias(void* nccl_window, uint32_t num_words, uint32_t* out, void** alias_out,
                                    cudaStream_t stream);

}  // namespace kosmos::transport::testing
