// Host side of the GEMM engine: input validation and TMA descriptor encoding (make_gemm_params),
// the tile-shape heuristic, tile counts, and the CPU executor's implementation of one tile task.
#pragma once

#include <cstdint>

#include "gemm_params.h"
#include "kosmos/status.h"

namespace kosmos::kernels::gemm {

// A bf16 tensor map with the engine's 128-byte swizzle (what make_gemm_params encodes A, B and C
// with); dims and box innermost first, strides (rank - 1 of them) in bytes. Through the driver entry
// point, so nothing links libcuda. Also used by benchmarks/gather_probe.cu.
Status encode_bf16_tensor_map(CUtensorMap* map, const char* what, const void* base, int rank, const cuuint64_t* dims,
                              const cuuint64_t* strides_bytes, const cuuint32_t* box);

enum class GemmDType : uint32_t { kBF16 = 0, kF16 = 1, kF32 = 2 };
const char* to_string(GemmDType t);

// One GEMM (or grouped GEMM) as the caller describes it. Shapes and leading dimensions in
// elements; see gemm_params.h for the layouts, the epilogue flags and the SwiGLU interleave.
struct GemmDesc {
  const void* a = nullptr;  // [m, k] row-major (lda >= k) or, with a_col_major, [k, m] (lda >= m)
  int64_t lda = 0;
  bool a_col_major = false;
  GemmDType a_dtype = GemmDType::kBF16;

  const void* b = nullptr;  // [G][k, n] (ldb >= n) or, with b_transposed, [G][n, k] (ldb >= k)
  int64_t ldb = 0;
  bool b_transposed = false;
  int64_t ldb_group = 0;    // elements between groups of B (grouped only; 0 = packed)
  GemmDType b_dtype = GemmDType::kBF16;

  void* c = nullptr;        // [m, n_out] row-major, ldc >= n_out; may point into a peer's buffer
  int64_t ldc = 0;
  GemmDType c_dtype = GemmDType::kBF16;

  int64_t m = 0;            // dense: rows; grouped: total rows of A and C (m_total)
  int64_t n = 0;            // columns of B (2 * I with SwiGLU)
  int64_t k = 0;

  int num_groups = 0;               // 0 = dense; grouped: 1..256
  bool grouped_k = false;           // grouped problem whose K varies per group (gemm_params.h):
                                    // m = M per group, k = K_total, group_m / group_offset = K rows
  const int* group_m = nullptr;     // [num_groups] device (host for the CPU executor)
  const int* group_offset = nullptr;

  uint32_t epilogue = kGemmEpiStore;  // GemmEpilogueFlags
  const float* row_scale = nullptr;   // [m] fp32, with kGemmEpiRowScale
  void* c_aux = nullptr;              // [m, n] bf16 pre-activation, with kGemmEpiSavePreact
  int64_t ldc_aux = 0;                // >= n, multiple of 8

  GemmTileShape tile_shape = GemmTileShape::kAuto;
  int num_sms = 132;          // for the tile-shape heuristic
  bool encode_tma = true;     // false: CPU executor only, no driver call, tensor maps left zero
  // With encode_tma: store the staged epilogue through a C tensor map (kGemmEpiTmaStore) when the
  // epilogue does not accumulate and C is this device's memory (cudaPointerGetAttributes; a peer's
  // buffer keeps the 16-byte stores). KOSMOS_GEMM_TMA_STORE=0 in the environment turns it off.
  bool tma_store = true;
  // Tiles of a run that share A (runs along N) or B (runs down M) and have at most one ring of
  // k blocks (K <= 256 with 128 x 256 tiles) load the shared operand once (kGemmKeepOperands).
  // KOSMOS_GEMM_KEEP_OPERANDS=0 in the environment turns it off.
  bool keep_operands = true;
  // Grouped over M only, A row-major, B [K, N], 128 x 256 tiles, no accumulate: a group's short last
  // m block (<= kGemmTailRows rows) is computed by the block before it (kGemmMergeTails,
  // gemm_params.h). Changes which rows each slot covers: GEMMs whose slots must cover the same rows
  // (the MoE's GEMM1 and GEMM2) set it alike. KOSMOS_GEMM_MERGE_TAILS=0 in the environment turns it off.
  bool merge_tails = false;
  // Grouped over M, planned in runs of one tile: claim position -> tile in group-major, n-major order
  // (kGemmExpertMajor, gemm_params.h). The tiles a task computes are then known only at run time, so
  // whatever waits for them must wait for the whole problem.
  bool expert_major = false;
};

// Validates `desc` (every failure names the argument, its value and what was expected) and fills
// `params`, including the TMA tensor maps (driver entry point fetched through the runtime, so the
// library does not link libcuda).
Status make_gemm_params(const GemmDesc& desc, GemmParams* params);

// Tile shape from the problem and the SM count: the larger tile unless the smaller one fills the
// machine's waves clearly better.
GemmTileShape choose_tile_shape(int64_t m, int64_t n, int64_t k, int num_groups, int num_sms);

// Tiles (grouped: worst-case slots) the planner must cover: num_m_tiles * num_n_tiles.
inline int64_t num_tiles(const GemmParams& p) { return int64_t(p.num_m_tiles) * p.num_n_tiles; }

// CPU executor: the same task as gemm_tile on the device (same slot mapping, same epilogue,
// fp32 accumulation over bf16 inputs, bf16 output). Pointers in `desc` must be host-accessible.
void gemm_tile_host(const GemmDesc& desc, const GemmParams& params, const GemmTileArgs& args);

}  // namespace kosmos::kernels::gemm
