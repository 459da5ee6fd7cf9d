// MoE layer backward: the task list of one backward run (docs/design/moe.md, "Backward").
//
// Per rank d (GEMM problems 5d + j; rows = the padded receive rows, group offsets multiples of 64):
//   j = 0  H1   grouped over M  recv_x [rows, H]  · gate_up_l [H, 2I]            -> h1   [rows, 2I]
//   j = 1  dA'  grouped over M  recv_dy [rows, H] · down_lᵀ (down stored [I, H])  -> d_act [rows, I]
//   j = 2  dX   grouped over M  d_h1 [rows, 2I]   · gate_up_lᵀ (stored [H, 2I])   -> out  [rows, H]
//   j = 3  dD   grouped over K  act_wᵀ (act_w = w · act [rows, I]) · recv_dy      -> d_down [L, I, H]
//   j = 4  dGU  grouped over K  recv_xᵀ · d_h1                                     -> d_gate_up [L, H, 2I]
//
// Counters (same ids on every rank; "total" = what one run signals into it on one rank):
//   counted, routed  total C   route chunks of this rank (as in the forward; without save_activations)
//   counts      total W        every rank(s, 0) signals every rank
//   layout      total 1        offsets(r) (padded layout)
//   arrive_all  total #dispatch tasks into r;  arrive[l] total W   (as in the forward)
//   g1run[i]    total nH1 + nDA  H1 and dA' tiles of slot run i (nH1 = 0 with save_activations)
//   ew[i]       total 1        swiglu_backward(d, run i)
//   ew_all      total #runs    every swiglu_backward of the rank
//   dx_done     total W * #dX tasks per rank: every dX task signals every source rank
//
// Graph (=> crosses ranks):
//   route(s) => offsets(r) -> dispatch(r -> d: x, dy rows, w) => H1, dA'(d, run i) [layout at claim,
//   arrive[g] per group inside the pipeline] -> swiglu_backward(d, i) -> dX(d, i) => combine(s)
//                                                         \-> (all runs) -> dD, dGU tiles of d
// The dX / dD / dGU tiles read with TMA what generic stores wrote (swiglu_backward), after
// claim-time waits: the op kernel fences the async proxy for every such GEMM tile (op_kernel.cu).
#include <algorithm>
#include <cstring>
#include <sstream>

#include "kernels/gemm/gemm_host.h"
#include "kernels/moe_tasks.h"
#include "ops/moe_plan.h"

namespace kosmos::ops::moe {

namespace {
using kernels::gemm::GemmTileArgs;
using plan::TaskKind;
constexpr int kBM = kernels::gemm::kGemmBlockM;
enum Phase { kRouteCount, kRoute, kOffsets, kDispatch, kGemm1, kSwiglu, kGemm2, kCombine, kNumPhases };
constexpr int kNumProblems = 5;  // per rank
enum Problem { kH1 = 0, kDAct = 1, kDX = 2, kDDown = 3, kDGateUp = 4 };
}  // namespace

Status plan_backward(const MoeConfig& cfg, const RankBuffers& mem, int ctas, int num_sms, DirectionPlan* out) {
  const uint32_t W = uint32_t(cfg.world), E = uint32_t(cfg.num_experts), L = E / W, T = uint32_t(cfg.tokens),
                 k = uint32_t(cfg.top_k), H = uint32_t(cfg.hidden), I = uint32_t(cfg.intermediate);
  const int64_t rows = backward_rows(cfg);
  DirectionPlan& dp = *out;
  dp.name = "moe_backward";
  // save_activations: the forward left recv_x, recv_w and h1 in these rows and its routing and
  // layout in place; no route / offsets task, dispatch moves dy only and no H1 tile is planned
  // (problem 5d + kH1 stays in the list, unused, so the indices hold). The unfused composition then
  // has 5 launches (empty phases are left out).
  const bool saved = cfg.save_activations;
  dp.phase_names = {"route count",
                    "route",
                    "offsets",
                    saved ? "dispatch (dy)" : "dispatch",
                    saved ? "dA'" : "H1 + dA'",
                    "swiglu_backward",
                    "dX + dDown + dGateUp",
                    "combine"};
  static_assert(kNumPhases == 8, "one name per phase");

  uint32_t c_next = 0;
  const uint32_t c_counts = c_next++, c_layout = c_next++, c_arrive_all = c_next++, c_ew_all = c_next++,
                 c_dx_done = c_next++, c_counted = c_next++, c_routed = c_next++;
  const uint32_t c_arrive = c_next;
  c_next += L;

  // ---- GEMM problems ------------------------------------------------------------------------
  kernels::gemm::GemmParams pp[kNumProblems];
  for (uint32_t d = 0; d < W; ++d) {
    const int32_t* layout = static_cast<const int32_t*>(mem.at(uint32_t(MoeBuffer::kLayout), d));
    auto spec = [&](int64_t m, int64_t n, int64_t kk, MoeBuffer a, MoeBuffer b, MoeBuffer c) {
      GemmProblemSpec g;
      g.desc.m = m;
      g.desc.n = n;
      g.desc.k = kk;
      g.desc.num_groups = int(L);
      g.desc.group_m = layout;
      g.desc.group_offset = layout + L;
      g.desc.num_sms = num_sms;
      g.rank = d;
      g.a_buffer = uint32_t(a);
      g.b_buffer = uint32_t(b);
      g.c_buffer = uint32_t(c);
      return g;
    };
    GemmProblemSpec g[kNumProblems];
    g[kH1] = spec(rows, 2 * int64_t(I), H, MoeBuffer::kRecvX, MoeBuffer::kGateUp, MoeBuffer::kH1);
    g[kH1].desc.lda = H;
    g[kH1].desc.ldb = 2 * int64_t(I);
    g[kH1].desc.ldc = 2 * int64_t(I);
    g[kH1].rule = GemmWaitRule{c_arrive, uint32_t(kBM), 0};  // counter = c_arrive + group
    g[kDAct] = spec(rows, I, H, MoeBuffer::kRecvDy, MoeBuffer::kDown, MoeBuffer::kDAct);
    g[kDAct].desc.lda = H;
    g[kDAct].desc.b_transposed = true;  // down_l stored [I, H] = [N, K]
    g[kDAct].desc.ldb = H;
    g[kDAct].desc.ldc = I;
    g[kDAct].rule = g[kH1].rule;
    g[kDX] = spec(rows, H, 2 * int64_t(I), MoeBuffer::kDH1, MoeBuffer::kGateUp, MoeBuffer::kOut);
    g[kDX].desc.lda = 2 * int64_t(I);
    g[kDX].desc.b_transposed = true;  // gate_up_l stored [H, 2I] = [N, K]
    g[kDX].desc.ldb = 2 * int64_t(I);
    g[kDX].desc.ldc = H;
    g[kDDown] = spec(I, H, rows, MoeBuffer::kAct, MoeBuffer::kRecvDy, MoeBuffer::kDDown);
    g[kDDown].desc.grouped_k = true;
    g[kDDown].desc.a_col_major = true;  // act_w stored [rows, I] = [K, M]
    g[kDDown].desc.lda = I;
    g[kDDown].desc.ldb = H;
    g[kDDown].desc.ldc = H;
    g[kDGateUp] = spec(H, 2 * int64_t(I), rows, MoeBuffer::kRecvX, MoeBuffer::kDH1, MoeBuffer::kDGateUp);
    g[kDGateUp].desc.grouped_k = true;
    g[kDGateUp].desc.a_col_major = true;  // recv_x stored [rows, H] = [K, M]
    g[kDGateUp].desc.lda = H;
    g[kDGateUp].desc.ldb = 2 * int64_t(I);
    g[kDGateUp].desc.ldc = 2 * int64_t(I);
    // 0 (chosen) maps to kAuto, the engine's heuristic; validate() admits only 0, 64, 128, 256.
    const auto dw_shape = kernels::gemm::gemm_tile_shape_of_width(cfg.backward_dw_tile_n);
    g[kDDown].desc.tile_shape = g[kDGateUp].desc.tile_shape = dw_shape;
    static const char* kNames[kNumProblems] = {"H1 (recompute)", "dA'", "dX", "dDown", "dGateUp"};
    for (int j = 0; j < kNumProblems; ++j) {  // validate shapes now (no TMA encode)
      kernels::gemm::GemmDesc probe = g[j].desc;
      probe.a = probe.b = probe.c = reinterpret_cast<void*>(uintptr_t(4096));
      probe.encode_tma = false;
      Status st = kernels::gemm::make_gemm_params(probe, &pp[j]);
      if (!st) return Status(st.code(), std::string("MoE backward ") + kNames[j] + ": " + st.message());
      // The tasks below are cut for this tile shape (n tiles): pin it, so the runner's prepare (which
      // re-resolves kAuto with the device's SM count, not `ctas`) cannot pick another one.
      g[j].desc.tile_shape = pp[j].tile_shape;
      dp.problems.push_back(g[j]);
      dp.problem_names.push_back(kNames[j]);
    }
  }
  // H1, dA' and dX walk the same worst-case slots (same group_m / offsets, BM = 128), in runs.
  const int64_t slots = pp[kH1].num_m_tiles;
  const int64_t est_tiles = std::min<int64_t>(slots, (int64_t(T) * k + kBM - 1) / kBM + L);  // uniform routing
  // Runs and claim groups as the forward's GEMM1 (slot_raster), from H1 (the same operands), one
  // expert's slots per claim group where an expert expects four to sixteen (DeepSeek-V3 proxy, T = 4096,
  // H100: the saved backward 10.92 / 10.95 -> 10.53 / 10.55 ms in groups of 8, alternated).
  const bool decode = decode_regime(cfg);
  const int g1_n_tiles = (saved ? 0 : pp[kH1].num_n_tiles) + pp[kDAct].num_n_tiles;  // per slot run
  const SlotRaster raster = slot_raster(pp[kH1], int64_t(T) * k, est_tiles, g1_n_tiles, int(W), ctas / int(W), decode,
                                       cfg.backward_run, cfg.backward_group);
  const uint32_t run = raster.run;
  const SlotRuns runs = make_slot_runs(uint32_t(slots), run, est_tiles);  // one swiglu_backward task per run
  const SlotSteps steps{runs, raster.group};
  const uint32_t num_runs = runs.size();
  const uint32_t c_g1run = c_next;
  c_next += num_runs;
  const uint32_t c_ew = c_next;
  c_next += num_runs;
  dp.num_counters = c_next;
  // Expert-major dX (MoeConfig::backward_expert_major; kGemmExpertMajor, docs/design/gemm.md): a dX
  // task's tile is then known only at run time, somewhere in its expert's slots, so it waits for every
  // swiglu_backward of its rank (ew_all) rather than its run's; its consumers (combine) wait for all
  // of dX already.
  const bool dx_expert_major = expert_major_applies(cfg.backward_expert_major, raster, decode);
  if (dx_expert_major) mark_expert_major(dp.problems, W, kNumProblems, kDX);

  // ---- tasks ----------------------------------------------------------------------------------
  auto moe_args = [&](uint32_t a, uint32_t b, uint32_t c) {
    return kernels::MoeArgs{T, H, uint16_t(E), uint16_t(k), uint16_t(L), uint16_t(W), a, b, c, I,
                            kernels::kMoeFlagBackward | (saved ? kernels::kMoeFlagDyOnly : 0u)};
  };
  auto add = [&](TaskKind kind, uint32_t rank, const void* args, size_t bytes, int phase) -> TaskRec& {
    return ops::moe::add_task(dp.tasks, kind, rank, args, bytes, phase);
  };
  const FrontCounters front{c_counts, c_layout, c_arrive_all, c_arrive, c_counted, c_routed};
  add_front_tasks(cfg, ctas, {kRouteCount, kRoute, kOffsets, kDispatch}, front, moe_args, add, saved);
  // Every later task reads the layout: it waits for offsets, unless the forward left it (saved).
  auto wait_layout = [&](TaskRec& t) {
    if (!saved) t.waits.push_back({c_layout, 1});
  };
  auto gemm1 = [&](uint32_t d, uint32_t s) {  // H1 (unless saved) and dA' tiles of step s, n-major over its runs
    for (int j : {kH1, kDAct}) {
      if (j == kH1 && saved) continue;  // the forward stored h1
      steps.for_each_tile(s, pp[j].num_n_tiles, [&](uint32_t ri, int nb) {
        const GemmTileArgs a = steps.tile_args(kNumProblems * d + uint32_t(j), ri, nb);
        TaskRec& t = add(TaskKind::kGemmTile, d, &a, sizeof(a), kGemm1);
        wait_layout(t);  // the tile maps slots through group_m at its start
        t.waits.push_back({c_arrive_all, plan::kWaitAll | plan::kDeferredWait});
        t.signals.push_back({c_g1run + ri, uint16_t(d), 1});
      });
    }
  };
  auto swiglu = [&](uint32_t d, uint32_t s) {
    for (uint32_t ri = steps.first_run(s); ri < steps.end_run(s); ++ri) {
      const auto a = moe_args(runs.start(ri), runs.count(ri), 0);
      TaskRec& t = add(TaskKind::kMoeSwigluBackward, d, &a, sizeof(a), kSwiglu);
      wait_layout(t);
      t.waits.push_back({c_g1run + ri, plan::kWaitAll});
      t.signals.push_back({c_ew + ri, uint16_t(d), 1});
      t.signals.push_back({c_ew_all, uint16_t(d), 1});
    }
  };
  auto gemm_dx = [&](uint32_t d, uint32_t s) {
    steps.for_each_tile(s, pp[kDX].num_n_tiles, [&](uint32_t ri, int nb) {
      const GemmTileArgs a = steps.tile_args(kNumProblems * d + kDX, ri, nb);
      TaskRec& t = add(TaskKind::kGemmTile, d, &a, sizeof(a), kGemm2);
      wait_layout(t);
      t.waits.push_back({dx_expert_major ? c_ew_all : c_ew + ri, plan::kWaitAll});
      for (uint32_t r = 0; r < W; ++r) t.signals.push_back({c_dx_done, uint16_t(r), 1});
    });
  };
  // Claim order per step s: H1 / dA'(s), swiglu_backward(s - lag), dX(s - lag - lag_dx). Each
  // consumer is claimed about two waves of tasks after what it waits for, so the producers have
  // finished by then and no CTA idles at a claim-time wait. (dX one run after swiglu_backward --
  // the first version -- put the ~28 dX tiles of a run in the same wave as the swiglu_backward task
  // they wait for, a task of ~135 us at DeepSeek shapes: 29 % of the SM time of the fused backward
  // was idle, and it ran 14 % slower than the unfused composition.)
  const uint32_t num_steps = steps.size();
  const int64_t g1_tiles_per_step = int64_t(W) * g1_n_tiles * raster.group;
  const int64_t tasks_per_step = g1_tiles_per_step + int64_t(W) * (1 + pp[kDX].num_n_tiles) * raster.group;
  const uint32_t lag = two_waves_of_steps(ctas, g1_tiles_per_step);
  // dX after swiglu_backward: about two waves later in the decode regime (an expert gets at most
  // one 128-row block under uniform routing); otherwise after every H1 / dA' tile, as the forward
  // queues GEMM2 after GEMM1: interleaved, dX's operands competed with H1's and dA''s for the L2
  // (H200, fifth session, T = 4096 backward: Qwen3 proxy 9.71 -> 8.42 ms, DeepSeek-V3 proxy
  // 17.38 -> 16.50 ms).
  const uint32_t lag_dx = consumer_lag(cfg.backward_dx_lag, decode, ctas, tasks_per_step, num_steps);
  for (uint32_t s = 0; s < num_steps + lag + lag_dx; ++s) {
    if (s < num_steps)
      for (uint32_t d = 0; d < W; ++d) gemm1(d, s);
    if (s >= lag && s - lag < num_steps)
      for (uint32_t d = 0; d < W; ++d) swiglu(d, s - lag);
    if (s >= lag + lag_dx)
      for (uint32_t d = 0; d < W; ++d) gemm_dx(d, s - lag - lag_dx);
  }
  // Combine (dx, router-weight gradients) waits for every dX tile. It goes after every tile, or
  // (MoeConfig::backward_combine_early) between the dDown and dGateUp tiles: every dX tile is ~1 ms
  // done by then, and its copies run under the dGateUp tiles rather than alone at the end.
  const uint32_t tpt = combine_tokens_per_task(cfg, ctas);
  auto combine = [&] {
    for (uint32_t t0 = 0; t0 < T; t0 += tpt)
      for (uint32_t s = 0; s < W; ++s) {
        const auto a = moe_args(0, t0, std::min(T, t0 + tpt));
        TaskRec& t = add(TaskKind::kMoeCombine, s, &a, sizeof(a), kCombine);
        wait_layout(t);
        wait_routed(t, front, saved);  // reads pos
        t.waits.push_back({c_dx_done, plan::kWaitAll});
      }
  };
  const bool combine_early = cfg.backward_combine_early != 0;
  // Weight gradients: fixed tiles per expert (grouped over K). The claim order comes from the
  // raster planner, which knows that A and B blocks belong to one expert: the first version walked
  // all experts' m tiles for one n block before the next n block (n-major, runs chosen for the
  // makespan alone), so every A block was read from HBM once per n block (DeepSeek-V3, T = 4096:
  // 16 x 470 MB for dGateUp) and at T = 128 every task was one 1-k-block tile (49,152 tasks of
  // ~7 us, mostly restart cost). The ranks' tasks interleave, each rank getting ctas / W CTAs.
  std::string dw_raster[2];
  for (int j : {kDDown, kDGateUp}) {
    if (j == kDGateUp && combine_early) combine();
    // K per expert from the rows a rank receives under uniform routing (T k, plus about half a k
    // block of padding per expert), not the worst case the buffers are sized for.
    const int64_t expected_k = int64_t(T) * k + int64_t(L) * kernels::gemm::kGemmBlockK / 2;
    const ops::RasterProblem rp =
        ops::raster_problem(pp[j], 0, int(pp[j].num_m_tiles), std::max(1, ctas / int(W)), expected_k);
    ops::RasterChoice choice;
    const std::vector<ops::GemmRun> order = ops::plan_gemm_runs(rp, &choice);
    dw_raster[j - kDDown] = choice.describe();
    for (const ops::GemmRun& r : order)
      for (uint32_t d = 0; d < W; ++d) {
        const GemmTileArgs a = ops::tile_args(kNumProblems * d + uint32_t(j), r);
        TaskRec& t = add(TaskKind::kGemmTile, d, &a, sizeof(a), kGemm2);
        wait_layout(t);
        t.waits.push_back({c_ew_all, plan::kWaitAll});
      }
  }
  if (!combine_early) combine();

  size_t kinds[32] = {};
  for (const auto& t : dp.tasks) kinds[std::min<size_t>(size_t(t.kind), 31)]++;
  std::ostringstream os;
  os << "moe_backward: " << dp.tasks.size() << " tasks (" << kinds[size_t(TaskKind::kMoeDispatch)] << " dispatch, "
     << kinds[size_t(TaskKind::kGemmTile)] << " gemm [" << slots << " slots/rank in runs of " << run << " (from slot " << runs.head_end << " runs of " << runs.tail
     << "), claimed in groups of " << raster.group << " runs (" << raster.describe << "); n tiles H1 "
     << (saved ? std::string("0 (saved by the forward)") : std::to_string(pp[kH1].num_n_tiles)) << " + dA' " << pp[kDAct].num_n_tiles << ", dX " << pp[kDX].num_n_tiles << "; dDown "
     << pp[kDDown].num_m_tiles << "x" << pp[kDDown].num_n_tiles << " tiles, " << dw_raster[0] << "; dGateUp "
     << pp[kDGateUp].num_m_tiles << "x" << pp[kDGateUp].num_n_tiles << " tiles, " << dw_raster[1] << "], "
     << kinds[size_t(TaskKind::kMoeSwigluBackward)] << " swiglu_backward [lag " << lag << ", dX " << lag_dx << " later" << (dx_expert_major ? ", dX expert-major" : "") << "], "
     << kinds[size_t(TaskKind::kMoeCombine)] << " combine [" << tpt << " tokens each" << (combine_early ? ", before dGateUp" : "") << "]), " << dp.num_counters
     << " counters/rank";
  dp.summary = os.str();
  return Status::ok();
}

}  // namespace kosmos::ops::moe
