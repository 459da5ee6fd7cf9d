// kosmos demo: the main job. Runs the sample pipeline on the GPU (or, without one, the CPU
// executor at a small size), verifies it, and prints what ran.
#include <iostream>

#include "common.h"
#include "kosmos/trace.h"
#include "runtime/sample_pipeline.h"

namespace kosmos::cli {

void add_demo(CLI::App& app) {
  auto* cmd = app.add_subcommand("demo", "Run and verify a sample fused plan (GPU if present, else the CPU executor)");
  struct Opts {
    std::string executor = "auto", svg;
    uint32_t world = 0, chunks = 0;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--executor", o->executor, "auto, gpu or cpu")->check(CLI::IsMember({"auto", "gpu", "cpu"}));
  cmd->add_option("--world", o->world, "Virtual ranks (default 8)")->check(CLI::Range(1u, 64u));
  cmd->add_option("--chunks", o->chunks, "Chunks per rank (default: 256 on GPU, 16 on CPU)")->check(CLI::Range(1u, 65536u));
  cmd->add_option("--svg", o->svg, "Also write a trace timeline SVG here");
  cmd->callback([o] {
    const std::string ex = pick_executor(o->executor);
    if (ex == "gpu" && !gpu_available()) throw Error(Status(StatusCode::kUnavailable, "no Hopper GPU visible; use --executor cpu"));
    const uint32_t world = o->world ? o->world : 8;
    const uint32_t chunks = o->chunks ? o->chunks : (ex == "gpu" ? 256 : 16);
    const uint64_t chunk_bytes = ex == "gpu" ? 1 << 20 : 16 << 10;
    std::cout << "kosmos demo: sample pipeline (copy -> compute -> checksum per chunk, ring of " << world
              << " virtual ranks), " << chunks << " chunks x " << (chunk_bytes >> 10) << " KiB per rank, executor " << ex
              << (ex == "cpu" ? " (no GPU: small size)" : "") << "\n";
    runtime::SampleResult r;
    throw_if_error(runtime::run_sample(ex, world, chunks, chunk_bytes, 2000, ex == "gpu" ? 20 : 3, !o->svg.empty(), &r));
    const double gb = double(world) * chunks * chunk_bytes * 2 / 1e9;  // copy: read + write
    std::cout << "  " << r.tasks << " tasks in one " << (ex == "gpu" ? "persistent launch" : "CPU-executor run")
              << ": median " << r.median_us << " us per run, " << gb / (r.median_us * 1e-6) << " GB/s copied; outputs verified\n";
    if (!o->svg.empty()) {
      throw_if_error(runtime::write_trace_files(r.trace, "kosmos demo", "", o->svg));
      std::cout << "  wrote " << o->svg << "\n";
    }
  });
}

}  // namespace kosmos::cli
