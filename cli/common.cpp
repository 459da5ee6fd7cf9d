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
  return j;
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
