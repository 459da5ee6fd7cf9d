// What the one-process-per-GPU benchmarks (`kosmos bench tp --transport nccl`, `kosmos bench moe
// --transport nccl`) share: the launch-environment check, device-side comparison of bf16 buffers,
// the timing gate, gated + barriered repetitions with the variants alternating, and small
// cross-rank reductions of host doubles. Implemented in bench_nccl.cu.
//
// Timing protocol: one ungated call of each variant (NCCL's lazy connection setup), then before
// every repetition every rank enqueues a gate kernel (spins on a host-mapped flag), an NCCL barrier
// (a one-int all-reduce), event a, the variant, event b, and only then opens the gate: the host's
// enqueue cost stays out of the measurement and all ranks start together. 3 warm-ups, median of
// `reps` per rank, the variants alternating repetition by repetition (bench_timing.h).
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kosmos/status.h"
#include "kosmos/transport.h"

namespace kosmos::cli {

#define KOSMOS_NCCL_BENCH_CHECK(call)                                                                             \
  do {                                                                                                            \
    const ncclResult_t nb_r_ = (call);                                                                            \
    if (nb_r_ != ncclSuccess)                                                                                     \
      return ::kosmos::Status(::kosmos::StatusCode::kNcclError, std::string(#call) + " failed: " + ncclGetErrorString(nb_r_)); \
  } while (0)

// This rank's handles: the transport (for its barrier), its communicator and the stream every
// benchmark call runs on.
struct NcclRank {
  int rank = 0, W = 1;
  transport::NcclTransport* t = nullptr;
  ncclComm_t comm = nullptr;
  cudaStream_t s0 = nullptr;
};

// Runs one rank's benchmark body. On an error (a kosmos::Error or any std::exception) it prints
// "kosmos: rank R of W: ..." at once, aborts the communicator (ncclCommAbort) and ends the process
// with exit status 1 without running destructors: returning through them would finalize the
// communicator and free device memory, both of which wait for peers that may be stuck in a
// collective this rank never joins -- every rank would hang until its time limit, and this rank's
// message would never be printed. Errors every rank agrees on (the verification verdicts, all-reduced
// first) end the same way on every rank.
void run_rank_or_exit(transport::NcclTransport& t, const char* what, const std::function<void()>& body);

// A clear error before NCCL is touched when the process was not launched one per GPU (RANK,
// WORLD_SIZE, LOCAL_RANK, KOSMOS_NCCL_ID_FILE; NCCL_NVLS_ENABLE unset or 0; the GPU visible).
// `what` names the command in the message, e.g. "bench tp --transport nccl".
Status check_nccl_launch_env(const char* what, int* world_out);

// bf16 comparison on the device (outputs can be GBs: no host copies).
struct CmpOut {
  unsigned long long mismatches;  // bitwise differences
  unsigned long long nonfinite;   // non-finite x
  double num, den;                // sum (x - ref)^2 over finite x, sum ref^2
};
// `elems` bf16 values of x against ref; `d_out` is device scratch of sizeof(CmpOut). Synchronises s.
Status compare_bf16(const void* x, const void* ref, size_t elems, CmpOut* d_out, cudaStream_t s, CmpOut* h_out);
// Bytes of x against ref: how many 32-bit words differ (for fp32 / int outputs). Synchronises s.
Status count_word_mismatches(const void* x, const void* ref, size_t bytes, CmpOut* d_out, cudaStream_t s,
                             unsigned long long* mismatches);

// Launch gate: a one-thread kernel that holds the stream until the host opens it (or 30 s pass).
class Gate {
 public:
  Status init();
  Status arm(cudaStream_t s);
  void open();
  // After the stream passed the gate: false when it timed out instead of being opened (something
  // in the variant blocked the host while the gate held the GPU; the sample would be wrong).
  bool was_opened() const;
  ~Gate();

 private:
  uint32_t* host_ = nullptr;  // [0]: opened up to this value; [1]: set when the gate gave up
  uint32_t* dev_ = nullptr;
  uint32_t next_ = 0;
};

// Medians over `reps` of each variant on this rank (collective: every rank runs the same sequence).
// ungated[j]: variant j waits for the host inside (e.g. a pipeline that reads counts back before it
// can enqueue its GEMMs), so it cannot run behind the gate; it is timed from its barrier instead
// (events around barrier-completed stream work; its host round trips count, as they do in use).
Status time_nccl_variants(const NcclRank& c, Gate& gate, int reps, const std::vector<std::function<Status()>>& fns,
                          std::vector<double>* medians, const std::vector<bool>& ungated = {});

// Small cross-rank exchanges of host doubles through a device scratch buffer (collective).
class HostDoubles {
 public:
  Status init(int world, size_t max_per_rank);
  ~HostDoubles();
  Status allreduce_max(const NcclRank& c, std::vector<double>* v);                              // element-wise max over ranks
  Status allgather(const NcclRank& c, const std::vector<double>& mine, std::vector<double>* all);  // rank-major

 private:
  double* dev_ = nullptr;
  size_t cap_ = 0;  // doubles
};

}  // namespace kosmos::cli
