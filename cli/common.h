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
std::string command_line();

}  // namespace kosmos::cli
