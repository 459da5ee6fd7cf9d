// The unfused MoE forward from standard pieces, the baseline both MoE benchmarks time against the
// fused layer on the same inputs (moe_cublas_pipeline.cu). Per run, on one stream:
//   1. keys: key = s * (E + 1) + e (E for a dropped slot), val = slot index; atomic counts.
//   2. cub::DeviceRadixSort::SortPairs (stable) over the slots of the sources in this process:
//      each source's slots grouped by expert (hence by destination rank), t-major then j inside an
//      expert (= torch.argsort(stable=True)).
//   3. permute: send_x[p] = x_s[slot / k] (gather), inv[slot] = p.
//   4. counts [W, E + 1] to the host, one stream sync (as real unfused pipelines do); one rank per
//      process first all-gathers the per-rank counts with NCCL on the same stream.
//   5. W > 1: the all-to-all of the rows, into each destination's staging rows (source-major):
//      virtual ranks: W² cudaMemcpyAsync; one rank per process: ncclSend / ncclRecv pairs in one
//      group (the rank's own rows included). Then a local regroup (chunk-copy kernel) to
//      expert-major. W = 1: neither (the permuted rows are already expert-major).
//   6. GEMM1 cublasGemmGroupedBatchedEx: one problem per non-empty local expert, bf16 in / out,
//      fp32 compute: h1 [rows, 2I] = recv_x · gate_up_e ([H, 2I] row-major, interleaved).
//   7. SwiGLU elementwise (the layer's interleave: gate column c at 16(c/8) + c%8, up 8 further).
//   8. GEMM2 grouped: out [rows, I -> H] = act · down_e ([I, H] row-major).
//   9. W > 1: un-regroup to source-major, the all-to-all back into each source's permuted layout.
//  10. combine: y_s[t] = bf16( Σ_{j in order} w_s[t,j] · float(back_s[inv[t,j]]) ) (fp32, no atomics).
// Row-major C[M,N] = A[M,K]·B[K,N] is column-major Cᵀ = Bᵀ·Aᵀ: cuBLAS m = N, n = M, both ops N.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kosmos/moe.h"
#include "kosmos/status.h"

namespace kosmos::cli {

class CublasGroupedMoe {
 public:
  static constexpr int kMaxWorld = 16;
  CublasGroupedMoe() = default;
  CublasGroupedMoe(const CublasGroupedMoe&) = delete;
  CublasGroupedMoe& operator=(const CublasGroupedMoe&) = delete;
  ~CublasGroupedMoe();
  // Virtual ranks (comm == nullptr): every rank's sources and experts are in `layer` here, the
  // all-to-all is device copies. One rank per process (comm != nullptr): this process is rank
  // `rank` of `comm`; it reads only its own buffers of `layer` and exchanges rows with NCCL.
  // rows_per_rank: rows each rank receives with this routing (buffer capacity; checked against
  // the device counts every run).
  Status init(const MoeLayer& layer, const std::vector<int64_t>& rows_per_rank, cudaStream_t s, ncclComm_t comm = nullptr,
              int rank = 0);
  Status poison();
  Status run();
  const void* y(int rank) const;  // a rank whose tokens this process holds
  std::string describe() const;

 private:
  struct Chunk {
    int64_t src, dst, rows;
  };
  Status alloc(void** p, int64_t bytes);
  Status grouped(int G, int64_t N, int64_t K, const void* const* b_arr, const void* const* a_arr, void* const* c_arr,
                 const std::vector<int>& m);
  Status all_to_all(bool forward, const std::vector<int64_t>& start, const std::vector<int64_t>& stage_off,
                    const std::vector<int64_t>& nsd);

  int W_ = 1, E_ = 1, k_ = 1, L_ = 1, end_bit_ = 1;
  int r0_ = 0, nr_ = 1;  // the ranks this process holds (their tokens and their experts): [r0_, r0_ + nr_)
  int64_t T_ = 0, H_ = 0, I_ = 0, tk_ = 0, row0_ = 0;  // row0_: first receive row of this process's experts
  cudaStream_t s_ = nullptr;
  ncclComm_t comm_ = nullptr;
  cublasHandle_t h_ = nullptr;
  const void* x_[kMaxWorld] = {};
  const void* ids_[kMaxWorld] = {};
  const void* w_[kMaxWorld] = {};
  void* y_ptrs_[kMaxWorld] = {};
  const void* gu_[kMaxWorld] = {};
  const void* dn_[kMaxWorld] = {};
  std::vector<int64_t> base_;
  std::vector<void*> dev_;
  std::map<void*, size_t> bytes_;
  void *keys_ = nullptr, *keys_sorted_ = nullptr, *vals_ = nullptr, *vals_sorted_ = nullptr, *inv_ = nullptr, *counts_ = nullptr,
       *counts_all_ = nullptr;
  void *send_x_ = nullptr, *recv_x_ = nullptr, *h1_ = nullptr, *act_ = nullptr, *out_ = nullptr, *back_ = nullptr, *y_ = nullptr;
  void *table_ = nullptr, *sort_tmp_ = nullptr, *ws_ = nullptr, *host_ = nullptr;
  size_t table_bytes_ = 0, sort_bytes_ = 0;
  std::vector<int> mm1_;
  std::vector<cublasOperation_t> ta_;
  std::vector<int> mN_, kK_, ldN_, ldK_, one_;
  std::vector<float> alpha_, beta_;
};

}  // namespace kosmos::cli
