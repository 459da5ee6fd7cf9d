// Internal to the MoE layer (src/ops/moe_*.cpp): one direction of the layer as a list of tasks
// tagged with their phase, from which moe_layer.cpp builds the fused plan (every wait and signal,
// one launch) and the unfused composition (one launch per phase, no counters, no GEMM wait rules).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/gemm/gemm_params.h"
#include "kernels/moe_tasks.h"
#include "kosmos/moe.h"
#include "kosmos/plan.h"
#include "ops/gemm_raster.h"
#include "ops/op_kernel.h"
#include "ops/op_runner.h"
#include "ops/rank_buffers.h"

namespace kosmos::ops::moe {

struct TaskRec {
  plan::TaskKind kind = plan::TaskKind::kNop;
  uint32_t rank = 0;
  uint32_t args[plan::kTaskArgWords] = {};
  std::vector<plan::Wait> waits;
  std::vector<plan::Signal> signals;
  int phase = 0;
};

struct DirectionPlan {
  std::string name;  // plan name ("moe_forward", "moe_backward")
  std::vector<TaskRec> tasks;
  std::vector<GemmProblemSpec> problems;
  std::vector<std::string> problem_names;  // per entry of problems (trace breakdowns)
  uint32_t num_counters = 0;
  std::vector<std::string> phase_names;  // per phase (task phase index): the unfused composition's launches
  std::string summary;
};

// Appends a task with `bytes` of payload to `tasks` and returns it (for its waits and signals).
inline TaskRec& add_task(std::vector<TaskRec>& tasks, plan::TaskKind kind, uint32_t rank, const void* args, size_t bytes,
                         int phase) {
  TaskRec t;
  t.kind = kind;
  t.rank = rank;
  std::memcpy(t.args, args, bytes);
  t.phase = phase;
  tasks.push_back(std::move(t));
  return tasks.back();
}

// Phases of the tasks both directions start with.
// route_count holds the count tasks of a split route (none with one chunk, so no launch): the unfused
// composition has no counters, only launch boundaries between phases.
struct FrontPhases {
  int route_count, route, offsets, dispatch;
};
// Counters those tasks signal: counts (route rank(s, 0) -> every rank), layout (offsets -> own rank),
// arrive_all and arrive[l] (dispatch -> destination, per local expert l), counted (route count
// chunks -> own rank) and routed (route rank chunks -> own rank; dispatch and combine wait for it).
struct FrontCounters {
  uint32_t counts, layout, arrive_all, arrive, counted, routed;
};

// A task that reads the route's pos / perm of its rank waits for every route chunk of that rank
// (routed: the backward after a saving forward, whose routing is already there).
inline void wait_routed(TaskRec& t, const FrontCounters& c, bool routed = false) {
  if (!routed) t.waits.push_back({c.routed, plan::kWaitAll});
}

// Route tasks per source rank and stage: MoeConfig::route_chunks, or when it is 0, about 2048
// (token, slot) entries each (at T k = 32768 one task took ~60 us while the other SMs waited), at
// most kMaxRouteChunks.
inline uint32_t route_chunks(const MoeConfig& cfg) {
  if (cfg.route_chunks > 0) return uint32_t(cfg.route_chunks);
  const int64_t n = int64_t(cfg.tokens) * cfg.top_k;
  return uint32_t(std::clamp<int64_t>(n / 2048, 1, kernels::kMaxRouteChunks));
}

// Route, offsets and dispatch tasks (forward and backward alike; the backward's dispatch also moves
// dy rows, which its MoeArgs flags say). routed (the backward after a forward that saved its
// activations): route and offsets are left out -- the forward's routing workspaces and layout are
// still in place -- and dispatch waits for nothing. `moe_args(a, b, c)` makes a task payload, `add(kind, rank,
// &args, sizeof args, phase)` appends a TaskRec and returns it. Dispatch tasks cover blocks of
// experts and, when there are few (source, expert) pairs with many rows each, slices of the rows.
// Returns how dispatch was cut: experts per task and row slices.
struct DispatchCut {
  uint32_t experts_per_task, slices;
};
template <class Args, class Add>
DispatchCut add_front_tasks(const MoeConfig& cfg, int ctas, const FrontPhases& ph, const FrontCounters& c, Args&& moe_args,
                     Add&& add, bool routed = false) {
  const uint32_t W = uint32_t(cfg.world), E = uint32_t(cfg.num_experts), L = E / W;
  // Route: with C > 1 chunks, C count tasks per rank, then C rank tasks that wait for them; rank
  // chunk 0 pushes the counts.
  const uint32_t C = routed ? 0 : route_chunks(cfg);
  auto route_task = [&](uint32_t stage, uint32_t ch, uint32_t s) -> TaskRec& {
    const auto a = moe_args(ch | (C << 16), stage, 0);
    return add(plan::TaskKind::kMoeRoute, s, &a, sizeof(a),
               stage == kernels::kMoeRouteStageRank ? ph.route : ph.route_count);
  };
  for (uint32_t ch = 0; C > 1 && ch < C; ++ch)
    for (uint32_t s = 0; s < W; ++s) route_task(0, ch, s).signals.push_back({c.counted, uint16_t(s), 1});
  for (uint32_t ch = 0; ch < C; ++ch)
    for (uint32_t s = 0; s < W; ++s) {
      TaskRec& t = route_task(kernels::kMoeRouteStageRank, ch, s);
      if (C > 1) t.waits.push_back({c.counted, plan::kWaitAll});
      t.signals.push_back({c.routed, uint16_t(s), 1});
      if (ch == 0)
        for (uint32_t r = 0; r < W; ++r) t.signals.push_back({c.counts, uint16_t(r), 1});
    }
  for (uint32_t r = 0; r < W && !routed; ++r) {
    const auto a = moe_args(0, 0, 0);
    TaskRec& t = add(plan::TaskKind::kMoeOffsets, r, &a, sizeof(a), ph.offsets);
    t.waits.push_back({c.counts, plan::kWaitAll});
    t.signals.push_back({c.layout, uint16_t(r), 1});
  }
  const uint32_t epb = cfg.dispatch_experts_per_task > 0
                           ? uint32_t(cfg.dispatch_experts_per_task)
                           : std::max<uint32_t>(1, uint32_t((int64_t(W) * E + 4 * ctas - 1) / (4 * ctas)));
  // Row slices split an expert's rows from one source over several tasks when there are few
  // (source, expert) pairs and many rows each (W = 1, T = 4096: 1024 rows per expert).
  const uint32_t blocks = W * W * ((L + epb - 1) / epb);
  const int64_t rows_per_pair = std::max<int64_t>(1, int64_t(cfg.tokens) * cfg.top_k / E);
  const uint32_t num_slices =
      cfg.dispatch_slices > 0
          ? uint32_t(cfg.dispatch_slices)
          : uint32_t(std::clamp<int64_t>(std::min<int64_t>((4 * ctas + blocks - 1) / blocks, rows_per_pair / 16), 1, 64));
  for (uint32_t l0 = 0; l0 < L; l0 += epb)
    for (uint32_t sl = 0; sl < num_slices; ++sl)
      for (uint32_t s = 0; s < W; ++s)
        for (uint32_t d = 0; d < W; ++d) {
          const uint32_t l1 = std::min(L, l0 + epb);
          const auto a = moe_args(d | (sl << 16) | (num_slices << 24), d * L + l0, d * L + l1);
          TaskRec& t = add(plan::TaskKind::kMoeDispatch, s, &a, sizeof(a), ph.dispatch);
          if (!routed) t.waits.push_back({c.layout, 1});
          wait_routed(t, c, routed);  // reads perm
          t.signals.push_back({c.arrive_all, uint16_t(d), 1});
          for (uint32_t l = l0; l < l1; ++l) t.signals.push_back({c.arrive + l, uint16_t(d), 1});
        }
  return {epb, num_slices};
}

// A rank's worst-case GEMM slots (sized for W T k rows) cut into runs: runs of `run` slots up to
// `head_end`, the slots expected to hold rows with a 2x margin, then runs of `tail` = 4 run slots
// (at least 16, at most kMaxSlotRun).
// Under uniform routing a rank receives about T k of its W T k worst-case rows, so at W = 8 about
// seven in eight slots are empty and every task over them only finds that out (~2.5 us each on the
// H200: 245,000 such tasks in the Qwen3 W = 8 backward); longer tail runs make 4x fewer of them,
// and a rank that does receive more than twice its share still computes every row, in longer tasks.
struct SlotRuns {
  uint32_t slots = 0, run = 1, head_end = 0, tail = 1;
  uint32_t head_runs() const { return (head_end + run - 1) / run; }
  uint32_t size() const { return head_runs() + (slots - head_end + tail - 1) / tail; }
  uint32_t start(uint32_t i) const { return i < head_runs() ? i * run : head_end + (i - head_runs()) * tail; }
  uint32_t count(uint32_t i) const {
    return std::min<uint32_t>(start(i) + (i < head_runs() ? run : tail), slots) - start(i);
  }
  uint32_t of_slot(uint32_t s) const { return s < head_end ? s / run : head_runs() + (s - head_end) / tail; }
};
// expected_slots: the slots uniform routing fills; tail runs are at most kMaxSlotRun slots (the
// SwiGLU backward's slots per task: one swiglu_backward task covers a whole run).
inline constexpr uint32_t kMaxSlotRun = 64;
static_assert(kMaxSlotRun <= uint32_t(kernels::kMoeSlotsPerTaskMax));
inline SlotRuns make_slot_runs(uint32_t slots, uint32_t run, int64_t expected_slots) {
  SlotRuns r;
  r.slots = slots;
  r.run = std::max<uint32_t>(1, run);
  const int64_t head = (2 * expected_slots + r.run - 1) / r.run * r.run;  // whole runs
  r.head_end = uint32_t(std::min<int64_t>(slots, head));
  // at least 16: one-slot head runs (slot_raster's usual choice since the sixth session) would
  // otherwise give 4-slot tail runs, four times the empty tasks of the runs of 4 chosen before
  r.tail = std::max(r.run, std::min<uint32_t>(kMaxSlotRun, std::max<uint32_t>(16, 4 * r.run)));
  return r;
}

// The claim order of slot runs, in steps: step i holds `group` consecutive head runs, claimed n-major
// (for each n block, every run of the step), so the tiles that read one expert's weight column block
// run at the same time and share it through the L2; the tail runs (expected empty) are one step each.
struct SlotSteps {
  SlotRuns runs;
  uint32_t group = 1;
  uint32_t head_steps() const { return (runs.head_runs() + group - 1) / group; }
  uint32_t size() const { return head_steps() + (runs.size() - runs.head_runs()); }
  uint32_t first_run(uint32_t s) const { return s < head_steps() ? s * group : runs.head_runs() + (s - head_steps()); }
  uint32_t end_run(uint32_t s) const {
    return s < head_steps() ? std::min(runs.head_runs(), (s + 1) * group) : first_run(s) + 1;
  }
  uint32_t of_run(uint32_t ri) const { return ri < runs.head_runs() ? ri / group : head_steps() + (ri - runs.head_runs()); }
  // f(run, n block) for the tiles of step s, in its claim order: n-major over the step's runs
  // (n_step > 1: every n_step-th n block, for tasks that walk n_step tiles along N).
  template <class F>
  void for_each_tile(uint32_t s, int n_tiles, F&& f, int n_step = 1) const {
    for (int nb = 0; nb < n_tiles; nb += n_step)
      for (uint32_t r = first_run(s); r < end_run(s); ++r) f(r, nb);
  }
  // The task payload of run r's tiles at n block nb of GEMM problem `problem`.
  kernels::gemm::GemmTileArgs tile_args(uint32_t problem, uint32_t r, int nb) const {
    return kernels::gemm::GemmTileArgs{problem, runs.start(r), uint32_t(nb), runs.count(r), 0, {}};
  }
};

// Decode regime: under uniform routing an expert receives at most one 128-row block (T k W rows over
// E experts), so every GEMM tile streams its weight block with a few rows: HBM-bound. Both
// directions then claim short runs with consumers about two waves behind their producers (the
// weight streams overlap); otherwise each consumer GEMM goes after all of its producer's tiles.
inline bool decode_regime(const MoeConfig& cfg) {
  return int64_t(cfg.tokens) * cfg.top_k * cfg.world <= int64_t(kernels::gemm::kGemmBlockM) * cfg.num_experts;
}

// Run length and claim group of a GEMM grouped over a rank's slots (p: the planned problem, sized for
// the worst case). Decode regime: runs of one slot, one per step (the weight streams spread over every
// SM; measured, see decode_regime). Otherwise, with one rank (W = 1), the raster planner's choice
// among runs down M (the counters are per slot run) for the rows the rank expects under uniform
// routing: the makespan-only choice (choose_run_length) took the longest run on ties, and a run
// re-reads its expert's weight column block from HBM for every slot it walks (Qwen3 proxy, T = 4096,
// GEMM1: runs of 7 slots, 8.4 GB from HBM by the estimate; runs of one slot claimed n-major, so an
// expert's slots read each block together: 4.7 GB; measured 3.43 -> 3.04 ms). With W > 1 ranks the
// makespan choice stays (`est_tiles` slots, `n_tiles` per slot, one run per step): the estimate
// models one rank's CTAs with the whole L2, while W virtual ranks share it (Qwen3 W = 8: the
// planner's runs of 8 / 4 ran 24.98 ms, the makespan's 4 / 16 24.13 ms, one rep each).
// override_run > 0: runs of that length, one per step (the order before the sixth session).
// Where ops::expert_claim_group applies (and no run is set), runs of one slot in groups of that many
// (about one expert's slots) instead of the planner's choice (measured on the forward's GEMM1 / GEMM2
// and the backward's H1 / dA' / dX: see ops::expert_claim_group and moe_backward.cpp).
// override_group > 0: that many runs per step, whatever the run length.
struct SlotRaster {
  uint32_t run = 1, group = 1;
  std::string describe;
};
inline SlotRaster slot_raster(const kernels::gemm::GemmParams& p, int64_t expected_rows, int64_t est_tiles, int n_tiles,
                              int world, int ctas_per_rank, bool decode, int override_run, int override_group = 0) {
  SlotRaster r;
  ctas_per_rank = std::max(1, ctas_per_rank);
  if (override_run > 0 || decode || world > 1) {
    r.run = override_run > 0 ? uint32_t(override_run)
            : decode         ? 1u
                             : ops::choose_run_length(est_tiles, n_tiles, ctas_per_rank);
    r.describe = std::string("runs of ") + std::to_string(r.run) +
                 (override_run > 0 ? " (set)" : decode ? " (decode)" : " (makespan, W > 1)");
  } else {
    ops::RasterProblem rp = ops::raster_problem(p, 0, int(p.num_m_tiles), ctas_per_rank, expected_rows);
    rp.allow_along_n = false;
    ops::RasterChoice choice;
    ops::plan_gemm_runs(rp, &choice);
    r.run = choice.run;
    r.group = uint32_t(std::max(1, choice.group));
    r.describe = choice.describe();
    if (const int g = ops::expert_claim_group(rp); g > 0) {
      r.run = 1;
      r.group = uint32_t(g);
      r.describe += "; taken: runs of 1 in groups of " + std::to_string(g) + " (one expert's slots)";
    }
  }
  if (override_group > 0) {
    r.group = uint32_t(override_group);
    r.describe += "; claim groups of " + std::to_string(override_group) + " runs (set)";
  }
  return r;
}

// Whether a slot GEMM is claimed expert-major (kGemmExpertMajor; MoeConfig::gemm1_expert_major /
// backward_expert_major = `setting`): only one-slot runs claimed one by one, whose claim order the
// remap permutes, and not in the decode regime (an expert has at most one slot there).
inline bool expert_major_applies(int setting, const SlotRaster& r, bool decode) {
  return setting != 0 && r.run == 1 && r.group == 1 && !decode;
}

// Marks problem `which` of each of the `world` ranks' `per_rank` problems expert-major (the plans
// list every rank's problems in turn).
inline void mark_expert_major(std::vector<GemmProblemSpec>& problems, uint32_t world, uint32_t per_rank,
                              uint32_t which) {
  for (uint32_t d = 0; d < world; ++d) problems[per_rank * d + which].desc.expert_major = true;
}

// Tokens per combine task (the override when set): about four tasks per CTA, rounded up to a
// multiple of the op kernel's 12 warps -- the combine body gives each warp one token at a time, so
// the 8 tokens chosen before (T = 4096, 132 CTAs) left 4 of 12 warps idle in every task, and 512
// tasks of one token-time each made ~4 waves where 342 tasks of 12 make ~3 (sixteenth session).
inline uint32_t combine_tokens_per_task(const MoeConfig& cfg, int ctas) {
  if (cfg.combine_tokens_per_task > 0) return uint32_t(cfg.combine_tokens_per_task);
  const uint32_t per_rank = std::max(1u, 4u * uint32_t(std::max(1, ctas)) / uint32_t(cfg.world));
  const uint32_t tpt = std::max<uint32_t>(1, (uint32_t(cfg.tokens) + per_rank - 1) / per_rank);
  const uint32_t warps = uint32_t(kOpKernelWarps);
  return (tpt + warps - 1) / warps * warps;
}

// Steps (of `tasks_per_step` tasks each) that make about two waves of `ctas` CTAs: how far a
// consumer is queued behind its producer so that a CTA claiming it rarely finds its input unfinished.
inline uint32_t two_waves_of_steps(int64_t ctas, int64_t tasks_per_step) {
  return std::max<uint32_t>(1, uint32_t((2 * ctas + tasks_per_step - 1) / tasks_per_step));
}

// A consumer GEMM's lag behind its producer, in steps: the override when set (capped at the step
// count), two waves in the decode regime, otherwise every step (all producer tiles first).
inline uint32_t consumer_lag(int override_steps, bool decode, int64_t ctas, int64_t tasks_per_step, uint32_t steps) {
  if (override_steps > 0) return std::min<uint32_t>(uint32_t(override_steps), steps);
  return decode ? two_waves_of_steps(ctas, tasks_per_step) : steps;
}

// The backward pass of `cfg` (cfg.backward set, validated) over the layer's buffers `mem`; `ctas`
// sizes the tasks (as for the forward: all ranks' CTAs), `num_sms` is one GPU's (the GEMMs' tile
// shape choice). Design: docs/design/moe.md.
Status plan_backward(const MoeConfig& cfg, const RankBuffers& mem, int ctas, int num_sms, DirectionPlan* out);

// rows of every receive-side buffer of the backward: W T k rows plus up to 63 padding rows per
// local expert (group offsets padded to the GEMM k block).
inline int64_t backward_rows(const MoeConfig& c) {
  return int64_t(c.world) * c.tokens * c.top_k + int64_t(c.num_experts / c.world) * (kernels::gemm::kGemmBlockK - 1);
}

}  // namespace kosmos::ops::moe
