// Helpers shared by the CLI subcommands.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "kosmos/plan.h"
#include "kosmos/status.h"

namespace kosmos::cli {

void add_info(CLI::App& app);
void add_plan(CLI::App& app);
void add_trace(CLI::App& app);
void add_runtime_bench(CLI::App& app);
void add_demo(CLI::App& app);
void add_bench(CLI::App& app);
void add_bench_gemm(CLI::App& bench);
void add_bench_tp(CLI::App& bench);
void add_bench_moe(CLI::App& bench);

// "gpu" if a Hopper GPU is visible, else "cpu"; `requested` may force either ("auto" decides).
std::string pick_executor(const std::string& requested);
bool gpu_available();

// Metadata every benchmark JSON carries: GPU name, driver, CUDA, commit, command, time.
nlohmann::json run_metadata(const std::string& command);
std::string git_commit();
Status write_json(const std::string& path, const nlohmann::json& j);

// The MoE benches' weight-read floor: the expert weight bytes a GPU reads / 4.2 TB/s (the H200's
// measured device copy rate, as issue 5 defines it), and the same at this GPU's peak DRAM bandwidth
// (memory clock x bus width; below 4.2 TB/s on an H100; 0 when the device does not report it).
struct WeightFloor {
  double bytes = 0, ms = 0, peak_bw = 0, peak_ms = 0;
};
WeightFloor weight_floor(double bytes);
// One line "  at this GPU's peak DRAM bandwidth ...: fused at N x it" (nothing when unknown), and
// the floor's JSON fields (weight_bytes, weight_floor_ms, fused_over_floor, and the peak's).
void print_peak_floor(const WeightFloor& f, double t_fused_ms);
void put_floor_json(nlohmann::json& j, const WeightFloor& f, double t_fused_ms);
std::string command_line();

}  // namespace kosmos::cli
