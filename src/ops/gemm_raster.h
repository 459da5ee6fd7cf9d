// Claim order of a GEMM's tiles (the "raster"): which runs of tiles the tasks carry and in which
// order the CTAs claim them. The order decides what the L2 holds: CTAs that run at the same time
// should read the same A row blocks and B column blocks, or every tile streams its operands from
// HBM. Example (GEMM+RS, Llama-3-70B, one owner's 8 m blocks x 112 n blocks, K = 1024): runs of 8
// down M, n-major, put 132 different B column blocks (66 MB) in flight per tile step -- more than
// the L2 -- so every tile re-read its B block from HBM and the GEMM ran at half speed; runs along
// N with the 8 m blocks claimed together share each B block among 8 CTAs.
//
// plan_gemm_runs tries both run directions, run lengths up to 16 (dense: the makespan-optimal one,
// shorter ones of the same makespan that save a fifth of the bytes, and longer ones) and a range of
// group sizes, estimates each order's time as max(compute makespan, HBM bytes / bandwidth)
// + per-task restart cost, with the HBM bytes from a lockstep simulation of `ctas` CTAs
// (estimate_hbm_bytes), and keeps the cheapest.
//
// Grouped GEMMs read a different B per group, so a B column block is shared only by the group's
// slots. Example (32 DeepSeek-V3 experts, 24,588 rows, K = 7168, N = 4096): runs of 7 down M gave
// each CTA its own (group, n) B block of 3.7 MB; 132 of them do not fit the L2, so B streamed from
// HBM once per tile (13.1 GB by the estimate, 6x the ideal; 420 TFLOP/s measured vs 690 for
// torch._grouped_mm). Runs of 2 along N claimed slot-major put the slots of a few groups in flight
// with all their n blocks, so the CTAs that need an A or B block read it at the same time (3.4 GB).
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
  bool allow_along_n = true;   // false: runs down M only
  // Grouped: B differs per group, and m block i belongs to group (i - m_begin) / slots_per_group
  // (the planner's guess: the device maps slots to groups from the run-time group sizes), so a B
  // column block is (group, n). 0 = dense: every m block shares B.
  int slots_per_group = 0;
  bool exact_groups = false;   // slots_per_group is exact (grouped-K), not a guess
  // Grouped: m blocks from here on are expected empty (worst-case slots past the real ones): they
  // take no time and read nothing. 0 = none (m_end).
  int m_real_end = 0;
};

struct RasterChoice {
  bool along_n = false;
  uint32_t run = 1;
  int group = 1;               // runs per group (the group is claimed other-dimension-major)
  double est_seconds = 0, est_hbm_bytes = 0;
  std::string describe() const;
};

// Estimated HBM bytes of a claim order: tasks start in waves of `p.ctas`; inside a wave the CTAs
// advance one tile per step in lockstep; a step reads the distinct A row and B column blocks of its
// tiles (B blocks per group with p.slots_per_group; tiles from p.m_real_end on read nothing and
// their tasks take no CTA), and a block also read in the previous step is an L2 hit when that
// step's blocks fit in `l2_bytes`.
double estimate_hbm_bytes(const std::vector<GemmRun>& order, const RasterProblem& p, int64_t l2_bytes);
// The same for a dense problem (every m block shares B).
double estimate_hbm_bytes(const std::vector<GemmRun>& order, int ctas, int64_t a_block_bytes, int64_t b_block_bytes,
                          int64_t l2_bytes);

std::vector<GemmRun> plan_gemm_runs(const RasterProblem& p, RasterChoice* chosen = nullptr,
                                    std::vector<RasterChoice>* considered = nullptr);

// Run lengths up to 16 over `dim` tiles, each the shortest for its number of runs (a longer one
// with as many runs only unbalances them): what grouped problems try, and the benchmark's sweep.
std::vector<uint32_t> distinct_run_lengths(int dim);

// The estimate plan_gemm_runs gives one order: runs of `run` tiles along N or down M, claimed in
// groups of `group` runs.
RasterChoice evaluate_order(const RasterProblem& p, bool along_n, uint32_t run, int group);
// That order itself, whether or not the planner would pick it (GemmOptions::claim_order, the
// benchmark's sweep); `described` gets its estimate.
std::vector<GemmRun> make_gemm_runs(const RasterProblem& p, bool along_n, uint32_t run, int group,
                                    RasterChoice* described = nullptr);

// Grouped over M with about kExpertClaimMinSlots..kExpertClaimMaxSlots slots per group (the uniform
// guess; not grouped-K): runs of one slot down M, claimed in groups of slots_per_group runs -- about
// one group's slots, n-major, so they take every n block of their group's B together. The estimate
// prices these orders within 1 % of its choice with 7-15 % more bytes, and it is the estimate that
// errs: ncu (free clocks, gate+up B [N, K]) read 3.8-3.9 GB from DRAM in this order (estimated 3.79)
// against 4.6-5.2 GB for its former choice, runs of 2 along N in groups of 8 (estimated 3.45): the
// lockstep model has the CTAs of a wave walk their runs in step, which they do not.
// Measured on the H100 (twenty-sixth session; each against the planner's former order in one process,
// alternated, 50 reps; two launchers of the same plan differ by 0.1-0.8 %): issue 3's skewed
// 32-expert gate+up (K = 7168) +5.3 / +8.2 % (B [N, K], two calls), +8.0 / +4.3 % (B [K, N]); its down
// (K = 2048, B [N, K]) +1.8 / +6.4 %; 32 equal groups of 768 rows -1.0..+0.8 %; with normal instead of
// uniform operands (gemm_engine_bench --data normal), back to back, -0.8 / -0.4 %: a tie at the lower
// clocks those operands bring. The MoE forward (DeepSeek-V3 proxy, T = 4096) in groups of 8: 5.72 /
// 5.71 -> 5.51 / 5.39 ms; its saved backward 10.92 / 10.95 -> 10.53 / 10.55 ms. Not where tails merge
// in kosmos::Gemm (merged, the same orders lost 0-3 %), nor at two slots per group (the Qwen3 proxy's
// GEMM1 in groups of 2: +7 % time), nor past 16 slots per group, the largest measured (DeepSeek-V3
// T = 8192): a claim group's n-major walk puts a slot's next tile slots_per_group claims after its
// last, so with a few large groups (one group of 200 slots, say) each A row block would be re-read
// for every n block; the planner's order stays there. 0 where it does not apply.
inline constexpr int kExpertClaimMinSlots = 4;
inline constexpr int kExpertClaimMaxSlots = 16;
int expert_claim_group(const RasterProblem& p);

// The raster problem of m blocks [m_begin, m_end) of a planned GEMM (block sizes from its tile
// shape and K; the tile time at the engine's measured ~730 TFLOP/s over 132 SMs). Grouped: slots
// per group and real slots from a uniform split of the rows (see gemm_raster.cpp); grouped-K: the
// exact ceil(M / BM) slots per group and K_total / G per tile. expected_rows > 0 replaces the
// planned total rows (grouped: m; grouped-K: K_total) by the rows expected at run time, for plans
// whose buffers are sized for the worst case (the MoE backward at W = 8 plans K_total = W T k rows
// per rank and receives about T k).
RasterProblem raster_problem(const kernels::gemm::GemmParams& p, int m_begin, int m_end, int ctas,
                             int64_t expected_rows = 0);

// The task payload of a run.
kernels::gemm::GemmTileArgs tile_args(uint32_t problem, const GemmRun& r);

}  // namespace kosmos::ops
