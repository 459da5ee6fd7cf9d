#include "common.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <regex>

#include "kosmos/runtime.h"

namespace kosmos::cli {

bool gpu_available() {
  auto info = runtime::query_device(0);
  return info.available && info.cc_major == 9;
}

std::string pick_executor(const std::string& requested) {
  if (requested == "cpu" || requested == "gpu") return requested;
  return gpu_available() ? "gpu" : "cpu";
}

std::string git_commit() {
  // The GPU machine gets a copy of the tree without .git: the caller passes KOSMOS_COMMIT there.
  if (const char* env = std::getenv("KOSMOS_COMMIT"); env && *env) return env;
  std::string out;
  if (FILE* f = popen("git rev-parse --short=12 HEAD 2>/dev/null", "r")) {
    char buf[64] = {0};
    if (fgets(buf, sizeof(buf), f)) out = buf;
    pclose(f);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
#ifdef KOSMOS_GIT_COMMIT
  if (out.empty()) out = KOSMOS_GIT_COMMIT;
#endif
  if (out.empty()) out = "unknown";
  if (FILE* f = popen("git status --porcelain --untracked-files=no 2>/dev/null | head -1", "r")) {
    char buf[8] = {0};
    if (fgets(buf, sizeof(buf), f) && buf[0]) out += "-dirty";
    pclose(f);
  }
  return out;
}

static std::string nvidia_driver() {
  // "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build ..."
  std::ifstream f("/proc/driver/nvidia/version");
  std::string line;
  if (f && std::getline(f, line)) {
    std::smatch m;
    if (std::regex_search(line, m, std::regex("\\s(\\d{3,}\\.\\d+(\\.\\d+)?)\\s"))) return m[1];
  }
  return "";
}

nlohmann::json run_metadata(const std::string& command) {
  auto info = runtime::query_device(0);
  std::time_t now = std::time(nullptr);
  char ts[32];
  std::strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  nlohmann::json j;
  j["command"] = command;
  j["commit"] = git_commit();
  j["date"] = ts;
  j["gpu"] = info.available ? info.name : "none";
  j["sms"] = info.sms;
  j["driver"] = nvidia_driver().empty() ? info.driver : nvidia_driver();
  j["cuda_driver_api"] = info.driver;
  j["cuda_runtime"] = info.runtime;
  j["sm_clock_mhz_max"] = info.clock_mhz;
  j["mem_clock_mhz"] = info.mem_clock_mhz;
  j["mem_bus_bits"] = info.mem_bus_bits;
  return j;
}

WeightFloor weight_floor(double bytes) {
  WeightFloor f;
  f.bytes = bytes;
  f.ms = bytes / 4.2e12 * 1e3;
  f.peak_bw = runtime::query_device(0).peak_mem_bytes_per_s();
  f.peak_ms = f.peak_bw > 0 ? bytes / f.peak_bw * 1e3 : 0.0;
  return f;
}

void print_peak_floor(const WeightFloor& f, double t_fused_ms) {
  if (f.peak_ms <= 0) return;
  std::printf("  at this GPU's peak DRAM bandwidth (%.2f TB/s) the floor is %.3f ms: fused at %.2fx it\n", f.peak_bw / 1e12,
              f.peak_ms, t_fused_ms / f.peak_ms);
}

void put_floor_json(nlohmann::json& j, const WeightFloor& f, double t_fused_ms) {
  j["weight_bytes"] = f.bytes;
  j["weight_floor_ms"] = f.ms;
  j["fused_over_floor"] = t_fused_ms / f.ms;
  j["peak_mem_bandwidth_tbs"] = f.peak_bw / 1e12;
  if (f.peak_ms > 0) {
    j["weight_floor_peak_ms"] = f.peak_ms;
    j["fused_over_peak_floor"] = t_fused_ms / f.peak_ms;
  }
}

Status write_json(const std::string& path, const nlohmann::json& j) {
  std::ofstream f(path);
  KOSMOS_CHECK(f.good(), "cannot write '", path, "'");
  f << j.dump(2) << "\n";
  return Status::ok();
}

void add_bench(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Benchmarks of fused ops against their baselines (same process, same run)");
  bench->require_subcommand(1);
  add_bench_gemm(*bench);
  add_bench_tp(*bench);
  add_bench_moe(*bench);
}

}  // namespace kosmos::cli
