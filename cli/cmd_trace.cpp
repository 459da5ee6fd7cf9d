// kosmos trace: run the sample pipeline with tracing on and write Chrome-trace JSON + SVG.
#include <iostream>

#include "common.h"
#include "kosmos/trace.h"
#include "runtime/sample_pipeline.h"

namespace kosmos::cli {

void add_trace(CLI::App& app) {
  auto* cmd = app.add_subcommand("trace", "Run a sample plan with tracing; write Chrome-trace JSON and an SVG timeline");
  struct Opts {
    std::string executor = "auto", json = "kosmos-trace.json", svg = "kosmos-trace.svg";
    uint32_t world = 8, chunks = 64;
    uint64_t chunk_kib = 256, spin_ns = 5000;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--executor", o->executor, "auto (GPU if present), gpu or cpu")->check(CLI::IsMember({"auto", "gpu", "cpu"}));
  cmd->add_option("--world", o->world, "Virtual ranks")->check(CLI::Range(1u, 64u));
  cmd->add_option("--chunks", o->chunks, "Chunks per rank")->check(CLI::Range(1u, 4096u));
  cmd->add_option("--chunk-kib", o->chunk_kib, "Chunk size in KiB")->check(CLI::Range(1u, 65536u));
  cmd->add_option("--spin-ns", o->spin_ns, "Stand-in compute per chunk (ns)");
  cmd->add_option("--json", o->json, "Chrome-trace JSON output (open in Perfetto)");
  cmd->add_option("--svg", o->svg, "SVG timeline output");
  cmd->callback([o] {
    const std::string ex = pick_executor(o->executor);
    if (ex == "gpu" && !gpu_available()) throw Error(Status(StatusCode::kUnavailable, "no Hopper GPU visible; use --executor cpu"));
    uint32_t chunks = o->chunks;
    uint64_t chunk_bytes = o->chunk_kib * 1024;
    if (ex == "cpu" && o->executor == "auto") chunk_bytes = std::min<uint64_t>(chunk_bytes, 16384);
    runtime::SampleResult r;
    throw_if_error(runtime::run_sample(ex, o->world, chunks, chunk_bytes, o->spin_ns, 2, true, &r));
    throw_if_error(runtime::write_trace_files(r.trace, "kosmos sample pipeline (" + ex + ", world " + std::to_string(o->world) + ")",
                                              o->json, o->svg));
    std::cout << "ran " << r.tasks << " tasks on the " << ex << " executor (verified), " << r.median_us
              << " us per run; wrote " << o->json << " and " << o->svg << "\n";
  });
}

}  // namespace kosmos::cli
