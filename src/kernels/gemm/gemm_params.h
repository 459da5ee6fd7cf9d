// GEMM engine parameters shared by the host planner, the CPU executor and the device tile body.
// Plain-old-data, no CUTLASS: included by plan/ and runtime/ as well as by gemm_tile.cuh.
//
//   C[M, N_out] (bf16) = epilogue( A[M, K] (bf16) x B[K, N] (bf16) , fp32 accumulate )
//
// Layouts (element strides, all leading dimensions in elements, every stride 16-byte aligned):
//   A row-major  [M, K], lda >= K     (kGemmAColMajor clear)   -> K-major operand
//   A col-major  stored [K, M], lda >= M (kGemmAColMajor set)  -> the "TN" case, MN-major operand
//   B row-major  [K, N], ldb >= N     (kGemmBTransposed clear) -> MN-major operand ("NN")
//   B transposed stored [N, K], ldb >= K (kGemmBTransposed set) -> K-major operand ("NT")
//   C row-major  [M, N_out], ldc >= N_out, ldc % 8 == 0, C 16-byte aligned.
//
// Epilogue (bit flags, applied in this order):  v = acc;  kGemmEpiSwiGLU: v = silu(gate) * up;
//   kGemmEpiRowScale: v *= row_scale[c_row];  kGemmEpiAccumulate: v += C[c_row, col] (beta = 1);
//   store bf16(v).   Stores go to `c`, which may be any pointer (a peer's buffer included).
//   kGemmEpiSavePreact (with kGemmEpiSwiGLU only, not with kGemmEpiAccumulate): the tile also
//   stores bf16(acc), the pre-activation (all n columns, interleaved as B), to `c_aux` [M, n]
//   (ldc_aux >= n) -- the MoE forward keeps it for the backward instead of recomputing it.
//
// SwiGLU column interleave: B has N = 2 * I columns laid out as blocks of 8 columns,
//   B column 16*j + t      (t < 8) = gate column 8*j + t
//   B column 16*j + 8 + t  (t < 8) = up   column 8*j + t
// and the output has N_out = I = N / 2 columns (I % 8 == 0 required). The 8-column granularity is
// the wgmma accumulator's: each thread holds gate and up of the same output column in registers.
//
// Grouped GEMM (num_groups = G > 0, G <= 256): G problems sharing N and K. B is [G, K, N] (or
// [G, N, K] transposed), group stride ldb_group elements. A rows of group g are rows
// [group_offset[g], group_offset[g] + group_m[g]) of one A matrix with m_total rows; C rows are
// the same rows of C. group_m / group_offset are DEVICE int32 arrays, read by the tile at run time
// (no host sync; empty groups allowed). The planner, not knowing group_m, plans worst-case m
// "slots": num_m_slots = ceil(m_total / BM) + G. A task carries a slot index in tile_m; the device
// maps slot -> (group g, m block b) by a prefix sum over ceil(group_m[g] / BM) and the task
// returns at once for slots past the end (sum of blocks). Slot order = group-major, then m block.
//
// Grouped-K GEMM (kGemmGroupedK, the weight gradients of a grouped layer, dW_g = X_gᵀ · dY_g):
// G problems sharing M and N whose K varies per group. A is col-major, stored [K_total, M]
// (lda >= M), B row-major [K_total, N] (ldb >= N): group g's K rows are rows
// [group_offset[g], group_offset[g] + group_m[g]) of both (group_m = K per group here, read from
// device memory when the tile runs). C is G stacked [M, n_out] blocks: group g's row r is C row
// g * M + r. Tiles per group are fixed (ceil(M / BM) x ceil(N / BN), num_m_tiles = G * ceil(M / BM),
// slot = g * ceil(M / BM) + m block); the k-loop runs ceil(group_m[g] / BK) blocks from
// group_offset[g]; a group with group_m[g] == 0 stores zeros. NOTE: the last k block of a group
// reads up to BK - 1 rows past its end; the caller guarantees those rows of A and B are ZERO
// (offsets padded to multiples of BK with zero rows), so they add exactly nothing. Epilogue:
// store or accumulate (no SwiGLU, no row scale); k = K_total (rows of A and B).
#pragma once

#include <cstdint>
#include <cuda.h>  // CUtensorMap (type only; nothing links libcuda)

#include "kosmos/plan.h"  // KOSMOS_HOST_DEVICE

namespace kosmos::kernels::gemm {

enum GemmEpilogueFlags : uint32_t {
  kGemmEpiStore = 0,
  kGemmEpiAccumulate = 1u << 0,  // C += result (beta = 1)
  kGemmEpiRowScale = 1u << 1,    // result *= row_scale[row]
  kGemmEpiSwiGLU = 1u << 2,      // result = silu(gate) * up, see the interleave above
  kGemmEpiSavePreact = 1u << 3,  // also store bf16(acc) to c_aux (SwiGLU only), see above
  // Set by make_gemm_params (not by callers) when it encoded tma_c: the staged epilogue stores
  // whole 16-row warp slices with TMA (asynchronously; the next tile's MMAs do not wait for them).
  kGemmEpiTmaStore = 1u << 4,
};

enum GemmLayoutFlags : uint32_t {
  kGemmAColMajor = 1u << 0,    // A stored [K, M]
  kGemmBTransposed = 1u << 1,  // B stored [N, K]
  kGemmGroupedK = 1u << 2,     // grouped problem whose K (not M) varies per group, see above
  // Set by make_gemm_params: tiles of at most one ring of k blocks keep the operand they share
  // with the previous tile of their run in shared memory (gemm_tile.cuh, StageWalk).
  kGemmKeepOperands = 1u << 3,
  // Grouped over M (A row-major, B [K, N], 128 x 256 tiles): a group's last m block of at most
  // kGemmTailRows rows is computed by the tile of the block before it, which then covers 128 + tail
  // rows (gemm_group_blocks; the tail's product runs as Bᵀ · Aᵀ on the B tile already in shared
  // memory). The slot that block had is not used: the group takes one slot less.
  kGemmMergeTails = 1u << 4,
  // Grouped over M, runs of one tile: the task's (slot, n block) is a position in the claim order,
  // not the tile. Tile index L = slot * num_n_tiles + n maps at run time to the group-major,
  // n-major order of the real tiles (gemm_expert_major_tile): the slots of one group at one n block
  // are consecutive claims, so they read that group's B column block together from the L2.
  kGemmExpertMajor = 1u << 5,
};

// Tile shapes the engine is compiled for. BM = 128 and BK = 64 always; two consumer warpgroups
// each own BM/2 rows (cooperative); the ring depth is chosen to fill shared memory.
enum class GemmTileShape : uint32_t {
  k128x256 = 0,  // 4 stages x 48 KB
  k128x128 = 1,  // 6 stages x 32 KB
  k128x64 = 2,   // 8 stages x 24 KB (small M x N problems: more tiles for the SMs)
  kAuto = 0xffffffffu,
};
inline constexpr int kGemmBlockM = 128;
inline constexpr int kGemmBlockK = 64;
// With the ring carry, a run's producer claims the CTA's next task this many k blocks before its
// last load (gemm_tile.cuh): the claim, the next task's coordinates and readiness are a chain of L2
// round trips (~3 us) that must end before the consumers' last k blocks and epilogue do (~4 us
// after the last load at 128 x 256), or the carry lengthens the task it should shorten.
inline constexpr int kGemmClaimLead = 8;
#ifndef KOSMOS_GEMM_TAIL_ROWS  // experiments only: the whole build must agree
#define KOSMOS_GEMM_TAIL_ROWS 32
#endif
inline constexpr int kGemmTailRows = KOSMOS_GEMM_TAIL_ROWS;  // rows a merged tail may have (kGemmMergeTails)

// Slots (m blocks) of a group of mg rows: ceil(mg / 128), one less when its short last block is
// merged into the block before it (merge: kGemmMergeTails). *tail = the merged block's rows (0 if
// none); that block is then block (slots - 1), covering 128 + *tail rows.
KOSMOS_HOST_DEVICE inline int gemm_group_blocks(int mg, bool merge, int* tail) {
  const int blocks = mg > 0 ? (mg + kGemmBlockM - 1) / kGemmBlockM : 0;
  const int last = mg - (blocks - 1) * kGemmBlockM;
  const bool merged = merge && blocks >= 2 && last <= kGemmTailRows;
  *tail = merged ? last : 0;
  return merged ? blocks - 1 : blocks;
}
// kGemmExpertMajor's map, one thread (the host tile and tests; the device does the same search
// warp-wide in map_group_slot): tile index L of the claim order -> the group g whose tiles
// [P_g * nt, P_{g+1} * nt) hold it (P: the prefix of the groups' slots, `blocks(g)`), then n block
// and m block of g: n = (L - P_g nt) / slots_g, block = (L - P_g nt) % slots_g. False past the last tile.
template <class Blocks>
KOSMOS_HOST_DEVICE inline bool gemm_expert_major_tile(Blocks blocks, int num_groups, int64_t L, int nt, int* group,
                                                      int* block, int* n) {
  int64_t first = 0;
  for (int g = 0; g < num_groups; ++g) {
    const int c = blocks(g);
    const int64_t end = first + int64_t(c) * nt;
    if (L < end) {
      const int64_t local = L - first;
      *group = g;
      *n = int(local / c);
      *block = int(local % c);
      return true;
    }
    first = end;
  }
  return false;
}
inline constexpr int gemm_block_n(GemmTileShape s) {
  return s == GemmTileShape::k128x128 ? 128 : s == GemmTileShape::k128x64 ? 64 : 256;
}
// The inverse: the tile shape of output width bn (256, 128, 64); kAuto for any other value.
inline constexpr GemmTileShape gemm_tile_shape_of_width(int bn) {
  return bn == 256 ? GemmTileShape::k128x256 : bn == 128 ? GemmTileShape::k128x128
                   : bn == 64 ? GemmTileShape::k128x64 : GemmTileShape::kAuto;
}

// Task payload (plan::Task::arg). A run of `count` tiles: (tile_m + i, tile_n) for i < count,
// i.e. the run walks down M (grouped: consecutive slots), sharing the B column block; with
// kGemmRunAlongN it is (tile_m, tile_n + i), sharing the A row block. The tile pipeline overlaps
// the loads of tile i+1 with the math and epilogue of tile i inside one run. Which direction (and
// the claim order of runs) is the planner's choice for L2 reuse: ops::plan_gemm_runs.
enum GemmRunFlags : uint32_t {
  kGemmRunAlongN = 1u << 0,
};
struct GemmTileArgs {
  uint32_t problem;  // index into the runtime's GemmParams array (the engine ignores it)
  uint32_t tile_m;   // dense: m block; grouped: first m slot; grouped-K: g * ceil(M / BM) + m block
  uint32_t tile_n;   // n block (in units of BN columns of B)
  uint32_t count;    // tiles in the run, >= 1
  uint32_t flags;    // GemmRunFlags
  uint32_t reserved[3];
};
static_assert(sizeof(GemmTileArgs) <= 40);

// Grid-invariant parameters of one GEMM problem. Lives in the kernel's __grid_constant__
// parameter blob: the TMA loads take the ADDRESS of tma_a / tma_b, so the device code must see
// the params in param (or global) memory, never a local copy.
struct GemmParams {
  CUtensorMap tma_a;  // A tile box: [BM rows, 64 k] (row-major A) or [64 k, 64 m] x BM/64 (col-major)
  CUtensorMap tma_b;  // 3-D (.., .., group): [BN n, 64 k] or [64 k, 64 n] x BN/64 boxes
  CUtensorMap tma_c;  // with kGemmEpiTmaStore: C [rows, n_out], box [16 rows, 64 columns], 128-byte swizzle
  CUtensorMap tma_t;  // with kGemmMergeTails: A again, box [kGemmTailRows rows, 64 k] (a merged tail's rows)
  void* c;            // bf16 [rows, ldc]
  const float* row_scale;    // [rows] fp32, kGemmEpiRowScale only
  const int* group_m;        // [G] device, grouped only (grouped-K: K of each group)
  const int* group_offset;   // [G] device, grouped only (grouped-K: first K row of each group)
  int64_t ldc;               // elements
  void* c_aux;               // bf16 [rows, ldc_aux], kGemmEpiSavePreact only
  int64_t ldc_aux;           // elements
  int32_t m;                 // dense: rows; grouped: m_total (rows of A and C); grouped-K: M per group
  int32_t n;                 // columns of B
  int32_t n_out;             // columns of C (n, or n / 2 with SwiGLU)
  int32_t k;                 // grouped-K: K_total, the rows of A and B
  int32_t num_groups;        // 0 = dense
  uint32_t epilogue;         // GemmEpilogueFlags
  uint32_t layout;           // GemmLayoutFlags
  GemmTileShape tile_shape;
  int32_t num_m_tiles;       // dense: ceil(m / BM); grouped: worst-case slots ceil(m / BM) + G;
                             // grouped-K: G * ceil(m / BM)
  int32_t num_n_tiles;       // ceil(n / BN)
};
static_assert(sizeof(GemmParams) <= 2048);

}  // namespace kosmos::kernels::gemm
