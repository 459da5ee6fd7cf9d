// MoE layer forward: plan construction and the layer object that owns every virtual rank's
// buffers. Design and the dependency graph: docs/design/moe.md; task math: kernels/moe_tasks.h.
//
// Counters (same ids on every rank; "total" = what one run signals into it on one rank):
//   counted     total C     count(s, c) of this rank's C route chunks (C > 1 only)
//   routed      total C     rank(s, c): pos and perm of this rank's entries written (dispatch, combine)
//   counts      total W     every rank(s, 0) signals every rank: all W rows of kCounts arrived
//   layout      total 1     offsets(r): group_m / group_offset / send_off of r written
//   arrive_all  total #dispatch tasks into r       (ordering join for GEMM1, see below)
//   arrive[l]   total W     dispatch(s -> r, block holding l): rows of local expert l from s
//   g1run[i]    total n1    GEMM1 tiles of slot run i (one per n block)
//   g2done      total W * #GEMM2 tasks per rank: every GEMM2 task signals every source rank
//
// Task graph of one run (per rank; arrows are counter edges, => crosses ranks):
//   route(s) => offsets(r) -> dispatch(r -> d) => GEMM1(d, run i) [waits layout(d) at claim,
//   arrive[g] inside the tile pipeline per group g] -> GEMM2(d, run i) => combine(s)
// GEMM1's body waits per group (GemmWaitRule over the group index the engine passes); its plan
// waits list the join counter arrive_all (deferred), so the planner orders every dispatch into d
// before d's GEMM1 tasks (deadlock freedom: every counter a body can wait on is signalled only by
// earlier tasks) without listing L counters per task.
//
// Insertion order (= claim priority): routes, offsets, dispatches (expert blocks in order, all
// sources), then per slot run i: GEMM1(i) of every rank, GEMM2(i - 1) of every rank; combines.
#include "kosmos/moe.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <sstream>
#include <utility>

#include "kernels/gemm/gemm_host.h"
#include "kernels/moe_tasks.h"
#include "ops/moe_plan.h"
#include "ops/op_runner.h"
#include "ops/rank_buffers.h"

namespace kosmos {

static_assert(uint32_t(MoeBuffer::kX) == kernels::kMoeX && uint32_t(MoeBuffer::kIds) == kernels::kMoeIds &&
              uint32_t(MoeBuffer::kWeights) == kernels::kMoeWeights && uint32_t(MoeBuffer::kGateUp) == kernels::kMoeGateUp &&
              uint32_t(MoeBuffer::kDown) == kernels::kMoeDown && uint32_t(MoeBuffer::kY) == kernels::kMoeY &&
              uint32_t(MoeBuffer::kCounts) == kernels::kMoeCounts && uint32_t(MoeBuffer::kRoute) == kernels::kMoeRoute &&
              uint32_t(MoeBuffer::kLayout) == kernels::kMoeLayout && uint32_t(MoeBuffer::kRecvX) == kernels::kMoeRecvX &&
              uint32_t(MoeBuffer::kRecvW) == kernels::kMoeRecvW && uint32_t(MoeBuffer::kAct) == kernels::kMoeAct &&
              uint32_t(MoeBuffer::kOut) == kernels::kMoeOut && uint32_t(MoeBuffer::kDy) == kernels::kMoeDy &&
              uint32_t(MoeBuffer::kDx) == kernels::kMoeDx && uint32_t(MoeBuffer::kDWeights) == kernels::kMoeDWeights &&
              uint32_t(MoeBuffer::kDGateUp) == kernels::kMoeDGateUp && uint32_t(MoeBuffer::kDDown) == kernels::kMoeDDown &&
              uint32_t(MoeBuffer::kRecvDy) == kernels::kMoeRecvDy && uint32_t(MoeBuffer::kH1) == kernels::kMoeH1 &&
              uint32_t(MoeBuffer::kDAct) == kernels::kMoeDAct && uint32_t(MoeBuffer::kDH1) == kernels::kMoeDH1 &&
              uint32_t(MoeBuffer::kRecvDw) == kernels::kMoeRecvDw && uint32_t(MoeBuffer::kCount) == kernels::kMoeNumBuffers,
              "MoeBuffer must list the buffers in the kernels' order");

const char* to_string(MoeBuffer b) {
  switch (b) {
    case MoeBuffer::kX: return "x";
    case MoeBuffer::kIds: return "ids";
    case MoeBuffer::kWeights: return "weights";
    case MoeBuffer::kGateUp: return "gate_up";
    case MoeBuffer::kDown: return "down";
    case MoeBuffer::kY: return "y";
    case MoeBuffer::kCounts: return "counts";
    case MoeBuffer::kRoute: return "route";
    case MoeBuffer::kLayout: return "layout";
    case MoeBuffer::kRecvX: return "recv_x";
    case MoeBuffer::kRecvW: return "recv_w";
    case MoeBuffer::kAct: return "act";
    case MoeBuffer::kOut: return "out";
    case MoeBuffer::kDy: return "dy";
    case MoeBuffer::kDx: return "dx";
    case MoeBuffer::kDWeights: return "d_weights";
    case MoeBuffer::kDGateUp: return "d_gate_up";
    case MoeBuffer::kDDown: return "d_down";
    case MoeBuffer::kRecvDy: return "recv_dy";
    case MoeBuffer::kH1: return "h1";
    case MoeBuffer::kDAct: return "d_act";
    case MoeBuffer::kDH1: return "d_h1";
    case MoeBuffer::kRecvDw: return "recv_dw";
    case MoeBuffer::kCount: break;
  }
  return "unknown";
}

MoeBufferInfo moe_buffer_info(const MoeConfig& c, MoeBuffer b) {
  const int64_t W = c.world, T = c.tokens, H = c.hidden, I = c.intermediate, E = c.num_experts, k = c.top_k;
  const int64_t L = W > 0 ? E / W : 0;
  // The backward pads every group's first receive row to a multiple of 64 (ops/moe_plan.h).
  const int64_t rows_max = c.backward && W > 0 ? ops::moe::backward_rows(c) : W * T * k;
  const int64_t bw = c.backward ? 1 : 0;  // backward-only buffers have 0 bytes without it
  switch (b) {
    case MoeBuffer::kX: return {T, H, 2};
    case MoeBuffer::kIds: return {T, k, 4};
    case MoeBuffer::kWeights: return {T, k, 4};
    case MoeBuffer::kGateUp: return {L * H, 2 * I, 2};
    case MoeBuffer::kDown: return {L * I, H, 2};
    case MoeBuffer::kY: return {T, H, 2};
    case MoeBuffer::kCounts: return {W, E, 4};
    case MoeBuffer::kRoute:
      return {1, 2 * E + 2 * T * k + int64_t(kernels::kMaxRouteChunks) * E, 4};
    case MoeBuffer::kLayout: return {1, 2 * L + E, 4};
    case MoeBuffer::kRecvX: return {rows_max, H, 2};
    case MoeBuffer::kRecvW: return {rows_max, 1, 4};
    case MoeBuffer::kAct: return {rows_max, I, 2};
    case MoeBuffer::kOut: return {rows_max, H, 2};
    case MoeBuffer::kDy: return {bw * T, H, 2};
    case MoeBuffer::kDx: return {bw * T, H, 2};
    case MoeBuffer::kDWeights: return {bw * T, k, 4};
    case MoeBuffer::kDGateUp: return {bw * L * H, 2 * I, 2};
    case MoeBuffer::kDDown: return {bw * L * I, H, 2};
    case MoeBuffer::kRecvDy: return {bw * rows_max, H, 2};
    case MoeBuffer::kH1: return {bw * rows_max, 2 * I, 2};
    case MoeBuffer::kDAct: return {bw * rows_max, I, 2};
    case MoeBuffer::kDH1: return {bw * rows_max, 2 * I, 2};
    case MoeBuffer::kRecvDw: return {bw * rows_max, 1, 4};
    case MoeBuffer::kCount: break;
  }
  return {};
}

void moe_interleave_gate_up(const uint16_t* plain, uint16_t* out, int64_t hidden, int64_t intermediate) {
  const int64_t I = intermediate;
  for (int64_t h = 0; h < hidden; ++h)
    for (int64_t c = 0; c < I; ++c) {
      out[h * 2 * I + 16 * (c / 8) + c % 8] = plain[h * 2 * I + c];          // gate
      out[h * 2 * I + 16 * (c / 8) + 8 + c % 8] = plain[h * 2 * I + I + c];  // up
    }
}

namespace {

using kernels::gemm::GemmTileArgs;
using plan::TaskKind;
constexpr int kBM = kernels::gemm::kGemmBlockM;
enum Phase {
  kPhaseRouteCount,
  kPhaseRoute,
  kPhaseOffsets,
  kPhaseDispatch,
  kPhaseGemm1,
  kPhaseGemm2,
  kPhaseCombine,
  kNumPhases
};

using ops::moe::TaskRec;

Status validate(const MoeConfig& c) {
  KOSMOS_CHECK(c.world >= 1 && c.world <= int(ops::kMaxGemmProblems / 2), "MoE world = ", c.world, ", expected 1..",
               ops::kMaxGemmProblems / 2, " (two grouped GEMMs per rank in one launch)");
  KOSMOS_CHECK(c.tokens >= 1 && c.tokens < (int64_t(1) << 24), "MoE tokens = ", c.tokens, ", expected 1..2^24");
  KOSMOS_CHECK(c.hidden > 0 && c.hidden % 8 == 0, "MoE hidden = ", c.hidden, ", expected a positive multiple of 8");
  KOSMOS_CHECK(c.intermediate > 0 && c.intermediate % 8 == 0, "MoE intermediate = ", c.intermediate,
               ", expected a positive multiple of 8 (SwiGLU interleave)");
  KOSMOS_CHECK(c.num_experts >= 1 && c.num_experts <= int(kernels::kMaxMoeExperts), "MoE num_experts = ", c.num_experts,
               ", expected 1..", kernels::kMaxMoeExperts);
  KOSMOS_CHECK(c.num_experts % c.world == 0, "MoE num_experts = ", c.num_experts, " is not divisible by the world size ",
               c.world);
  KOSMOS_CHECK(c.top_k >= 1 && c.top_k <= int(kernels::kMaxTopK), "MoE top_k = ", c.top_k, ", expected 1..",
               kernels::kMaxTopK);
  KOSMOS_CHECK(c.dispatch_slices >= 0 && c.dispatch_slices <= 255, "MoE dispatch_slices = ", c.dispatch_slices,
               ", expected 0 (chosen) or 1..255");
  KOSMOS_CHECK(c.route_chunks >= 0 && c.route_chunks <= int(kernels::kMaxRouteChunks),
               "MoE route_chunks = ", c.route_chunks, ", expected 0 (chosen) or 1..", kernels::kMaxRouteChunks);
  KOSMOS_CHECK(c.gemm1_run >= 0 && c.gemm1_run <= 16 && c.gemm2_run >= 0 && c.gemm2_run <= 16 && c.backward_run >= 0 &&
                   c.backward_run <= 16,
               "MoE gemm1_run = ", c.gemm1_run, ", gemm2_run = ", c.gemm2_run, ", backward_run = ", c.backward_run,
               ", expected 0 (chosen) or 1..16");
  KOSMOS_CHECK(c.gemm1_group >= 0 && c.gemm1_group <= 1024 && c.gemm2_group >= 0 && c.gemm2_group <= 1024 &&
                   c.backward_group >= 0 && c.backward_group <= 1024,
               "MoE gemm1_group = ", c.gemm1_group, ", gemm2_group = ", c.gemm2_group, ", backward_group = ",
               c.backward_group, ", expected 0 (chosen) or 1..1024");
  // The claim-order switches, 0 (off) or 1 (on).
  for (const auto& [name, value] : {std::pair{"gemm1_expert_major", c.gemm1_expert_major},
                                    {"gemm2_expert_major", c.gemm2_expert_major},
                                    {"backward_expert_major", c.backward_expert_major},
                                    {"backward_combine_early", c.backward_combine_early}})
    KOSMOS_CHECK(value == 0 || value == 1, "MoE ", name, " = ", value, ", expected 0 (off) or 1 (on)");
  KOSMOS_CHECK(c.gemm2_n_run >= 0 && c.gemm2_n_run <= 16, "MoE gemm2_n_run = ", c.gemm2_n_run,
               ", expected 0 (chosen) or 1..16");
  KOSMOS_CHECK(c.backward_dx_lag >= 0, "MoE backward_dx_lag = ", c.backward_dx_lag,
               ", expected 0 (chosen) or a positive run count");
  KOSMOS_CHECK(c.backward_dw_tile_n == 0 || c.backward_dw_tile_n == 256 || c.backward_dw_tile_n == 128 ||
                   c.backward_dw_tile_n == 64,
               "MoE backward_dw_tile_n = ", c.backward_dw_tile_n, ", expected 0 (chosen), 256, 128 or 64");
  KOSMOS_CHECK(c.gemm2_lag >= 0, "MoE gemm2_lag = ", c.gemm2_lag, ", expected 0 (chosen) or a positive run count");
  KOSMOS_CHECK(int64_t(c.world) * c.tokens * c.top_k < (int64_t(1) << 31), "MoE receive rows W*T*k = ",
               int64_t(c.world) * c.tokens * c.top_k, " exceed 2^31");
  KOSMOS_CHECK(!c.save_activations || c.backward,
               "MoE save_activations keeps the forward's activations for the backward: it needs backward = true");
  if (c.backward) {
    KOSMOS_CHECK(c.world <= int(ops::kMaxGemmProblems / 5), "MoE backward world = ", c.world, ", expected 1..",
                 ops::kMaxGemmProblems / 5, " (five grouped GEMMs per rank in one launch)");
    KOSMOS_CHECK(ops::moe::backward_rows(c) < (int64_t(1) << 31), "MoE backward receive rows W*T*k + 63*E/W = ",
                 ops::moe::backward_rows(c), " exceed 2^31");
  }
  return Status::ok();
}

}  // namespace

struct MoeLayer::Impl {
  MoeConfig cfg;
  bool distributed = false;
  DistributedContext dist;
  ops::RankBuffers mem;  // declared before the runners: they are destroyed first
  std::unique_ptr<ops::OpRunner> fused;
  std::vector<std::unique_ptr<ops::OpRunner>> unfused;  // one per phase
  size_t tasks_fused = 0, tasks_unfused = 0;
  std::unique_ptr<ops::OpRunner> backward_fused;                 // cfg.backward only
  std::vector<std::unique_ptr<ops::OpRunner>> backward_unfused;  // one per phase
  size_t backward_tasks_fused = 0, backward_tasks_unfused = 0;
  std::vector<std::string> labels, backward_labels;  // per fused task: kind, or "gemm <problem>"
  std::map<std::string, double> flops_per_row, backward_flops_per_row;  // per GEMM label (gemm_flops_per_row)
  std::vector<std::string> phase_names, backward_phase_names;  // per unfused launch
  std::vector<std::vector<std::string>> phase_labels, backward_phase_labels;  // per unfused launch, per task
  std::string summary;
  bool forward_ran = false;  // save_activations: a forward has left its activations for run_backward
  const DistributedContext* dist_or_null() const { return distributed ? &dist : nullptr; }
  // The backward's inputs are in place: always, unless it reads a forward's saved activations.
  Status backward_inputs_ready(const char* who) const {
    KOSMOS_CHECK(!cfg.save_activations || forward_ran, who,
                 ": the layer saves activations (MoeConfig::save_activations) and no forward has run yet");
    return Status::ok();
  }
};

namespace {
// One launch of the layer; distributed: it starts after all ranks finished the previous one (the
// transport's epoch barrier).
Status launch(const DistributedContext* dist, ops::OpRunner& runner, cudaStream_t stream) {
  if (dist) KOSMOS_RETURN_IF_ERROR(dist->barrier(stream));
  return runner.run(stream);
}

// The trace label of problem j's GEMM tiles ("?" past the named problems).
std::string gemm_label(const ops::moe::DirectionPlan& dp, size_t j) {
  return "gemm " + (j < dp.problem_names.size() ? dp.problem_names[j] : std::string("?"));
}

// The useful FLOPs of each GEMM problem per routed row, by its tiles' label (gemm_label):
// 2 N K for the problems grouped over M (a row is one of their M rows), 2 M N for the grouped-K
// weight gradients (a row is one of their K rows). The bench's breakdown multiplies by the rows.
std::map<std::string, double> label_flops_per_row(const ops::moe::DirectionPlan& dp) {
  std::map<std::string, double> out;
  for (size_t j = 0; j < dp.problems.size() && j < dp.problem_names.size(); ++j) {
    const kernels::gemm::GemmDesc& d = dp.problems[j].desc;
    out[gemm_label(dp, j)] = 2.0 * double(d.n) * double(d.grouped_k ? d.m : d.k);
  }
  return out;
}

// The fused runner (every wait and signal: one launch) and the unfused composition (one runner
// per phase, no counters, GEMM wait rules cleared) of one direction, bound to the layer's buffers.
Status make_runners(const ops::moe::DirectionPlan& dp, const MoeConfig& cfg, const DistributedContext* dist,
                    const ops::RankBuffers& mem, std::unique_ptr<ops::OpRunner>* fused,
                    std::vector<std::unique_ptr<ops::OpRunner>>* unfused, size_t* tasks_fused, size_t* tasks_unfused,
                    std::vector<std::string>* labels, std::vector<std::string>* phase_names,
                    std::vector<std::vector<std::string>>* phase_labels) {
  const uint32_t W = uint32_t(cfg.world), nb = uint32_t(MoeBuffer::kCount);
  // The merged launch keeps signals into peers' counters that no task of it waits for; across GPUs
  // they would land in a peer's other launch. A one-process diagnostic.
  KOSMOS_CHECK(!(dist && cfg.unfused_merge_gemms),
               "MoeConfig::unfused_merge_gemms is a diagnostic for virtual ranks in one process, not for a distributed layer");
  labels->clear();  // per task of the fused plan (its task ids are the indices of dp.tasks)
  for (const TaskRec& t : dp.tasks) {
    if (t.kind != TaskKind::kGemmTile) {
      labels->push_back(plan::to_string(t.kind));
      continue;
    }
    kernels::gemm::GemmTileArgs a;
    std::memcpy(&a, t.args, sizeof(a));
    labels->push_back(gemm_label(dp, a.problem));
  }
  // A launch's phases: empty = the fused plan (every phase, every wait and signal); one phase = an
  // unfused launch (every edge crosses a launch boundary: no waits; signals kept only as a
  // diagnostic); several (MoeConfig::unfused_merge_gemms) = their waits and signals among
  // themselves, waits on the launches before dropped.
  auto in_launch = [&](const TaskRec& t, const std::vector<int>& phases) {
    return phases.empty() || std::find(phases.begin(), phases.end(), t.phase) != phases.end();
  };
  // kept[c]: the launch keeps waits (and GEMM wait rules) on counter c -- every counter in the fused
  // plan, none in a one-phase launch, those its own tasks signal in a merged one (rank-blind).
  auto kept_waits = [&](const std::vector<int>& phases) {
    std::vector<bool> kept(dp.num_counters, phases.empty());
    if (phases.size() > 1)
      for (const TaskRec& t : dp.tasks)
        if (in_launch(t, phases))
          for (const plan::Signal& s : t.signals) kept[s.counter] = true;
    return kept;
  };
  auto build = [&](const std::vector<int>& phases, const std::vector<bool>& kept, plan::Plan* p) -> Status {
    std::string name = dp.name;
    for (int ph : phases) name += "_phase" + std::to_string(ph);
    plan::PlanBuilder b(W, name);
    for (uint32_t i = 0; i < nb; ++i) b.add_buffer(to_string(MoeBuffer(i)), moe_buffer_info(cfg, MoeBuffer(i)).bytes(), true);
    b.add_counters(dp.num_counters);
    const bool keep_signals = phases.size() != 1 || cfg.unfused_keep_signals;
    for (const TaskRec& t : dp.tasks) {
      if (!in_launch(t, phases)) continue;
      const uint32_t id = b.add_task(t.kind, t.rank);
      b.set_args(id, t.args);
      for (const plan::Wait& w : t.waits)
        if (kept[w.counter]) b.wait(id, w.counter, w.target);
      if (keep_signals)
        for (const plan::Signal& s : t.signals) b.signal(id, s.rank, s.counter, s.amount);
    }
    return b.build(p);
  };
  ops::RunnerOptions ro;
  ro.executor = cfg.cpu ? ops::ExecutorKind::kCpu : ops::ExecutorKind::kGpu;
  ro.watchdog_seconds = cfg.watchdog_seconds;
  ro.trace = cfg.trace;
  ro.max_ctas = cfg.max_ctas;
  ro.cpu_workers = 4;
  // A GEMM wait rule stays where the launch keeps waits on its base counter (kept_waits).
  auto make_runner = [&](const plan::Plan& full, const std::vector<bool>& kept, std::unique_ptr<ops::OpRunner>* r) -> Status {
    std::vector<ops::GemmProblemSpec> sp = dp.problems;
    for (auto& s : sp)
      if (s.rule.counter_base != ops::GemmWaitRule::kNoWait && !kept[s.rule.counter_base]) s.rule = ops::GemmWaitRule{};
    // One rank per process: only this rank's tasks; peers' signals become external arrivals.
    const plan::Plan p = dist ? plan::restrict_to_rank(full, uint32_t(dist->rank)) : full;
    KOSMOS_RETURN_IF_ERROR(ops::OpRunner::create(p, sp, ro, r));
    for (uint32_t b = 0; b < nb; ++b)
      for (uint32_t rank = 0; rank < W; ++rank) KOSMOS_RETURN_IF_ERROR((*r)->bind(b, rank, mem.at(b, rank)));
    if (dist) KOSMOS_RETURN_IF_ERROR(ops::use_symmetric_counters(**r, *dist, cfg.cpu));
    return Status::ok();
  };
  plan::Plan pf;
  const std::vector<bool> all = kept_waits({});
  KOSMOS_RETURN_IF_ERROR(build({}, all, &pf));
  *tasks_fused = pf.tasks.size();
  KOSMOS_RETURN_IF_ERROR(make_runner(pf, all, fused));
  // The unfused launches: the phases that have tasks, one launch each, or with
  // cfg.unfused_merge_gemms consecutive phases of GEMM tiles alone together.
  std::vector<std::vector<int>> launches;
  bool last_gemms = false;
  for (int ph = 0; ph < int(dp.phase_names.size()); ++ph) {
    bool any = false, gemms = true;
    for (const TaskRec& t : dp.tasks)
      if (t.phase == ph) any = true, gemms &= t.kind == TaskKind::kGemmTile;
    if (!any) continue;
    if (cfg.unfused_merge_gemms && gemms && last_gemms) launches.back().push_back(ph);
    else launches.push_back({ph});
    last_gemms = gemms;
  }
  *tasks_unfused = 0;
  phase_names->clear();
  phase_labels->clear();
  for (const std::vector<int>& phases : launches) {
    std::string name;
    for (int ph : phases) name += (name.empty() ? "" : " + ") + dp.phase_names[size_t(ph)];
    phase_names->push_back(name);
    phase_labels->emplace_back();  // the launch's tasks are the fused plan's of its phases, in order
    for (size_t i = 0; i < dp.tasks.size(); ++i)
      if (in_launch(dp.tasks[i], phases)) phase_labels->back().push_back((*labels)[i]);
    plan::Plan pp;
    const std::vector<bool> kept = kept_waits(phases);
    KOSMOS_RETURN_IF_ERROR(build(phases, kept, &pp));
    *tasks_unfused += pp.tasks.size();
    std::unique_ptr<ops::OpRunner> r;
    KOSMOS_RETURN_IF_ERROR(make_runner(pp, kept, &r));
    unfused->push_back(std::move(r));
  }
  return Status::ok();
}

}  // namespace

MoeLayer::~MoeLayer() = default;

Status MoeLayer::plan(const MoeConfig& cfg, std::unique_ptr<MoeLayer>* out) { return plan_impl(cfg, nullptr, out); }

Status MoeLayer::plan_distributed(const MoeConfig& cfg, const DistributedContext& dist, std::unique_ptr<MoeLayer>* out) {
  KOSMOS_RETURN_IF_ERROR(ops::check_distributed(dist, cfg.world, "MoeLayer"));
  // The backward's tasks address peers only through the buffer table, as the forward's; the
  // one-rank-per-process backward is tested on the CPU (MoeDistributedCpu.Backward*) and written
  // for NCCL (NcclMoe.OneRankCommunicatorBackward, TpMultiGpu.MoeBackwardAcrossRanks).
  return plan_impl(cfg, &dist, out);
}

Status MoeLayer::plan_impl(const MoeConfig& cfg, const DistributedContext* dist, std::unique_ptr<MoeLayer>* out) {
  KOSMOS_CHECK(out != nullptr, "MoeLayer::plan: out is null");
  KOSMOS_RETURN_IF_ERROR(validate(cfg));
  // gpu_ctas: the CTAs of one launch on one GPU. ctas: the CTAs the plan's tasks (all ranks'
  // tasks) are cut for -- with virtual ranks those of the one launch, which the ranks share (ctas /
  // W each); one process per GPU, every rank has a whole GPU's, so W times as many.
  const int gpu_ctas = ops::op_ctas(cfg.cpu, cfg.max_ctas);
  const int ctas = dist ? gpu_ctas * int(cfg.world) : gpu_ctas;
  const uint32_t W = uint32_t(cfg.world), E = uint32_t(cfg.num_experts), L = E / W, T = uint32_t(cfg.tokens),
                 k = uint32_t(cfg.top_k), H = uint32_t(cfg.hidden), I = uint32_t(cfg.intermediate);
  // save_activations: the forward lays out its receive rows as the backward does (padded groups).
  const int64_t rows_max = cfg.save_activations ? ops::moe::backward_rows(cfg) : int64_t(W) * T * k;

  auto impl = std::make_unique<Impl>();
  impl->cfg = cfg;
  if (dist) {
    impl->distributed = true;
    impl->dist = *dist;
  }
  const uint32_t nb = uint32_t(MoeBuffer::kCount);
  KOSMOS_RETURN_IF_ERROR(impl->mem.allocate(
      nb, W, cfg.cpu, dist, [&](uint32_t b) { return std::max<size_t>(moe_buffer_info(cfg, MoeBuffer(b)).bytes(), 16); },
      [](uint32_t b) { return std::string(to_string(MoeBuffer(b))); }));
  auto mem = [&](MoeBuffer b, uint32_t r) { return impl->mem.at(uint32_t(b), r); };

  // ---- GEMM problems: 2d = GEMM1 of rank d, 2d + 1 = GEMM2 ----------------------------------
  std::vector<ops::GemmProblemSpec> problems;
  std::vector<std::string> problem_names;
  uint32_t c_next = 0;
  const uint32_t c_counts = c_next++, c_layout = c_next++, c_arrive_all = c_next++, c_g2done = c_next++,
                 c_counted = c_next++, c_routed = c_next++;
  const uint32_t c_arrive = c_next;
  c_next += L;
  kernels::gemm::GemmParams p1{}, p2{};
  for (uint32_t d = 0; d < W; ++d) {
    const int32_t* layout = static_cast<const int32_t*>(mem(MoeBuffer::kLayout, d));
    // Both expert GEMMs are grouped over this rank's L experts with the same device-side layout.
    auto grouped = [&](int64_t n, int64_t k, uint32_t epilogue, MoeBuffer a_buf, MoeBuffer b_buf, MoeBuffer c_buf) {
      ops::GemmProblemSpec g;
      auto& dsc = g.desc;
      dsc.m = rows_max;
      dsc.n = n;
      dsc.k = k;
      dsc.lda = k;
      dsc.ldb = n;
      dsc.ldc = (epilogue & kernels::gemm::kGemmEpiSwiGLU) ? n / 2 : n;
      dsc.num_groups = int(L);
      dsc.group_m = layout;
      dsc.group_offset = layout + L;
      dsc.epilogue = epilogue;
      dsc.num_sms = gpu_ctas;
      g.rank = d;
      g.a_buffer = uint32_t(a_buf);
      g.b_buffer = uint32_t(b_buf);
      g.c_buffer = uint32_t(c_buf);
      return g;
    };
    ops::GemmProblemSpec g1 = grouped(2 * int64_t(I), H, kernels::gemm::kGemmEpiSwiGLU, MoeBuffer::kRecvX, MoeBuffer::kGateUp,
                                      MoeBuffer::kAct);
    g1.rule = ops::GemmWaitRule{c_arrive, uint32_t(kBM), 0};  // counter = c_arrive + group
    if (cfg.save_activations) {  // GEMM1 also stores h1 = recv_x · gate_up for the backward
      g1.desc.epilogue |= kernels::gemm::kGemmEpiSavePreact;
      g1.desc.ldc_aux = 2 * int64_t(I);
      g1.c_aux_buffer = uint32_t(MoeBuffer::kH1);
    }
    ops::GemmProblemSpec g2 = grouped(H, I, kernels::gemm::kGemmEpiRowScale, MoeBuffer::kAct, MoeBuffer::kDown, MoeBuffer::kOut);
    g2.row_scale_buffer = uint32_t(MoeBuffer::kRecvW);
    auto probe_both = [&]() -> Status {  // validate shapes now (no TMA encode)
      for (auto* spec : {&g1, &g2}) {
        kernels::gemm::GemmDesc probe = spec->desc;
        probe.a = probe.b = probe.c = reinterpret_cast<void*>(uintptr_t(4096));
        probe.row_scale = reinterpret_cast<const float*>(uintptr_t(4096));
        probe.c_aux = reinterpret_cast<void*>(uintptr_t(4096));
        probe.encode_tma = false;
        kernels::gemm::GemmParams pp;
        Status st = kernels::gemm::make_gemm_params(probe, &pp);
        if (!st) return Status(st.code(), std::string("MoE ") + (spec == &g1 ? "GEMM1" : "GEMM2") + ": " + st.message());
        (spec == &g1 ? p1 : p2) = pp;
        spec->desc.tile_shape = pp.tile_shape;  // tasks are cut for it; prepare must not re-choose (max_ctas)
      }
      return Status::ok();
    };
    KOSMOS_RETURN_IF_ERROR(probe_both());
    // Merged tails change which rows a slot covers, so GEMM2's slots (and its waits on GEMM1's slot
    // runs) stay GEMM1's only when both merge: both on 128 x 256 tiles, or neither. Not in the decode
    // regime: an expert then gets at most one block under uniform routing, nothing to merge, and the
    // kernel variant that can merge costs a few spilled registers.
    if (cfg.merge_tails && !ops::moe::decode_regime(cfg) && p1.tile_shape == kernels::gemm::GemmTileShape::k128x256 &&
        p2.tile_shape == kernels::gemm::GemmTileShape::k128x256) {
      g1.desc.merge_tails = g2.desc.merge_tails = true;
      KOSMOS_RETURN_IF_ERROR(probe_both());
    }
    problems.push_back(g1);
    problems.push_back(g2);
    problem_names.push_back(cfg.save_activations ? "GEMM1 gate_up+SwiGLU (saves h1)" : "GEMM1 gate_up+SwiGLU");
    problem_names.push_back("GEMM2 down");
  }
  // Both problems walk the same worst-case slots (same group_m / offsets, BM = 128), in runs.
  const int64_t slots = p1.num_m_tiles;
  const int64_t est_tiles = std::min<int64_t>(slots, (int64_t(T) * k + kBM - 1) / kBM + L);  // uniform routing
  // Decode regime: an expert receives at most one 128-row block under uniform routing, so every
  // tile streams its weight block with a few rows (HBM-bound). One-slot runs then spread the weight
  // stream over every SM and let GEMM2 start as soon as the first GEMM1 runs are done (H200, fifth
  // session, W = 1, T = 128: DeepSeek-V3 proxy 0.829 -> 0.767 ms, Qwen3 proxy 1.348 -> 1.235 ms,
  // against runs of 5 / 13 for GEMM1). Otherwise the raster planner picks runs and claim groups
  // (ops::moe::slot_raster).
  const bool decode = ops::moe::decode_regime(cfg);
  const int64_t expected_rows = int64_t(T) * k;  // a rank's rows under uniform routing
  const ops::moe::SlotRaster r1 =
      ops::moe::slot_raster(p1, expected_rows, est_tiles, p1.num_n_tiles, int(W), ctas / int(W), decode, cfg.gemm1_run, cfg.gemm1_group);
  const ops::moe::SlotRaster r2 =
      ops::moe::slot_raster(p2, expected_rows, est_tiles, p2.num_n_tiles, int(W), ctas / int(W), decode, cfg.gemm2_run, cfg.gemm2_group);
  const uint32_t run = r1.run;
  const ops::moe::SlotRuns runs = ops::moe::make_slot_runs(uint32_t(slots), run, est_tiles);
  const ops::moe::SlotSteps steps1{runs, r1.group};
  const uint32_t num_runs = runs.size();
  const uint32_t c_g1run = c_next;
  c_next += num_runs;
  // Expert-major GEMM1 (MoeConfig::gemm1_expert_major): a task's tile is known only at run time, so
  // GEMM1 signals one join counter and GEMM2 waits for all of it (its slot runs' counters would count
  // the wrong tiles).
  const bool expert_major = ops::moe::expert_major_applies(cfg.gemm1_expert_major, r1, decode);
  const uint32_t c_g1all = expert_major ? c_next++ : 0u;
  if (expert_major) ops::moe::mark_expert_major(problems, W, 2, 0);

  // ---- tasks ----------------------------------------------------------------------------------
  std::vector<TaskRec> tasks;
  auto moe_args = [&](uint32_t a, uint32_t b, uint32_t c) {
    return kernels::MoeArgs{T, H, uint16_t(E), uint16_t(k), uint16_t(L), uint16_t(W), a, b, c, 0u,
                            cfg.save_activations ? kernels::kMoeFlagPadRows : 0u};
  };
  auto add = [&](TaskKind kind, uint32_t rank, const void* args, size_t bytes, int phase) -> TaskRec& {
    return ops::moe::add_task(tasks, kind, rank, args, bytes, phase);
  };
  const ops::moe::FrontCounters front{c_counts, c_layout, c_arrive_all, c_arrive, c_counted, c_routed};
  const ops::moe::DispatchCut cut = ops::moe::add_front_tasks(
      cfg, ctas, {kPhaseRouteCount, kPhaseRoute, kPhaseOffsets, kPhaseDispatch}, front, moe_args, add);
  auto gemm1 = [&](uint32_t d, uint32_t ri, int nb) {
    const GemmTileArgs a = steps1.tile_args(2 * d, ri, nb);
    TaskRec& t = add(TaskKind::kGemmTile, d, &a, sizeof(a), kPhaseGemm1);
    t.waits.push_back({c_layout, 1});  // the tile maps slots through group_m at its start
    t.waits.push_back({c_arrive_all, plan::kWaitAll | plan::kDeferredWait});
    t.signals.push_back({expert_major ? c_g1all : c_g1run + ri, uint16_t(d), 1});
  };
  // GEMM2 has its own run length (its n tiles differ from GEMM1's: with GEMM1's runs, Qwen3 T = 128
  // cut GEMM2 into 176 tasks, 1.33 waves on 132 SMs, and the second wave ran on a third of them).
  // A GEMM2 run waits for every GEMM1 run its slots overlap.
  const uint32_t run2 = r2.run;
  const ops::moe::SlotRuns runs2 = ops::moe::make_slot_runs(uint32_t(slots), run2, est_tiles);
  const ops::moe::SlotSteps steps2{runs2, r2.group};
  // With one-slot runs a GEMM2 task may instead walk n2 tiles along N (cfg.gemm2_n_run).
  const int n2 = run2 == 1 ? std::min(std::max(1, cfg.gemm2_n_run), p2.num_n_tiles) : 1;
  // Expert-major GEMM2 (MoeConfig::gemm2_expert_major): only one-tile tasks, and only after an
  // expert-major GEMM1, whose join counter it waits for already.
  const bool expert_major2 = expert_major && n2 == 1 && ops::moe::expert_major_applies(cfg.gemm2_expert_major, r2, decode);
  if (expert_major2) ops::moe::mark_expert_major(problems, W, 2, 1);
  auto gemm2 = [&](uint32_t d, uint32_t r, int nb) {
    GemmTileArgs a = steps2.tile_args(2 * d + 1, r, nb);
    if (n2 > 1) {
      a.count = uint32_t(std::min(n2, p2.num_n_tiles - nb));
      a.flags |= kernels::gemm::kGemmRunAlongN;
    }
    const uint32_t m0 = a.tile_m, m_count = n2 > 1 ? 1u : a.count;
    TaskRec& t = add(TaskKind::kGemmTile, d, &a, sizeof(a), kPhaseGemm2);
    if (expert_major) {
      t.waits.push_back({c_g1all, plan::kWaitAll});
    } else {
      for (uint32_t ri = runs.of_slot(m0); ri <= runs.of_slot(m0 + m_count - 1); ++ri)
        t.waits.push_back({c_g1run + ri, plan::kWaitAll});
    }
    for (uint32_t s = 0; s < W; ++s) t.signals.push_back({c_g2done, uint16_t(s), 1});
  };
  // One step of either GEMM: per rank, n-major over the step's runs (SlotSteps).
  auto emit = [&](const ops::moe::SlotSteps& st, uint32_t s, int n_tiles, auto&& task, int n_step = 1) {
    for (uint32_t d = 0; d < W; ++d) st.for_each_tile(s, n_tiles, [&](uint32_t r, int nb) { task(d, r, nb); }, n_step);
  };
  // GEMM2 step j goes in `lag` GEMM1 steps after the last GEMM1 step it needs. Decode: about two
  // waves of GEMM1 tasks lie between them, so a CTA claiming it rarely finds its input still being
  // computed (it would block at claim) and the weight streams of both GEMMs overlap. Otherwise
  // (compute-bound tiles) every GEMM2 task goes after every GEMM1 task: interleaved, the two GEMMs'
  // operands compete for the L2 (H200, fifth session, DeepSeek-V3 proxy T = 4096: 5.99 ms
  // interleaved at two waves, 6.45 at lag 4, 5.14 ms phase after phase; Qwen3 proxy 3.38 / 3.40).
  // The overlap left is at the boundary: GEMM2's first runs start while GEMM1's last tiles run.
  const uint32_t num_steps1 = steps1.size(), num_steps2 = steps2.size();
  const uint32_t lag =
      ops::moe::consumer_lag(cfg.gemm2_lag, decode, ctas, int64_t(W) * p1.num_n_tiles * r1.group, num_steps1);
  auto needs = [&](uint32_t s2) {  // the last GEMM1 step GEMM2 step s2 waits for
    const uint32_t last = steps2.end_run(s2) - 1;
    return steps1.of_run(runs.of_slot(runs2.start(last) + runs2.count(last) - 1));
  };
  uint32_t next2 = 0;
  for (uint32_t s = 0; s < num_steps1 + lag; ++s) {
    if (s < num_steps1) emit(steps1, s, p1.num_n_tiles, gemm1);
    while (s >= lag && next2 < num_steps2 && needs(next2) <= s - lag) emit(steps2, next2++, p2.num_n_tiles, gemm2, n2);
  }
  const uint32_t tpt = ops::moe::combine_tokens_per_task(cfg, ctas);
  for (uint32_t t0 = 0; t0 < T; t0 += tpt)
    for (uint32_t s = 0; s < W; ++s) {
      const auto a = moe_args(0, t0, std::min(T, t0 + tpt));
      TaskRec& t = add(TaskKind::kMoeCombine, s, &a, sizeof(a), kPhaseCombine);
      t.waits.push_back({c_layout, 1});
      ops::moe::wait_routed(t, front);  // reads pos
      t.waits.push_back({c_g2done, plan::kWaitAll});
    }

  // ---- plans: the fused one, and the six phases of the unfused composition ---------------------
  ops::moe::DirectionPlan fwd;
  fwd.name = "moe_forward";
  fwd.tasks = std::move(tasks);
  fwd.problems = std::move(problems);
  fwd.problem_names = std::move(problem_names);
  fwd.num_counters = c_next;
  fwd.phase_names = {"route count", "route", "offsets", "dispatch", "GEMM1 gate_up+SwiGLU", "GEMM2 down", "combine"};
  static_assert(kNumPhases == 7, "one name per phase");
  KOSMOS_RETURN_IF_ERROR(make_runners(fwd, cfg, dist, impl->mem, &impl->fused, &impl->unfused, &impl->tasks_fused,
                                      &impl->tasks_unfused, &impl->labels, &impl->phase_names, &impl->phase_labels));
  impl->flops_per_row = label_flops_per_row(fwd);
  std::string backward_summary;
  if (cfg.backward) {
    ops::moe::DirectionPlan bwd;
    KOSMOS_RETURN_IF_ERROR(ops::moe::plan_backward(cfg, impl->mem, ctas, gpu_ctas, &bwd));
    KOSMOS_RETURN_IF_ERROR(make_runners(bwd, cfg, dist, impl->mem, &impl->backward_fused, &impl->backward_unfused,
                                        &impl->backward_tasks_fused, &impl->backward_tasks_unfused, &impl->backward_labels,
                                        &impl->backward_phase_names, &impl->backward_phase_labels));
    impl->backward_flops_per_row = label_flops_per_row(bwd);
    backward_summary = "; " + bwd.summary;
  }
  size_t kinds[32] = {};
  for (const auto& t : fwd.tasks) kinds[std::min<size_t>(size_t(t.kind), 31)]++;
  std::ostringstream os;
  os << "moe_forward W=" << W << " T=" << T << " H=" << H << " I=" << I << " E=" << E << " k=" << k << ": " << impl->tasks_fused
     << " tasks (" << kinds[size_t(TaskKind::kMoeRoute)] << " route, " << kinds[size_t(TaskKind::kMoeOffsets)] << " offsets, "
     << kinds[size_t(TaskKind::kMoeDispatch)] << " dispatch [" << cut.experts_per_task << " experts x 1/" << cut.slices << " of the rows each], "
     << kinds[size_t(TaskKind::kGemmTile)] << " gemm [" << slots << " slots/rank in runs of " << run << " (GEMM2: " << run2 << "; from slot " << runs.head_end
     << " runs of " << runs.tail << " / " << runs2.tail << "); claimed in groups of " << r1.group << " / " << r2.group
     << " runs" << (expert_major ? " (GEMM1 expert-major)" : "") << (expert_major2 ? " (GEMM2 expert-major)" : "") << "; GEMM2 lag " << lag << " steps, GEMM2 " << n2 << " n tiles per task; raster " << r1.describe << " / " << r2.describe << "; n tiles "
     << p1.num_n_tiles << " + " << p2.num_n_tiles
     << ((p1.layout & kernels::gemm::kGemmMergeTails) ? "; tails of <= 32 rows merged" : "") << "], " << kinds[size_t(TaskKind::kMoeCombine)] << " combine [" << tpt
     << " tokens each]), " << fwd.num_counters << " counters/rank" << backward_summary;
  impl->summary = os.str();
  std::unique_ptr<MoeLayer> layer(new MoeLayer());
  layer->impl_ = std::move(impl);
  *out = std::move(layer);
  return Status::ok();
}

void* MoeLayer::buffer(MoeBuffer b, int rank) const { return impl_->mem.at(uint32_t(b), uint32_t(rank)); }
size_t MoeLayer::buffer_bytes(MoeBuffer b) const { return moe_buffer_info(impl_->cfg, b).bytes(); }
const MoeConfig& MoeLayer::config() const { return impl_->cfg; }

Status MoeLayer::run(cudaStream_t stream) { return run_composition(impl_->cfg.fused, stream); }

Status MoeLayer::run_composition(bool fused, cudaStream_t stream) {
  if (fused) {
    KOSMOS_RETURN_IF_ERROR(launch(impl_->dist_or_null(), *impl_->fused, stream));
    impl_->forward_ran = true;
    return Status::ok();
  }
  for (size_t i = 0; i < impl_->unfused.size(); ++i) KOSMOS_RETURN_IF_ERROR(run_phase(i, false, stream));
  return Status::ok();
}

Status MoeLayer::run_backward(cudaStream_t stream) { return run_backward_composition(impl_->cfg.fused, stream); }

Status MoeLayer::run_backward_composition(bool fused, cudaStream_t stream) {
  KOSMOS_CHECK(impl_->backward_fused != nullptr, "MoeLayer::run_backward: the layer was planned without "
                                                 "MoeConfig::backward = true");
  KOSMOS_RETURN_IF_ERROR(impl_->backward_inputs_ready("MoeLayer::run_backward"));
  if (fused) return launch(impl_->dist_or_null(), *impl_->backward_fused, stream);
  for (size_t i = 0; i < impl_->backward_unfused.size(); ++i) KOSMOS_RETURN_IF_ERROR(run_phase(i, true, stream));
  return Status::ok();
}

const std::vector<std::string>& MoeLayer::phase_names(bool backward) const {
  return backward ? impl_->backward_phase_names : impl_->phase_names;
}

Status MoeLayer::run_phase(size_t i, bool backward, cudaStream_t stream) {
  KOSMOS_CHECK(!backward || impl_->backward_fused, "MoeLayer::run_phase: the layer was planned without MoeConfig::backward = true");
  auto& runners = backward ? impl_->backward_unfused : impl_->unfused;
  KOSMOS_CHECK(i < runners.size(), "MoeLayer::run_phase: phase ", i, " out of range (", runners.size(), " phases)");
  if (backward) KOSMOS_RETURN_IF_ERROR(impl_->backward_inputs_ready("MoeLayer::run_phase"));
  KOSMOS_RETURN_IF_ERROR(launch(impl_->dist_or_null(), *runners[i], stream));
  if (!backward && i + 1 == runners.size()) impl_->forward_ran = true;  // the last forward phase
  return Status::ok();
}

Status MoeLayer::finish(cudaStream_t stream) {
  KOSMOS_RETURN_IF_ERROR(impl_->fused->finish(stream));
  for (auto& r : impl_->unfused) KOSMOS_RETURN_IF_ERROR(r->finish(stream));
  if (impl_->backward_fused) KOSMOS_RETURN_IF_ERROR(impl_->backward_fused->finish(stream));
  for (auto& r : impl_->backward_unfused) KOSMOS_RETURN_IF_ERROR(r->finish(stream));
  return Status::ok();
}

Status MoeLayer::read_trace(std::vector<runtime::TraceRecord>* out, bool backward) const {
  KOSMOS_CHECK(!backward || impl_->backward_fused, "MoeLayer::read_trace: the layer was planned without cfg.backward");
  return (backward ? impl_->backward_fused : impl_->fused)->read_trace(out);
}

Status MoeLayer::read_phase_trace(size_t i, std::vector<runtime::TraceRecord>* out, bool backward) const {
  KOSMOS_CHECK(!backward || impl_->backward_fused, "MoeLayer::read_phase_trace: the layer was planned without cfg.backward");
  const auto& runners = backward ? impl_->backward_unfused : impl_->unfused;
  KOSMOS_CHECK(i < runners.size(), "MoeLayer::read_phase_trace: phase ", i, " out of range (", runners.size(), " phases)");
  return runners[i]->read_trace(out);
}

const std::vector<std::string>& MoeLayer::phase_task_labels(size_t i, bool backward) const {
  const auto& all = backward ? impl_->backward_phase_labels : impl_->phase_labels;
  static const std::vector<std::string> kNone;
  return i < all.size() ? all[i] : kNone;
}

const std::vector<std::string>& MoeLayer::task_labels(bool backward) const {
  return backward ? impl_->backward_labels : impl_->labels;
}

const std::map<std::string, double>& MoeLayer::gemm_flops_per_row(bool backward) const {
  return backward ? impl_->backward_flops_per_row : impl_->flops_per_row;
}

size_t MoeLayer::num_tasks(bool fused) const { return fused ? impl_->tasks_fused : impl_->tasks_unfused; }

size_t MoeLayer::num_backward_tasks(bool fused) const {
  return fused ? impl_->backward_tasks_fused : impl_->backward_tasks_unfused;
}

std::string MoeLayer::describe() const { return impl_->summary; }

}  // namespace kosmos
