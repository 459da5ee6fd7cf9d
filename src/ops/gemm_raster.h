// Claim order of a GEMM's tiles (the "raster"): which runs of tiles the tasks carry and in which
// order the CTAs claim them. The order decides what the L2 holds: CTAs that run at the same time
// should read the same A row blocks and B column blocks, or every tile streams its operands from
// HBM. Example (GEMM+RS, Llama-3-70B, one owner's 8 m blocks x 112 n blocks, K = 1024): runs of 8
// down M, n-major, put 132 different B column blocks (66 MB) in flight per tile step -- more than
// the L2 -- so every tile re-read its B block from HBM and the GEMM ran at half speed; runs along
// N with the 8 m blocks claimed together share each B block among 8 CTAs.
//
// plan_gemm_runs tries both run directions and a range of group sizes, estimates each order's
// time as max(compute makespan, HBM bytes / bandwidth) + per-task restart cost, with the HBM
// bytes from a lockstep simulation of `ctas` CTAs (estimate_hbm_bytes), and keeps the cheapest.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/gemm/gemm_params.h"

namespace kosmos::ops {

// Run length for `ctas` CTAs sharing these tiles: minimises the makespan ceil(tasks / ctas) * run,
// longer runs on ties (a run overlaps the next tile's loads with the current tile's epilogue).
uint32_t choose_run_length(int64_t m_tiles, int64_t n_tiles, int ctas);

// One task's run of tiles: (tile_m + i, tile_n) for i < count, or (tile_m, tile_n + i) with
// along_n (kernels::gemm::kGemmRunAlongN).
struct GemmRun {
  uint32_t tile_m = 0, tile_n = 0, count = 1;
  bool along_n = false;
};

struct RasterProblem {
  int m_begin = 0, m_end = 0;  // m blocks [m_begin, m_end) (dense m blocks or grouped slots)
  int n_tiles = 0;
  int ctas = 132;              // CTAs that claim these tasks concurrently (the HBM simulation)
  int share_ctas = 0;          // CTAs' worth of time these tasks get (the makespan); 0 = ctas.
                               // Plans interleaving W ranks' GEMMs give each ctas / W.
  int64_t a_block_bytes = 0;   // one A row block: BM x K x 2
  int64_t b_block_bytes = 0;   // one B column block: BN x K x 2
  double tile_seconds = 0;     // one tile's mainloop at the engine's rate
  bool allow_along_n = true;   // false: runs down M only (e.g. grouped slots that share a group)
};

struct RasterChoice {
  bool along_n = false;
  uint32_t run = 1;
  int group = 1;               // runs per group (the group is claimed other-dimension-major)
  double est_seconds = 0, est_hbm_bytes = 0;
  std::string describe() const;
};

// Estimated HBM bytes of a claim order: tasks start in waves of `ctas`; inside a wave the CTAs
// advance one tile per step in lockstep; a step reads the distinct A row and B column blocks of its
// tiles, and a block also read in the previous step is an L2 hit when that step's blocks fit in
// `l2_bytes`.
double estimate_hbm_bytes(const std::vector<GemmRun>& order, int ctas, int64_t a_block_bytes, int64_t b_block_bytes,
                          int64_t l2_bytes);

std::vector<GemmRun> plan_gemm_runs(const RasterProblem& p, RasterChoice* chosen = nullptr,
                                    std::vector<RasterChoice>* considered = nullptr);

// The raster problem of m blocks [m_begin, m_end) of a planned GEMM (block sizes from its tile
// shape and K; the tile time at the engine's measured ~730 TFLOP/s over 132 SMs).
RasterProblem raster_problem(const kernels::gemm::GemmParams& p, int m_begin, int m_end, int ctas);

// The task payload of a run.
kernels::gemm::GemmTileArgs tile_args(uint32_t problem, const GemmRun& r);

}  // namespace kosmos::ops
