// kosmos bench moe: the fused MoE forward (one launch) against, in the same process and on the
// same buffers, the unfused pipeline made of our own kernels as separate launches (route,
// offsets, dispatch = permute + all-to-all by device stores, grouped GEMM1 with SwiGLU, grouped
// GEMM2 with the router-weight scale, combine: six persistent launches). Virtual ranks on one GPU.
// Verified: fused == unfused bit for bit, and a few tokens of rank 0 against an fp64 host
// reference. Reported: median ms, TFLOP/s, ratio to the unfused pipeline, and the weight-read
// floor (all expert weight bytes / 4.2 TB/s, the H200's measured device copy rate, as issue 5
// defines it; and at this GPU's peak DRAM bandwidth, memory clock x bus width, which on an H100 is
// below 4.2 TB/s).
// --backward: the fused backward (one launch) against its unfused composition (seven launches:
// route, offsets, dispatch of x and dy, H1 recompute + dA', SwiGLU backward, dX + weight
// gradients, combine); verified bit for bit on every output (dx, d_weights, dGateUp, dDown) and
// dx / d_weights of three tokens of rank 0 against fp64 (the weight gradients are checked against
// fp64 by the GPU tests). FLOPs = 2 x the forward's GEMM FLOPs + the recomputed GEMM1.
// Forward, third variant: an unfused pipeline from standard pieces on the same inputs (cub sort
// permute, counts to the host with one sync, device copies as the all-to-all for W > 1,
// cublasGemmGroupedBatchedEx for both expert GEMMs, elementwise SwiGLU, weighted un-permute; see
// moe_cublas_pipeline.h), verified against the fused output by relative error (different kernels
// and roundings: h1 is rounded to bf16 before SwiGLU, the router weight applied after GEMM2).
// --dump-routing PATH writes the exact routing (per rank ids [T, k], weights [T, k]) and shapes as
// JSON for bench/torch_baselines.py; it needs no GPU (the routing is generated on the host first).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "bench_moe_nccl.h"
#include "bench_nccl.h"
#include "bench_timing.h"
#include "common.h"
#include "kernels/gemm/bf16.h"
#include "kosmos/cuda_check.h"
#include "kosmos/moe.h"
#include "moe_bench_common.h"
#include "moe_cublas_pipeline.h"

namespace kosmos::cli {

namespace {

// The backward outputs of every rank, as raw bytes (for the bitwise comparison).
Status download_grads(const MoeLayer& L, std::vector<std::vector<uint8_t>>* out) {
  out->clear();
  for (int r = 0; r < L.config().world; ++r)
    for (MoeBuffer b : {MoeBuffer::kDx, MoeBuffer::kDWeights, MoeBuffer::kDGateUp, MoeBuffer::kDDown}) {
      std::vector<uint8_t> v;
      KOSMOS_RETURN_IF_ERROR(download(L.buffer(b, r), L.buffer_bytes(b), 0, &v));
      out->push_back(std::move(v));
    }
  return Status::ok();
}

}  // namespace

void add_bench_moe(CLI::App& bench) {
  auto* cmd = bench.add_subcommand("moe", "Fused MoE forward (one launch) on virtual ranks vs the unfused pipeline of our kernels");
  struct Opts {
    std::string model = "deepseek-v3", routing = "uniform", json, trace_svg, dump_routing, transport = "local";
    int world = 1, reps = 20, experts = 0, top_k = 8;
    MoeConfig tuning;  // the claim-order and tile switches bind here: their defaults are MoeConfig's
    int64_t tokens = 4096;
    bool backward = false, skip_cublas = false, phase_times = false, save_activations = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model, "deepseek-v3 (H 7168, I 2048, 32 experts per rank) | qwen3-235b (H 4096, I 1536, E 128)")
      ->check(CLI::IsMember({"deepseek-v3", "qwen3-235b"}));
  cmd->add_option("--tokens", o->tokens, "Tokens per rank (4096 training, 128 decode)")->check(CLI::Range(int64_t(1), int64_t(16384)));
  cmd->add_option("--world", o->world, "Virtual ranks on this GPU")->check(CLI::Range(1, 16));
  cmd->add_option("--routing", o->routing,
                  "uniform | skewed (half the experts empty, p ~ 1/(i+1) over the rest) | balanced (every expert T k / E rows)")
      ->check(CLI::IsMember({"uniform", "skewed", "balanced"}));
  cmd->add_option("--experts", o->experts, "Override E (total experts)");
  cmd->add_option("--reps", o->reps, "Timed repetitions (median)")->check(CLI::Range(3, 1000));
  cmd->add_option("--json", o->json, "Write results as JSON here");
  cmd->add_option("--trace-svg", o->trace_svg,
                  "Record a trace of one fused run and write it as SVG, and print both it and one run of the unfused launches by task label (--transport nccl: every rank writes its own, "
                  "PATH with .rank<r> before .svg when WORLD_SIZE > 1)");
  cmd->add_flag("--backward", o->backward, "Benchmark the backward pass (world <= 8) instead of the forward");
  cmd->add_flag("--save-activations", o->save_activations,
                "With --backward: training mode -- the forward keeps x rows and GEMM1's pre-activation, the backward "
                "moves only dy and skips the h1 recompute (also times that forward and the step)");
  cmd->add_option("--dump-routing", o->dump_routing,
                  "Write the routing (per rank ids [T,k], weights [T,k]) and shapes as JSON here (no GPU needed)");
  cmd->add_option("--route-chunks", o->tuning.route_chunks,
                  "Route tasks per rank (0: chosen, about 2048 (token, slot) entries each, the default; 1..16: that many)")
      ->check(CLI::Range(0, 16));
  cmd->add_option("--merge-tails", o->tuning.merge_tails,
                  "Forward: 1 (default): an expert's last row block of at most 32 rows is computed with the block before it; 0: "
                  "as its own tiles")
      ->check(CLI::Range(0, 1));
  cmd->add_option("--gemm2-lag", o->tuning.gemm2_lag,
                  "Forward claim order: queue each GEMM2 step this many GEMM1 steps after its inputs (0: chosen; "
                  "a large value: all GEMM2 after all GEMM1)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--gemm1-run", o->tuning.gemm1_run, "Forward: worst-case slots per GEMM1 task (0: chosen with the claim groups; set: one run per claim group unless --gemm1-group)")->check(CLI::Range(0, 16));
  cmd->add_option("--gemm1-expert-major", o->tuning.gemm1_expert_major,
                  "Forward: 1 (default) claims GEMM1's one-slot runs expert-major (an expert's slots at one n block back to back; MoeConfig::gemm1_expert_major); 0: slot-major")
      ->check(CLI::Range(0, 1));
  cmd->add_option("--gemm2-expert-major", o->tuning.gemm2_expert_major,
                  "Forward: 1 (default) claims GEMM2's one-slot runs expert-major too (with an expert-major GEMM1; MoeConfig::gemm2_expert_major); 0: slot-major")
      ->check(CLI::Range(0, 1));
  cmd->add_option("--gemm1-group", o->tuning.gemm1_group,
                  "Forward: GEMM1 slot runs per claim group (claimed n-major, so they read each weight block together; 0: chosen)")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--gemm2-group", o->tuning.gemm2_group, "Forward: the same for GEMM2 (0: chosen)")->check(CLI::Range(0, 1024));
  cmd->add_option("--bwd-expert-major", o->tuning.backward_expert_major,
                  "Backward: 1 (default) claims dX's one-slot runs expert-major (MoeConfig::backward_expert_major); 0: slot-major")
      ->check(CLI::Range(0, 1));
  cmd->add_option("--bwd-combine-early", o->tuning.backward_combine_early,
                  "Backward: 1 claims the combine tasks before the dGateUp tiles, to run under them (MoeConfig::backward_combine_early; default 0)")
      ->check(CLI::Range(0, 1));
  cmd->add_option("--bwd-group", o->tuning.backward_group, "Backward: slot runs per claim group of H1 / dA' / dX (0: chosen)")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--gemm2-run", o->tuning.gemm2_run, "Forward: worst-case slots per GEMM2 task (0: chosen)")->check(CLI::Range(0, 16));
  cmd->add_option("--gemm2-n-run", o->tuning.gemm2_n_run, "Forward: GEMM2 tiles per task along N, with one-slot GEMM2 runs (0: chosen)")
      ->check(CLI::Range(0, 16));
  cmd->add_option("--bwd-run", o->tuning.backward_run, "Backward: worst-case slots per H1 / dA' / dX task (0: chosen)")
      ->check(CLI::Range(0, 16));
  cmd->add_option("--dx-lag", o->tuning.backward_dx_lag,
                  "Backward claim order: queue a step's dX tiles this many steps after its swiglu_backward (0: chosen)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--dw-tile", o->tuning.backward_dw_tile_n,
                  "Backward: output tile width of the weight-gradient GEMMs (256, 128 or 64; 0: chosen)")
      ->check(CLI::IsMember({0, 64, 128, 256}));
  cmd->add_flag("--phase-times", o->phase_times,
                "Also time each launch of the unfused composition alone (median of --reps), to see which phase the "
                "fused launch gains or loses");
  cmd->add_flag("--unfused-signals", o->tuning.unfused_keep_signals,
                "Diagnostic: the unfused launches keep the fused plan's signals (no waits), to time the release's share of "
                "the fused launch's extra cost (MoeConfig::unfused_keep_signals)");
  cmd->add_flag("--unfused-merge-gemms", o->tuning.unfused_merge_gemms,
                "Diagnostic: the unfused composition runs its consecutive GEMM launches (the forward's GEMM1 and GEMM2) "
                "as one, with the fused plan's waits and signals between them (MoeConfig::unfused_merge_gemms; virtual ranks only)");
  cmd->add_flag("--skip-cublas", o->skip_cublas, "Forward: leave out the cuBLAS grouped-GEMM pipeline (saves its memory)");
  cmd->add_option("--transport", o->transport,
                  "local: virtual ranks on one GPU (default); nccl: one process per GPU, launched with RANK / WORLD_SIZE / "
                  "LOCAL_RANK / KOSMOS_NCCL_ID_FILE (scripts/run_multigpu_bench.sh), the world is WORLD_SIZE")
      ->check(CLI::IsMember({"local", "nccl"}));
  cmd->callback([o, cmd] {
    const bool nccl = o->transport == "nccl";
    if (nccl) {  // the world is WORLD_SIZE
      for (const char* opt : {"--world", "--phase-times", "--dump-routing", "--unfused-merge-gemms"})
        if (cmd->count(opt))
          throw Error(Status(StatusCode::kInvalidArgument,
                             std::string("bench moe: ") + opt + " is not available with --transport nccl" +
                                 (std::string(opt) == "--world" ? " (the world is WORLD_SIZE)" : "")));
      throw_if_error(check_nccl_launch_env("bench moe --transport nccl", &o->world));
    }
    const MoeModel md = kMoeModels.at(o->model);
    MoeConfig cfg = o->tuning;
    cfg.world = o->world;
    cfg.tokens = o->tokens;
    cfg.hidden = md.hidden;
    cfg.intermediate = md.intermediate;
    cfg.num_experts = o->experts > 0 ? o->experts : md.fixed_experts > 0 ? md.fixed_experts : md.experts_per_rank * o->world;
    cfg.top_k = o->top_k;
    cfg.trace = !o->trace_svg.empty();
    if (cfg.trace && !nccl)  // the runners record a trace on every fused run: the timed ones too (nccl: said there)
      std::fprintf(stderr, "[bench moe] --trace-svg: every run records its trace, so the times include tracing\n");
    cfg.backward = o->backward;
    if (o->save_activations && !o->backward)
      throw Error(Status(StatusCode::kInvalidArgument, "bench moe: --save-activations needs --backward"));
    cfg.save_activations = o->save_activations;
    const int W = cfg.world, E = cfg.num_experts, k = cfg.top_k;
    const int64_t T = cfg.tokens, H = cfg.hidden, I = cfg.intermediate;
    if (E < 1 || E % W != 0)
      throw Error(Status(StatusCode::kInvalidArgument, "bench moe: E = " + std::to_string(E) + " is not a positive multiple of the world"));
    if (nccl) {  // one process per GPU (cmd_bench_moe_nccl.cu)
      MoeNcclBenchOptions no;
      no.model = o->model;
      no.routing = o->routing;
      no.cfg = cfg;
      no.reps = o->reps;
      no.json = o->json;
      no.skip_cublas = o->skip_cublas;
      no.trace_svg = o->trace_svg;
      run_bench_moe_nccl(no);
      return;
    }
    // Routing on the host (before any GPU work, so --dump-routing needs no GPU).
    const MoeRouting routing = make_moe_routing(W, T, E, k, o->routing);
    const std::vector<int64_t>& rows_per_rank = routing.rows_per_rank;
    const std::vector<int32_t>& ids0 = routing.ids[0];
    const std::vector<float>& w0 = routing.weights[0];
    // The layer's shape and routing, as every JSON this bench writes names them.
    auto put_shape = [&](nlohmann::json& j) { put_moe_shape(j, o->model, o->routing, cfg); };
    if (!o->dump_routing.empty()) {
      nlohmann::json j;
      j["format"] = "kosmos-moe-routing-v1";
      j["command"] = command_line();
      put_shape(j);
      j["local_experts"] = E / W;
      j["gate_up_layout"] = "[E/W, H, 2I] per rank, gate/up interleaved in blocks of 8 columns";
      j["down_layout"] = "[E/W, I, H] per rank";
      j["rows_per_rank"] = rows_per_rank;
      nlohmann::json ranks = nlohmann::json::array();
      for (int r = 0; r < W; ++r) ranks.push_back({{"rank", r}, {"ids", routing.ids[size_t(r)]}, {"weights", routing.weights[size_t(r)]}});
      j["ranks"] = std::move(ranks);
      throw_if_error(write_json(o->dump_routing, j));
      std::fprintf(stderr, "[bench moe] routing written to %s\n", o->dump_routing.c_str());
    }
    if (!gpu_available()) {
      if (!o->dump_routing.empty()) {
        std::fprintf(stderr, "[bench moe] no Hopper GPU visible: routing dumped, nothing timed\n");
        return;
      }
      throw Error(Status(StatusCode::kUnavailable, "bench moe needs a Hopper GPU (none visible)"));
    }
    std::fprintf(stderr, "[bench moe]%s %s W=%d T=%ld H=%ld I=%ld E=%d k=%d %s: planning...\n", o->backward ? " backward" : "", o->model.c_str(), cfg.world,
                 cfg.tokens, cfg.hidden, cfg.intermediate, cfg.num_experts, cfg.top_k, o->routing.c_str());
    std::unique_ptr<MoeLayer> L;
    throw_if_error(MoeLayer::plan(cfg, &L));
    // The unfused composition's line: its launch count from the plan, and the diagnostic it ran with.
    auto unfused_label = [&](const char* what, bool backward) {
      return std::string(what) + " (same kernels, " + std::to_string(L->phase_names(backward).size()) + " launches" +
             (cfg.unfused_keep_signals ? ", signals kept" : "") + (cfg.unfused_merge_gemms ? ", GEMMs merged" : "") + ")";
    };
    // Inputs: weights and x on the device (hash RNG), routing from the host.
    for (int r = 0; r < W; ++r) throw_if_error(fill_moe_rank_inputs(*L, r, routing, nullptr));
    // The keys every MoE result carries (forward and backward).
    auto result_json = [&](const char* bench, double t_fused, double t_unfused) {
      nlohmann::json j = run_metadata(command_line());
      j["bench"] = bench;
      put_shape(j);
      j["transport"] = "local virtual ranks (device stores between ranks' buffers)";
      j["plan"] = L->describe();
      j["fused_ms"] = t_fused;
      j["unfused_ms"] = t_unfused;
      j["speedup_vs_unfused"] = t_unfused / t_fused;
      return j;
    };
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    // --trace-svg: one more fused run, its timeline as SVG and where its time went by task label.
    auto trace_one_run = [&](bool backward) {
      throw_if_error(trace_moe_run(*L, backward,
                                   std::string("kosmos moe ") + (backward ? "backward " : "forward ") + o->model + " W=" +
                                       std::to_string(W) + " T=" + std::to_string(T) + " (virtual ranks, one H200)",
                                   o->trace_svg, s));
    };
    // --phase-times: each launch of the unfused composition alone, median of --reps (inputs are
    // what the full runs before left in the buffers; every phase reads and writes the same bytes
    // each time), as [{phase, ms}] for the JSON; print_phases adds a line under the table.
    auto time_phases = [&](bool backward) {
      nlohmann::json out = nlohmann::json::array();
      const std::vector<std::string>& names = L->phase_names(backward);
      for (size_t i = 0; i < names.size(); ++i) {
        double ms = 0;
        throw_if_error(time_median_ms(s, o->reps, [&] { return L->run_phase(i, backward, s); }, &ms));
        throw_if_error(L->finish(s));
        out.push_back({{"phase", names[i]}, {"ms", ms}});
      }
      return out;
    };
    auto print_phases = [&](const nlohmann::json& phases) {
      if (phases.is_null()) return;
      double sum = 0;
      std::printf("  unfused, each launch alone (median of %d):", o->reps);
      for (const auto& p : phases) {
        std::printf(" %s %.3f;", p["phase"].get<std::string>().c_str(), p["ms"].get<double>());
        sum += p["ms"].get<double>();
      }
      std::printf(" sum %.3f ms\n", sum);
    };
    if (o->backward) {
      if (cfg.save_activations) {  // the backward reads what this forward saves
        std::fprintf(stderr, "[bench moe] forward (saving activations)...\n");
        throw_if_error(L->run_composition(true, s));
        throw_if_error(L->finish(s));
      }
      std::fprintf(stderr, "[bench moe] backward: verifying...\n");
      auto poison_grads = [&] {
        for (int r = 0; r < W; ++r)
          for (MoeBuffer b : {MoeBuffer::kDx, MoeBuffer::kDWeights, MoeBuffer::kDGateUp, MoeBuffer::kDDown})
            poison_on(s, L->buffer(b, r), L->buffer_bytes(b));
      };
      poison_grads();
      throw_if_error(L->run_backward_composition(false, s));
      throw_if_error(L->finish(s));
      std::vector<std::vector<uint8_t>> unf, fus;
      throw_if_error(download_grads(*L, &unf));
      poison_grads();
      throw_if_error(L->run_backward_composition(true, s));
      throw_if_error(L->finish(s));
      throw_if_error(download_grads(*L, &fus));
      const bool bitwise = fus == unf;
      // Every bf16 output finite (0xFFFF poison is NaN), unfused and fused; the message names the
      // tensor, rank, count and first element (row, column) so a failure points at a task.
      for (const auto* set : {&unf, &fus}) {
        const char* which = set == &unf ? "unfused" : "fused";
        static const char* kNames[4] = {"dx", "d_weights", "d_gate_up", "d_down"};
        const int64_t cols[4] = {H, k, 2 * I, H};
        for (size_t i = 0; i < set->size(); i += 4)
          for (size_t q : {size_t(0), size_t(2), size_t(3)}) {
            const std::string bad = non_finite_bf16(reinterpret_cast<const uint16_t*>((*set)[i + q].data()),
                                                    (*set)[i + q].size() / 2, cols[q]);
            if (!bad.empty())
              throw Error(Status(StatusCode::kInternal, std::string(which) + " backward output is not finite: " + kNames[q] +
                                                            " of rank " + std::to_string(i / 4) + ", " + bad));
          }
      }
      double rel = 0;
      throw_if_error(moe_reference_error_backward(cfg, moe_ref_from_layer(*L, 0), ids0, w0, reinterpret_cast<const uint16_t*>(fus[0].data()),
                                                  reinterpret_cast<const float*>(fus[1].data()), &rel));
      if (!bitwise) throw Error(Status(StatusCode::kInternal, "fused backward differs from the unfused composition"));
      if (!(rel < 2e-2)) throw Error(Status(StatusCode::kInternal, "fused backward vs fp64: relative error " + std::to_string(rel)));
      std::fprintf(stderr, "[bench moe] backward: timing...\n");
      std::vector<double> med;  // fused and unfused alternate (bench_timing.h)
      throw_if_error(time_median_interleaved_ms(s, o->reps,
                                                {[&](int) { return L->run_backward_composition(true, s); },
                                                 [&](int) { return L->run_backward_composition(false, s); }},
                                                &med));
      throw_if_error(L->finish(s));
      const double t_fused = med[0], t_unfused = med[1];
      double t_forward = 0;  // --save-activations: the saving forward, timed after the backward (it rewrites what it saved)
      if (cfg.save_activations) {
        throw_if_error(time_median_ms(s, o->reps, [&] { return L->run_composition(true, s); }, &t_forward));
        throw_if_error(L->finish(s));
      }
      const nlohmann::json phases = o->phase_times ? time_phases(true) : nlohmann::json();
      const double flops = moe_backward_flops(cfg), fwd_flops = moe_forward_flops(cfg);
      std::printf("moe backward %s W=%d T=%ld H=%ld I=%ld E=%d k=%d routing=%s (virtual ranks on one GPU)\n", o->model.c_str(), W,
                  T, H, I, E, k, o->routing.c_str());
      std::printf("  %s\n", L->describe().c_str());
      std::printf("  %-46s %10s %10s %10s\n", "variant", "ms", "TFLOP/s", "x fused");
      auto line = [&](const char* name, double ms) {
        std::printf("  %-46s %10.3f %10.1f %10.3f\n", name, ms, flops / (ms * 1e-3) / 1e12, ms / t_fused);
      };
      line("fused backward (kosmos, one launch)", t_fused);
      line(unfused_label("unfused backward", true).c_str(), t_unfused);
      if (cfg.save_activations) {
        std::printf("  %-46s %10.3f %10.1f\n", "forward saving activations (one launch)", t_forward,
                    fwd_flops / (t_forward * 1e-3) / 1e12);
        std::printf("  %-46s %10.3f %10.1f\n", "training step: that forward + fused backward", t_forward + t_fused,
                    3.0 * fwd_flops / ((t_forward + t_fused) * 1e-3) / 1e12);
      }
      std::printf("  bitwise fused==unfused (dx, d_weights, dGateUp, dDown of every rank): %s; rel.err of dx, d_weights vs "
                  "fp64 (3 tokens of rank 0) %.2e\n",
                  bitwise ? "yes" : "no", rel);
      print_phases(phases);
      if (!o->trace_svg.empty()) trace_one_run(true);
      if (!o->json.empty()) {
        nlohmann::json j = result_json("moe_backward", t_fused, t_unfused);
        j["flops"] = flops;
        j["fused_tflops"] = flops / (t_fused * 1e-3) / 1e12;
        j["unfused_tflops"] = flops / (t_unfused * 1e-3) / 1e12;
        j["bitwise_fused_eq_unfused"] = bitwise;
        j["save_activations"] = cfg.save_activations;
        if (cfg.save_activations) {
          j["forward_saving_ms"] = t_forward;
          j["step_ms"] = t_forward + t_fused;
        }
        j["rel_err_vs_fp64"] = rel;
        j["trace_enabled"] = cfg.trace;
        if (o->phase_times) j["unfused_phase_ms"] = phases;
        throw_if_error(write_json(o->json, j));
      }
      cudaStreamDestroy(s);
      return;
    }

    std::fprintf(stderr, "[bench moe] verifying...\n");
    auto poison_y = [&] {
      for (int r = 0; r < W; ++r) poison_on(s, L->buffer(MoeBuffer::kY, r), L->buffer_bytes(MoeBuffer::kY));
    };
    poison_y();
    throw_if_error(L->run_composition(false, s));
    throw_if_error(L->finish(s));
    std::vector<uint16_t> y_unfused, y_fused;
    std::vector<std::vector<uint16_t>> unf(W);
    for (int r = 0; r < W; ++r) throw_if_error(download(L->buffer(MoeBuffer::kY, r), size_t(T * H), 0, &unf[r]));
    poison_y();
    throw_if_error(L->run_composition(true, s));
    throw_if_error(L->finish(s));
    bool bitwise = true;
    for (int r = 0; r < W; ++r) {
      std::vector<uint16_t> yf;
      throw_if_error(download(L->buffer(MoeBuffer::kY, r), size_t(T * H), 0, &yf));
      bitwise &= yf == unf[r];
      if (const std::string bad = non_finite_bf16(yf.data(), yf.size(), H); !bad.empty())
        throw Error(Status(StatusCode::kInternal, "fused output y of rank " + std::to_string(r) + " is not finite: " + bad));
      if (r == 0) y_fused = yf;
    }
    double rel = 0;
    throw_if_error(moe_reference_error(cfg, moe_ref_from_layer(*L, 0), ids0, w0, y_fused.data(), &rel));
    if (!bitwise) throw Error(Status(StatusCode::kInternal, "fused differs from the unfused composition"));
    if (!(rel < 2e-2)) throw Error(Status(StatusCode::kInternal, "fused vs fp64 reference: relative error " + std::to_string(rel)));

    // Third variant: the unfused pipeline from standard pieces (cuBLAS grouped GEMMs), verified
    // against the fused output (relative Frobenius error over every rank's y), then timed with the
    // other two.
    double t_cublas = 0, rel_cublas = 0;
    std::string cublas_desc;
    CublasGroupedMoe cb;
    if (!o->skip_cublas) {
      std::fprintf(stderr, "[bench moe] cuBLAS grouped pipeline: verifying...\n");
      throw_if_error(cb.init(*L, rows_per_rank, s));
      throw_if_error(cb.poison());
      throw_if_error(cb.run());
      if (cudaStreamSynchronize(s) != cudaSuccess) throw Error(Status(StatusCode::kCudaError, "cuBLAS grouped pipeline failed"));
      double cn = 0, cd = 0;
      for (int r = 0; r < W; ++r) {
        std::vector<uint16_t> yc;
        throw_if_error(download(cb.y(r), size_t(T * H), 0, &yc));
        for (size_t i = 0; i < yc.size(); ++i) {
          const double a = kernels::gemm::bf16_to_float(yc[i]), b = kernels::gemm::bf16_to_float(unf[r][i]);
          if (!std::isfinite(a)) throw Error(Status(StatusCode::kInternal, "cuBLAS grouped pipeline output is not finite (rank " +
                                                                              std::to_string(r) + ", element " + std::to_string(i) + ")"));
          cn += (a - b) * (a - b);
          cd += b * b;
        }
      }
      rel_cublas = std::sqrt(cn / std::max(cd, 1e-30));
      if (!(rel_cublas < 2e-2))
        throw Error(Status(StatusCode::kInternal, "cuBLAS grouped pipeline vs fused: relative error " + std::to_string(rel_cublas)));
      std::fprintf(stderr, "[bench moe] cuBLAS grouped pipeline: rel.err vs fused %.2e\n", rel_cublas);
      cublas_desc = cb.describe();
    }
    // The variants alternate repetition by repetition (bench_timing.h: timed one after the other,
    // the last one ran on a hotter card -- until the ninth session that was the cuBLAS pipeline).
    std::fprintf(stderr, "[bench moe] timing...\n");
    std::vector<std::function<Status(int)>> variants = {[&](int) { return L->run_composition(true, s); },
                                                        [&](int) { return L->run_composition(false, s); }};
    if (!o->skip_cublas) variants.push_back([&](int) { return cb.run(); });
    std::vector<double> med;
    throw_if_error(time_median_interleaved_ms(s, o->reps, variants, &med));
    throw_if_error(L->finish(s));
    if (cudaStreamSynchronize(s) != cudaSuccess) throw Error(Status(StatusCode::kCudaError, "cuBLAS grouped pipeline failed"));
    const double t_fused = med[0], t_unfused = med[1];
    if (!o->skip_cublas) t_cublas = med[2];
    const nlohmann::json phases = o->phase_times ? time_phases(false) : nlohmann::json();
    const WeightFloor floor =
        weight_floor(double(W) * (L->buffer_bytes(MoeBuffer::kGateUp) + L->buffer_bytes(MoeBuffer::kDown)));
    const double flops = moe_forward_flops(cfg);
    const int64_t max_rows = *std::max_element(rows_per_rank.begin(), rows_per_rank.end());
    std::printf("moe %s W=%d T=%ld H=%ld I=%ld E=%d k=%d routing=%s (virtual ranks on one GPU)\n", o->model.c_str(), W, T, H, I, E,
                k, o->routing.c_str());
    std::printf("  %s\n", L->describe().c_str());
    std::printf("  rows received: max %ld per rank (worst-case buffers %ld)\n", max_rows, int64_t(W) * T * k);
    std::printf("  %-46s %10s %10s %10s\n", "variant", "ms", "TFLOP/s", "x fused");
    auto line = [&](const char* name, double ms) {
      std::printf("  %-46s %10.3f %10.1f %10.3f\n", name, ms, flops / (ms * 1e-3) / 1e12, ms / t_fused);
    };
    line("fused (kosmos, one launch)", t_fused);
    line(unfused_label("unfused", false).c_str(), t_unfused);
    if (!o->skip_cublas) line("unfused: cub permute + cuBLAS grouped GEMMs", t_cublas);
    std::printf("  weight-read floor %.3f ms (%.2f GB / 4.2 TB/s): fused at %.2fx the floor; bitwise fused==unfused: %s; "
                "rel.err vs fp64 (3 tokens of rank 0) %.2e\n",
                floor.ms, floor.bytes / 1e9, t_fused / floor.ms, bitwise ? "yes" : "no", rel);
    print_peak_floor(floor, t_fused);
    if (!o->skip_cublas)
      std::printf("  cuBLAS grouped pipeline: %s; rel.err vs fused (y of every rank) %.2e; fused speedup over it %.3fx\n",
                  cublas_desc.c_str(), rel_cublas, t_cublas / t_fused);
    print_phases(phases);
    if (!o->trace_svg.empty()) trace_one_run(false);
    if (!o->json.empty()) {
      nlohmann::json j = result_json("moe", t_fused, t_unfused);
      j["fused_tflops"] = flops / (t_fused * 1e-3) / 1e12;
      put_floor_json(j, floor, t_fused);
      j["max_rows_per_rank"] = max_rows;
      j["bitwise_fused_eq_unfused"] = bitwise;
      j["rel_err_vs_fp64"] = rel;
      j["trace_enabled"] = cfg.trace;
      if (o->phase_times) j["unfused_phase_ms"] = phases;
      if (!o->skip_cublas) {
        j["cublas_grouped_ms"] = t_cublas;
        j["cublas_grouped_tflops"] = flops / (t_cublas * 1e-3) / 1e12;
        j["speedup_vs_cublas_grouped"] = t_cublas / t_fused;
        j["cublas_grouped_rel_err_vs_fused"] = rel_cublas;
        j["cublas_grouped_pipeline"] = cublas_desc;
      }
      throw_if_error(write_json(o->json, j));
    }
    cudaStreamDestroy(s);
  });
}

}  // namespace kosmos::cli
