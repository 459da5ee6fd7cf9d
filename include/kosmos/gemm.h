// kosmos::Gemm — a GEMM (dense or grouped) as a one-op plan on the persistent runtime.
//
//   C[m, n_out] = epilogue(A[m, k] · B[k, n]),  bf16 operands, fp32 accumulation, bf16 output.
//   A row-major [m, k] (lda >= k) or column-major, i.e. stored [k, m] (lda >= m);
//   B row-major [k, n] (ldb >= n) or transposed, stored [n, k] (ldb >= k);
//   C row-major, ldc >= n_out. Leading dimensions in elements, multiples of 8 (16-byte TMA rule);
//   base pointers 16-byte aligned.
// Epilogues: kEpilogueAccumulate (C += AB), kEpilogueRowScale (row i times row_scale[i]),
// kEpilogueSwiGLU (n = 2I columns interleaved in blocks of 8: gate cols 16j..16j+7, up cols
// 16j+8..16j+15 -> n_out = I columns silu(gate) * up).
// Grouped (num_groups = G > 0): B is [G][k, n] (or [G][n, k]); rows of group g are A/C rows
// [group_offset[g], group_offset[g] + group_m[g]); group_m and group_offset are DEVICE int32
// arrays read at run time (no host sync), empty groups allowed; m = total rows of A and C.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

#include "kosmos/status.h"

namespace kosmos {

inline constexpr uint32_t kEpilogueStore = 0;
inline constexpr uint32_t kEpilogueAccumulate = 1u << 0;
inline constexpr uint32_t kEpilogueRowScale = 1u << 1;
inline constexpr uint32_t kEpilogueSwiGLU = 1u << 2;

struct GemmArguments {
  const void* a = nullptr;
  int64_t lda = 0;
  bool a_col_major = false;
  const void* b = nullptr;
  int64_t ldb = 0;
  bool b_transposed = false;
  void* c = nullptr;
  int64_t ldc = 0;
  int64_t m = 0, n = 0, k = 0;
  uint32_t epilogue = kEpilogueStore;
  const float* row_scale = nullptr;
  int num_groups = 0;
  const int* group_m = nullptr;
  const int* group_offset = nullptr;
  int64_t ldb_group = 0;
};

// The order in which CTAs claim the output tiles (docs/design/gemm.md, "Claim order"). The planner
// chooses it from an estimate of the HBM traffic; set `run` to impose one instead (tuning, and
// gemm_engine_bench --raster-sweep, which measures the planner's estimate against every order).
struct GemmClaimOrder {
  uint32_t run = 0;      // tiles per task, 1..16; 0: the planner's choice (the other fields unused)
  bool along_n = false;  // a task walks its tiles along N (else down M)
  int group = 1;         // runs claimed together, other-dimension-major
};

// Grouped over M (A row-major, B [K, N], no accumulate) on 128 x 256 tiles: a group's short last row
// block (at most 32 rows) can be computed by the tile of the block before it instead of a tile of its
// own (docs/design/gemm.md, "Merged tails"). Results are the same bit for bit either way; the
// merged tile's extra wgmmas run in every k block, so it pays at short K only. kAuto merges where
// K <= kGemmMergeTailsMaxK: measured on the H100 (issue 3's grouped case and the MoE forward's
// GEMMs), merging was 2-8 % faster at K = 1536, 2048 and 4096 and 4-7 % slower at K = 7168.
enum class GemmMergeTails { kAuto, kOn, kOff };
inline constexpr int64_t kGemmMergeTailsMaxK = 4096;

struct GemmOptions {
  double watchdog_seconds = 10.0;
  bool trace = false;
  bool cpu = false;  // run on the CPU executor (pointers must then be host memory)
  GemmClaimOrder claim_order;
  GemmMergeTails merge_tails = GemmMergeTails::kAuto;  // where the problem admits it (above)
};

class Gemm {
 public:
  // Validates the arguments (messages name the argument, its value and what was expected), chooses
  // the tile shape and the task order, and builds the plan and its executor. Allocates.
  static Status plan(const GemmArguments& args, const GemmOptions& options, std::unique_ptr<Gemm>* out);
  ~Gemm();
  // Points the plan at new operands of the same shapes (re-encodes TMA descriptors on the host).
  Status update(const GemmArguments& args);
  Status run(cudaStream_t stream = nullptr);     // enqueues one launch; capturable; no sync
  Status finish(cudaStream_t stream = nullptr);  // synchronises and reports watchdog errors
  size_t num_tasks() const;
  int tile_n() const;
  uint32_t run_length() const;
  const std::string& raster() const;  // the claim order chosen (and whether tails merge), in words

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Convenience: plan, run once, finish.
Status gemm(const GemmArguments& args, cudaStream_t stream = nullptr);

}  // namespace kosmos
