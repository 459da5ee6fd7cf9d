// kosmos bench moe --transport nccl: the fused MoE layer with one process per GPU over the NCCL
// transport (MoeLayer::plan_distributed + transport::make_distributed), expert parallel: E / W
// experts per rank, T tokens per rank. On the same inputs and communicator it times
//   fused     one persistent launch per direction (dispatch, grouped GEMMs, combine; device-
//             initiated stores to the peers), after MoeLayer's epoch barrier;
//   unfused   our own composition: the same tasks as separate launches (6 forward; 7, or 5 with
//             saved activations, backward), each after an epoch barrier;
//   pipeline  forward only: the unfused pipeline from standard pieces (moe_cublas_pipeline.h): cub
//             sort permute, ncclAllGather of the counts + one host sync, ncclSend/ncclRecv
//             all-to-all, cublasGemmGroupedBatchedEx + SwiGLU + cublasGemmGroupedBatchedEx, the
//             all-to-all back, weighted un-permute. It syncs with the host mid-way, so it is
//             timed from its barrier without the launch gate (bench_nccl.h).
// The inputs and the routing are those of `kosmos bench moe --world W` (moe_bench_common.h): the
// same layer as W virtual ranks on one GPU.
// Verification (every rank; verdicts reduced across ranks so that all ranks stop together): fused
// == unfused bit for bit (y; backward: dx, d_weights, d_gate_up, d_down); every output finite;
// three tokens of every rank against fp64 (y; backward: dx and d_weights), the peers' expert
// weights regenerated on this GPU from their hash seeds; forward: the pipeline's y vs fused y
// relative L2 error < 2e-2. Timing: bench_nccl.h, reported as the max over ranks of each rank's
// median.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench_moe_nccl.h"
#include "bench_nccl.h"
#include "common.h"
#include "kosmos/cuda_check.h"
#include "kosmos/transport.h"
#include "moe_bench_common.h"
#include "moe_cublas_pipeline.h"

namespace kosmos::cli {

namespace {

void cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(Status(StatusCode::kCudaError, std::string(what) + ": " + cudaGetErrorString(e)));
}

// A device copy of a buffer (the unfused composition's outputs, compared on the device).
struct DevCopy {
  void* p = nullptr;
  size_t bytes = 0;
  DevCopy() = default;
  DevCopy(const DevCopy&) = delete;
  DevCopy& operator=(const DevCopy&) = delete;
  DevCopy(DevCopy&& o) noexcept : p(o.p), bytes(o.bytes) { o.p = nullptr; }
  void take(const void* src, size_t n, cudaStream_t s) {
    bytes = n;
    cuda(cudaMalloc(&p, std::max<size_t>(n, 16)), "cudaMalloc");
    cuda(cudaMemcpyAsync(p, src, n, cudaMemcpyDeviceToDevice, s), "copy output");
  }
  ~DevCopy() {
    if (p) cudaFree(p);
  }
};

// This rank's outputs of one direction: (buffer, is bf16).
std::vector<std::pair<MoeBuffer, bool>> outputs(bool backward) {
  if (!backward) return {{MoeBuffer::kY, true}};
  return {{MoeBuffer::kDx, true}, {MoeBuffer::kDWeights, false}, {MoeBuffer::kDGateUp, true}, {MoeBuffer::kDDown, true}};
}

}  // namespace

void run_bench_moe_nccl(const MoeNcclBenchOptions& o) {
  // The launch environment was checked by the caller (cmd_bench_moe.cu: the world it planned for).
  std::unique_ptr<transport::NcclTransport> t;
  throw_if_error(transport::NcclTransport::create_from_env(&t));
  run_rank_or_exit(*t, "bench moe --transport nccl", [&] {
    const int rank = t->rank(), W = t->world();
    const bool lead = rank == 0;
    auto say = [&](const std::string& msg) {
      if (lead) std::fprintf(stderr, "[bench moe nccl] %s\n", msg.c_str());
    };
    MoeConfig cfg = o.cfg;
    if (cfg.world != W)
      throw Error(Status(StatusCode::kInvalidArgument, "bench moe --transport nccl: the config's world " + std::to_string(cfg.world) +
                                                           " is not WORLD_SIZE " + std::to_string(W)));
    cfg.fused = true;
    cfg.cpu = false;
    cfg.trace = !o.trace_svg.empty();  // the runners record a trace on every fused run: the timed ones too
    cfg.watchdog_seconds = std::max(cfg.watchdog_seconds, 30.0);
    const bool bwd = cfg.backward;
    const int E = cfg.num_experts, k = cfg.top_k;
    const int64_t T = cfg.tokens, H = cfg.hidden, I = cfg.intermediate;
    if (cfg.trace) say("--trace-svg: every fused run records its trace, so the times include tracing");
    say(std::string(bwd ? "backward " : "") + o.model + " W=" + std::to_string(W) + " T=" + std::to_string(T) + " E=" +
        std::to_string(E) + " k=" + std::to_string(k) + " " + o.routing + ", NCCL " + transport::nccl_library_version().to_string() +
        ": planning...");
    std::unique_ptr<MoeLayer> L;
    throw_if_error(MoeLayer::plan_distributed(cfg, transport::make_distributed(*t), &L));

    NcclRank c;
    c.rank = rank;
    c.W = W;
    c.t = t.get();
    c.comm = static_cast<ncclComm_t>(t->nccl_comm());
    cuda(cudaStreamCreateWithFlags(&c.s0, cudaStreamNonBlocking), "stream");
    struct StreamGuard {
      cudaStream_t s;
      ~StreamGuard() { cudaStreamDestroy(s); }
    } stream_guard{c.s0};
    const cudaStream_t s = c.s0;
    Gate gate;
    throw_if_error(gate.init());
    HostDoubles xfer;
    throw_if_error(xfer.init(W, 64));
    CmpOut* d_cmp = nullptr;
    cuda(cudaMalloc(reinterpret_cast<void**>(&d_cmp), sizeof(CmpOut)), "cudaMalloc");
    struct CmpGuard {
      CmpOut* p;
      ~CmpGuard() { cudaFree(p); }
    } cmp_guard{d_cmp};

    // The routing of every rank (each process generates all of it: the receive counts need it) and
    // this rank's inputs.
    const MoeRouting routing = make_moe_routing(W, T, E, k, o.routing);
    throw_if_error(fill_moe_rank_inputs(*L, rank, routing, s));
    if (bwd && cfg.save_activations) {  // the backward reads what this forward saves
      say("forward (saving activations)...");
      throw_if_error(L->run_composition(true, s));
      throw_if_error(L->finish(s));
    }

    // ---- verification (collective)
    say("verifying...");
    auto run_dir = [&](bool fused) { return bwd ? L->run_backward_composition(fused, s) : L->run_composition(fused, s); };
    const std::vector<std::pair<MoeBuffer, bool>> outs = outputs(bwd);
    auto poison = [&] {
      for (auto [b, is_bf16] : outs) poison_on(s, L->buffer(b, rank), L->buffer_bytes(b));
    };
    poison();
    throw_if_error(run_dir(false));
    throw_if_error(L->finish(s));
    std::vector<DevCopy> unfused_out;
    for (auto [b, is_bf16] : outs) {
      unfused_out.emplace_back();
      unfused_out.back().take(L->buffer(b, rank), L->buffer_bytes(b), s);
    }
    poison();
    throw_if_error(run_dir(true));
    throw_if_error(L->finish(s));
    double mismatches = 0, nonfinite = 0;
    for (size_t i = 0; i < outs.size(); ++i) {
      const auto [b, is_bf16] = outs[i];
      if (is_bf16) {
        CmpOut u{};
        throw_if_error(compare_bf16(L->buffer(b, rank), unfused_out[i].p, L->buffer_bytes(b) / 2, d_cmp, s, &u));
        mismatches += double(u.mismatches);
        nonfinite += double(u.nonfinite);
      } else {
        unsigned long long m = 0;
        throw_if_error(count_word_mismatches(L->buffer(b, rank), unfused_out[i].p, L->buffer_bytes(b), d_cmp, s, &m));
        mismatches += double(m);
      }
    }
    unfused_out.clear();
    // fp64: three tokens of this rank; the peers' experts regenerated here.
    double rel_fp64 = 0;
    {
      std::vector<uint16_t> out0;
      throw_if_error(download(L->buffer(bwd ? MoeBuffer::kDx : MoeBuffer::kY, rank), size_t(T * H), 0, &out0));
      const MoeRefSource src = moe_ref_regenerated(cfg, rank);
      if (bwd) {
        std::vector<float> dw;
        throw_if_error(download(L->buffer(MoeBuffer::kDWeights, rank), size_t(T * k), 0, &dw));
        throw_if_error(moe_reference_error_backward(cfg, src, routing.ids[size_t(rank)], routing.weights[size_t(rank)], out0.data(),
                                                    dw.data(), &rel_fp64));
      } else {
        throw_if_error(moe_reference_error(cfg, src, routing.ids[size_t(rank)], routing.weights[size_t(rank)], out0.data(), &rel_fp64));
      }
    }
    // Forward: the standard-pieces pipeline on the same inputs, against the fused y.
    const bool with_pipeline = !bwd && !o.skip_cublas;
    CublasGroupedMoe cb;
    double pipe_rel = 0, pipe_nonfinite = 0;
    if (with_pipeline) {
      say("NCCL + cuBLAS grouped pipeline: verifying...");
      throw_if_error(cb.init(*L, routing.rows_per_rank, s, c.comm, rank));
      throw_if_error(cb.poison());
      throw_if_error(cb.run());
      cuda(cudaStreamSynchronize(s), "pipeline");
      CmpOut a{};
      throw_if_error(compare_bf16(cb.y(rank), L->buffer(MoeBuffer::kY, rank), size_t(T * H), d_cmp, s, &a));
      pipe_nonfinite = double(a.nonfinite);
      pipe_rel = std::sqrt(a.num / std::max(a.den, 1e-30));
    }
    std::vector<double> verdict = {mismatches, nonfinite, std::isfinite(rel_fp64) ? rel_fp64 : 1e300, pipe_nonfinite,
                                   std::isfinite(pipe_rel) ? pipe_rel : 1e300};
    throw_if_error(xfer.allreduce_max(c, &verdict));
    if (verdict[1] > 0)
      throw Error(Status(StatusCode::kInternal, "fused output has non-finite values (" + std::to_string(long(verdict[1])) +
                                                    " on some rank; outputs start as NaN poison: unwritten?)"));
    if (verdict[0] > 0)
      throw Error(Status(StatusCode::kInternal, "fused differs from the unfused composition: up to " + std::to_string(long(verdict[0])) +
                                                    " elements on some rank"));
    if (!(verdict[2] < 2e-2))
      throw Error(Status(StatusCode::kInternal, "fused vs fp64 (3 tokens per rank): relative error " + std::to_string(verdict[2])));
    if (verdict[3] > 0) throw Error(Status(StatusCode::kInternal, "the NCCL + cuBLAS pipeline's y has non-finite values on some rank"));
    if (with_pipeline && !(verdict[4] < 2e-2))
      throw Error(Status(StatusCode::kInternal, "NCCL + cuBLAS pipeline vs fused: relative error " + std::to_string(verdict[4])));
    rel_fp64 = verdict[2];
    pipe_rel = verdict[4];

    // ---- timing (collective)
    say("timing...");
    // The variants, by their JSON key; the pipeline waits for the host mid-way, so it runs ungated.
    struct Variant {
      const char* key;
      std::function<Status()> fn;
      bool ungated;
    };
    std::vector<Variant> variants = {{"fused_ms", [&] { return run_dir(true); }, false},
                                     {"unfused_ms", [&] { return run_dir(false); }, false}};
    if (with_pipeline) variants.push_back({"cublas_grouped_ms", [&] { return cb.run(); }, true});
    if (bwd && cfg.save_activations)  // the saving forward: timed with the others (it rewrites what it saved, the same each time)
      variants.push_back({"forward_saving_ms", [&] { return L->run_composition(true, s); }, false});
    std::vector<std::function<Status()>> fns;
    std::vector<bool> ungated;
    for (const Variant& v : variants) {
      fns.push_back(v.fn);
      ungated.push_back(v.ungated);
    }
    std::vector<double> mine;
    throw_if_error(time_nccl_variants(c, gate, o.reps, fns, &mine, ungated));
    throw_if_error(L->finish(s));
    cuda(cudaStreamSynchronize(s), "timing");
    std::vector<double> per_rank;
    throw_if_error(xfer.allgather(c, mine, &per_rank));
    std::vector<double> mx = mine;
    throw_if_error(xfer.allreduce_max(c, &mx));
    if (cfg.trace) {  // every rank: one more fused run, its breakdown on this rank's stdout, its own SVG
      std::string path = o.trace_svg;
      if (W > 1) {
        const size_t dot = path.rfind(".svg");
        path.insert(dot == std::string::npos ? path.size() : dot, ".rank" + std::to_string(rank));
      }
      std::printf("trace of rank %d (%s):\n", rank, path.c_str());
      throw_if_error(trace_moe_run(*L, bwd,
                                   std::string("kosmos moe ") + (bwd ? "backward " : "forward ") + o.model + " rank " +
                                       std::to_string(rank) + " of W=" + std::to_string(W) + " T=" + std::to_string(T) +
                                       " (one process per GPU, NCCL)",
                                   path, s, /*all_ranks=*/W == 1));
    }
    throw_if_error(t->barrier(s));
    cuda(cudaStreamSynchronize(s), "final barrier");
    if (!lead) return;

    const double flops = bwd ? moe_backward_flops(cfg) : moe_forward_flops(cfg);
    auto max_ms = [&](const char* key) {  // the max over ranks of a variant's medians; 0 when not timed
      for (size_t v = 0; v < variants.size(); ++v)
        if (std::string(variants[v].key) == key) return mx[v];
      return 0.0;
    };
    const double t_fused = max_ms("fused_ms"), t_unfused = max_ms("unfused_ms");
    const double t_pipe = max_ms("cublas_grouped_ms"), t_fwd = max_ms("forward_saving_ms");
    const int64_t max_rows = *std::max_element(routing.rows_per_rank.begin(), routing.rows_per_rank.end());
    // Each GPU reads its own experts' weights.
    const WeightFloor floor = weight_floor(double(L->buffer_bytes(MoeBuffer::kGateUp) + L->buffer_bytes(MoeBuffer::kDown)));
    std::printf("moe%s %s W=%d T=%ld H=%ld I=%ld E=%d k=%d routing=%s (NCCL transport, one process per GPU; NCCL %s)\n",
                bwd ? " backward" : "", o.model.c_str(), W, long(T), long(H), long(I), E, k, o.routing.c_str(),
                transport::nccl_library_version().to_string().c_str());
    std::printf("  %s\n", L->describe().c_str());
    std::printf("  rows received: max %ld per rank; times: max over %d rank(s) of each rank's median of %d; TFLOP/s: whole layer\n",
                long(max_rows), W, o.reps);
    std::printf("  %-52s %10s %10s %10s %10s\n", "variant", "ms", "TFLOP/s", "/GPU", "x fused");
    auto line = [&](const std::string& name, double ms, double f) {
      const double tf = f / (ms * 1e-3) / 1e12;
      std::printf("  %-52s %10.3f %10.1f %10.1f %10.3f\n", name.c_str(), ms, tf, tf / W, ms / t_fused);
    };
    line(bwd ? "fused backward (kosmos, one launch + epoch barrier)" : "fused (kosmos, one launch + epoch barrier)", t_fused, flops);
    line("unfused kosmos composition (" + std::to_string(L->phase_names(bwd).size()) + " launches + barriers)", t_unfused, flops);
    if (with_pipeline) line("NCCL all-to-all + cuBLAS grouped pipeline (ungated)", t_pipe, flops);
    if (bwd && cfg.save_activations) {
      line("forward saving activations (one launch)", t_fwd, moe_forward_flops(cfg));
      line("training step: that forward + fused backward", t_fwd + t_fused, moe_forward_flops(cfg) + flops);
    }
    std::printf("  weight-read floor per GPU %.3f ms (%.2f GB / 4.2 TB/s): fused at %.2fx; bitwise fused==unfused: yes; rel.err vs fp64 "
                "(3 tokens per rank) %.2e%s\n",
                floor.ms, floor.bytes / 1e9, t_fused / floor.ms, rel_fp64,
                with_pipeline ? (", pipeline vs fused " + std::to_string(pipe_rel)).c_str() : "");
    print_peak_floor(floor, t_fused);
    if (with_pipeline) std::printf("  pipeline: %s\n", cb.describe().c_str());
    if (o.json.empty()) return;
    nlohmann::json j = run_metadata(command_line());
    j["bench"] = bwd ? "moe_backward" : "moe";
    put_moe_shape(j, o.model, o.routing, cfg);
    j["transport"] = "nccl (one process per GPU)";
    j["nccl_library"] = transport::nccl_library_version().to_string();
    j["nccl_headers"] = transport::nccl_header_version().to_string();
    j["plan"] = L->describe();
    j["flops"] = flops;
    j["fused_ms"] = t_fused;
    j["fused_tflops"] = flops / (t_fused * 1e-3) / 1e12;
    j["unfused_ms"] = t_unfused;
    j["speedup_vs_unfused"] = t_unfused / t_fused;
    j["max_rows_per_rank"] = max_rows;
    j["rows_per_rank"] = routing.rows_per_rank;
    j["weight_floor_ms_per_gpu"] = floor.ms;
    put_floor_json(j, floor, t_fused);  // per GPU here
    j["bitwise_fused_eq_unfused"] = true;
    j["rel_err_vs_fp64"] = rel_fp64;
    j["save_activations"] = cfg.save_activations;
    if (with_pipeline) {
      j["cublas_grouped_ms"] = t_pipe;
      j["cublas_grouped_tflops"] = flops / (t_pipe * 1e-3) / 1e12;
      j["speedup_vs_cublas_grouped"] = t_pipe / t_fused;
      j["cublas_grouped_rel_err_vs_fused"] = pipe_rel;
      j["cublas_grouped_pipeline"] = cb.describe();
    }
    if (bwd && cfg.save_activations) {
      j["forward_saving_ms"] = t_fwd;
      j["step_ms"] = t_fwd + t_fused;
    }
    j["reps"] = o.reps;
    j["trace_enabled"] = cfg.trace;
    j["timing"] = "per rank: gate kernel + NCCL barrier, then CUDA events around the variant (the pipeline: no gate, it syncs with the "
                  "host mid-way); 3 warm-ups, median of reps, the variants alternating repetition by repetition; reported: max over "
                  "ranks. fused / unfused include MoeLayer's epoch barrier before each launch (one NCCL all-reduce).";
    nlohmann::json pr;
    for (size_t v = 0; v < variants.size(); ++v) {
      std::vector<double> col;
      for (int r = 0; r < W; ++r) col.push_back(per_rank[size_t(r) * variants.size() + v]);
      pr[variants[v].key] = col;
    }
    j["per_rank_median_ms"] = pr;
    throw_if_error(write_json(o.json, j));
  });
}

}  // namespace kosmos::cli
