// Mixture-of-Experts layer as ONE persistent launch per direction, expert parallel over W (virtual)
// ranks. Forward: route -> offsets -> dispatch -> grouped GEMM1 (gate/up, SwiGLU epilogue) ->
// grouped GEMM2 (down, router-weight row scale) -> combine. Backward (MoeConfig::backward):
// route -> offsets -> dispatch (x and dy rows) -> recompute h1 and dA' = dy · downᵀ (grouped) ->
// SwiGLU backward + router-weight gradient -> dX = dH1 · gate_upᵀ (grouped) and the weight
// gradients (grouped-K GEMMs) -> combine dx and d weights (docs/design/moe.md). With
// MoeConfig::save_activations the forward keeps x rows and h1 and the backward skips both.
//
// World W, rank r; T tokens per rank, k slots per token (top-k), E experts, L = E / W per rank
// (expert e lives on rank e / L), H hidden, I expert intermediate. bf16 in/out, fp32 accumulation.
//   y_r[t] = Σ_{j < k} w_r[t, j] · down_e( SwiGLU( x_r[t] · gate_up_e ) ),  e = ids_r[t, j]
// The k terms are summed in slot order j = 0..k-1 in fp32 (no atomics): deterministic, and the
// fused launch equals the unfused composition (fused = false: the same tasks as six launches)
// bit for bit. Intermediates are bf16 (act = SwiGLU output; out = w · act · down per slot).
// No token is dropped: receive buffers hold the worst case W * T * k rows per rank. Slots with
// an id outside [0, E) are dropped (they add nothing to y).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kosmos/distributed.h"
#include "kosmos/runtime_types.h"
#include "kosmos/status.h"

namespace kosmos {

// Buffers of an MoE layer, per rank (see src/kernels/moe_tasks.h for the layouts).
enum class MoeBuffer : uint32_t {
  kX,        // [T, H] bf16 input
  kIds,      // [T, k] int32 expert ids
  kWeights,  // [T, k] fp32 router weights
  kGateUp,   // [L, H, 2I] bf16, SwiGLU-interleaved (moe_interleave_gate_up)
  kDown,     // [L, I, H] bf16
  kY,        // [T, H] bf16 output
  kCounts,   // [W, E] int32 workspace
  kRoute,    // [2E + 2Tk + 16E] int32 workspace
  kLayout,   // [2L + E] int32 workspace (group_m | group_offset | send_off)
  kRecvX,    // [W T k, H] bf16 workspace
  kRecvW,    // [W T k] fp32 workspace
  kAct,      // [W T k, I] bf16 workspace
  kOut,      // [W T k, H] bf16 workspace (backward: dX rows, [rows_pad, H])
  // Backward only (0 bytes unless MoeConfig::backward); rows_pad = W T k + 63 L:
  kDy,        // [T, H] bf16 input: upstream gradient
  kDx,        // [T, H] bf16 output
  kDWeights,  // [T, k] fp32 output: gradient of the router weights (0 for dropped slots)
  kDGateUp,   // [L, H, 2I] bf16 output, SwiGLU-interleaved like kGateUp
  kDDown,     // [L, I, H] bf16 output
  kRecvDy,    // [rows_pad, H] bf16 workspace
  kH1,        // [rows_pad, 2I] bf16 workspace (recomputed pre-activation)
  kDAct,      // [rows_pad, I] bf16 workspace (dy · downᵀ)
  kDH1,       // [rows_pad, 2I] bf16 workspace
  kRecvDw,    // [rows_pad] fp32 workspace
  kCount
};
const char* to_string(MoeBuffer b);

struct MoeConfig {
  int world = 1;
  int64_t tokens = 0;        // T per rank, >= 1
  int64_t hidden = 0;        // H, multiple of 8
  int64_t intermediate = 0;  // I, multiple of 8
  int num_experts = 0;       // E, divisible by world, E / world <= 256, E <= 256
  int top_k = 1;             // k, 1..16
  bool fused = true;         // run(): one launch (true) or the unfused composition
  bool cpu = false;          // CPU executor (virtual ranks on host threads)
  double watchdog_seconds = 10.0;
  bool trace = false;
  // Diagnostic: the unfused composition's launches keep the fused plan's signals (still no waits:
  // every edge crosses a launch boundary), so each task releases its outputs as in the fused launch
  // (and a GEMM tile waits for its TMA stores' writes). Timed against the plain unfused launches it
  // gives the release's share of what the fused launch's tasks cost more (docs/perf-notes.md,
  // thirty-fifth session). Results are the same either way.
  bool unfused_keep_signals = false;
  // Diagnostic: consecutive unfused launches of GEMM tiles alone (the forward's GEMM1 and GEMM2) run
  // as one launch with the fused plan's waits and signals between them (waits on the launches
  // before are dropped, and the GEMM wait rules on their counters cleared): the fused launch without
  // dispatch and combine, to tell whether their presence or the GEMMs' own synchronisation makes the
  // fused launch's GEMM tiles slower (docs/perf-notes.md, thirty-sixth session). Same results.
  bool unfused_merge_gemms = false;
  int max_ctas = 0;
  int dispatch_experts_per_task = 0;  // 0: chosen from E, W and the CTA count
  int combine_tokens_per_task = 0;    // 0: chosen from T, W and the CTA count (a multiple of 12 warps)
  int dispatch_slices = 0;            // 0: chosen; else split each expert's rows over this many tasks (<= 255)
  // Route tasks per rank: 0 (default): chosen, about 2048 (token, slot) entries each, at most 16
  // (one below 4096 entries; Qwen3-235B T = 4096: 16, 0.045 ms faster than one, docs/perf-notes.md,
  // twentieth session); else 1..16.
  int route_chunks = 0;
  // Forward: an expert's short last row block (at most 32 rows) is computed by the GEMM1 and GEMM2
  // tiles of the block before it (kGemmMergeTails, docs/design/gemm.md, "Merged tails"), when both
  // GEMMs use 128 x 256 tiles. Under uniform routing about half the experts have such a block, and
  // a tile over a few rows costs about as much as a full one (its loads are the same).
  bool merge_tails = true;
  // Forward claim order: a GEMM2 step is queued this many GEMM1 steps after the last GEMM1 step it
  // reads (0: chosen: about two waves of GEMM1 tasks in the decode regime, otherwise every step, i.e.
  // the unfused order inside one launch). A step is a claim group of slot runs (ops::moe::SlotSteps).
  int gemm2_lag = 0;
  // Forward: worst-case slots per GEMM1 task, 1..16 (0: chosen with the claim group by the raster
  // planner; a set value claims its runs one at a time unless gemm1_group is set too).
  int gemm1_run = 0;
  int gemm2_run = 0;    // forward: the same for GEMM2
  // Forward: slot runs per claim group of GEMM1 / GEMM2 (a group's tiles are claimed n-major, so its
  // runs read each weight column block together), 1..1024; 0: chosen by the raster planner.
  int gemm1_group = 0;
  int gemm2_group = 0;
  // Forward, GEMM1 in runs of one slot claimed one by one (the W = 1 order above the decode regime):
  // 1 claims its tiles expert-major -- an expert's slots at one n block back to back, so they read
  // that weight column block together -- by remapping each task's (slot, n block) at run time
  // (kernels::gemm::kGemmExpertMajor); GEMM2 then waits for all of GEMM1 instead of its slot runs.
  // 0: slot-major (each slot's n blocks in turn). Ignored where GEMM1 runs are longer or grouped.
  // Default 1 since the thirty-second session (H100, Qwen3 proxy T = 4096, four alternated rounds:
  // GEMM1 alone 1.76 / 1.73 -> 1.56 / 1.57 ms, DRAM reads 4.54 -> 3.85 GB; the fused forward
  // 3.143 -> 3.009 ms mean).
  int gemm1_expert_major = 1;
  // Forward: the same remap for GEMM2 (down) where its runs are one slot claimed one by one and
  // GEMM1 is expert-major (GEMM2 waits for all of GEMM1 then; its consumer, combine, waits for all of
  // GEMM2 in any case): an expert's slots read each down-weight column block one claim apart.
  // 0: slot-major. Default 1 since the thirty-fourth session (H100, Qwen3 proxy T = 4096, four
  // alternated rounds: fused forward 2.995 -> 2.941 ms mean, our unfused 2.897 -> 2.840).
  int gemm2_expert_major = 1;
  // Forward: GEMM2 output tiles per task along N (one slot, n tiles nb .. nb + n - 1: the tile pipeline
  // loads the next tile's k blocks under the epilogue, and the task restart is paid once), 1..16;
  // only with one-slot GEMM2 runs (ignored otherwise). 0: chosen (1).
  int gemm2_n_run = 0;
  int backward_run = 0; // backward: the same for the H1 / dA' / dX slot runs
  int backward_group = 0;  // backward: slot runs per claim group of H1 / dA' / dX (0: chosen)
  // Backward: 1 claims dX's tiles expert-major where its runs are one slot claimed one by one (as
  // gemm1_expert_major does for the forward's GEMM1; dX re-reads gate_up the same way); dX then waits
  // for every swiglu_backward of its rank instead of its run's. 0: slot-major. Default 1 since the
  // thirty-fourth session (H100, Qwen3 proxy T = 4096, saved backward, four alternated rounds:
  // 6.326 -> 6.164 ms mean).
  int backward_expert_major = 1;
  // Backward claim order: 1 queues the combine tasks (dx, router-weight gradients) between the dDown
  // and the dGateUp tiles, so that they run under the weight gradients instead of after them (they
  // wait for every dX tile, long finished by then); 0 (default): after every tile. Measured slower
  // (thirty-fourth session, H100, Qwen3 saved backward, two rounds: 6.301 -> 6.421 ms mean).
  int backward_combine_early = 0;
  // Backward claim order: dX tiles of a step are queued this many steps after its
  // swiglu_backward (0: chosen, about two waves; a value >= the step count: after all of them).
  int backward_dx_lag = 0;
  // Backward: output tile width of the weight-gradient GEMMs dDown / dGateUp (256, 128 or 64; 0:
  // chosen by the engine's tile-shape heuristic).
  int backward_dw_tile_n = 0;
  bool backward = false;  // also plan the backward pass (its buffers, W <= 8: five GEMMs per rank)
  // Training (needs backward): the forward keeps what the backward needs -- received x rows and
  // weights, the layout, and GEMM1's pre-activation h1 (its epilogue stores it beside the SwiGLU
  // output) -- in the backward's padded rows; run_backward then moves only dy and skips the h1
  // recompute (a quarter of its FLOPs). run_backward uses the LAST forward run's activations (an
  // error before the first one). Gradients are bit for bit those of the self-contained backward.
  bool save_activations = false;
};

struct MoeBufferInfo {
  int64_t rows = 0, cols = 0;
  int elem_bytes = 0;
  uint64_t bytes() const { return uint64_t(rows) * uint64_t(cols) * uint64_t(elem_bytes); }
};
MoeBufferInfo moe_buffer_info(const MoeConfig& cfg, MoeBuffer b);

// Plain [H, 2I] = [gate | up] (row-major, gate columns 0..I-1, up columns I..2I-1) -> the GEMM
// engine's SwiGLU interleave (blocks of 8 gate columns, then the 8 matching up columns). bf16 bits.
void moe_interleave_gate_up(const uint16_t* plain, uint16_t* interleaved, int64_t hidden, int64_t intermediate);

// One MoE layer on virtual ranks (all ranks in this process: one GPU or the CPU executor). It owns
// every rank's buffers; fill kX, kIds, kWeights, kGateUp, kDown through buffer(), run, read kY.
// Both compositions are planned over the same buffers: run() uses cfg.fused, run_composition()
// picks explicitly (fused-vs-unfused comparisons without a second copy of the weights).
class MoeLayer {
 public:
  static Status plan(const MoeConfig& cfg, std::unique_ptr<MoeLayer>* out);
  // One rank per process (NCCL via transport::make_distributed, or the CPU stand-in of the tests):
  // only this rank's tasks run here; buffers and counters are symmetric; a barrier precedes every
  // launch. buffer(b, r) for r != rank is a peer's memory.
  static Status plan_distributed(const MoeConfig& cfg, const DistributedContext& dist, std::unique_ptr<MoeLayer>* out);
  ~MoeLayer();
  void* buffer(MoeBuffer b, int rank) const;  // device memory (GPU) or host memory (CPU)
  size_t buffer_bytes(MoeBuffer b) const;
  Status run(cudaStream_t stream = nullptr);
  Status run_composition(bool fused, cudaStream_t stream = nullptr);  // fused: 1 launch; else 6
  // Backward (cfg.backward): fill kX, kIds, kWeights, kGateUp, kDown, kDy; read kDx, kDWeights,
  // kDGateUp, kDDown. Self-contained: it routes and recomputes the forward's pre-activation, so it
  // needs no forward run. fused: 1 launch; else the same tasks as 7 launches. With
  // cfg.save_activations it reads the last forward's saved activations and routing instead (kX,
  // kWeights and kIds must be those of that forward) and recomputes nothing: no route / offsets
  // tasks, dy rows dispatched, no h1 GEMM (the unfused composition is then 5 launches).
  Status run_backward(cudaStream_t stream = nullptr);
  Status run_backward_composition(bool fused, cudaStream_t stream = nullptr);
  Status finish(cudaStream_t stream = nullptr);
  Status read_trace(std::vector<runtime::TraceRecord>* out, bool backward = false) const;  // of the last fused run
  // A label per task of the fused plan (index = TraceRecord::task_id): the task kind, or for GEMM
  // tiles "gemm <problem>" (GEMM1 / GEMM2; backward: H1 (recompute), dA', dX, dDown, dGateUp).
  const std::vector<std::string>& task_labels(bool backward = false) const;
  // The useful FLOPs per routed row of each GEMM label of task_labels (padding excluded): times a
  // direction's routed rows, the FLOPs its tiles of that label do (the bench's "tensor %" column).
  const std::map<std::string, double>& gemm_flops_per_row(bool backward = false) const;
  size_t num_tasks(bool fused = true) const;
  size_t num_backward_tasks(bool fused = true) const;  // 0 without cfg.backward
  // The unfused composition one launch at a time (per-phase timing): run_phase(i) for i in order
  // over all phases is run_composition(false) (run_backward_composition(false) with backward).
  const std::vector<std::string>& phase_names(bool backward = false) const;
  Status run_phase(size_t i, bool backward = false, cudaStream_t stream = nullptr);
  // With cfg.trace, the trace of unfused phase i's last run, and a label per task of that phase's
  // plan (as task_labels for the fused plan): the same tiles timed in their own launch.
  Status read_phase_trace(size_t i, std::vector<runtime::TraceRecord>* out, bool backward = false) const;
  const std::vector<std::string>& phase_task_labels(size_t i, bool backward = false) const;
  std::string describe() const;
  const MoeConfig& config() const;

 private:
  static Status plan_impl(const MoeConfig& cfg, const DistributedContext* dist, std::unique_ptr<MoeLayer>* out);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kosmos
