// kosmos info: GPU, SMs, driver, NCCL version, backends.
#include <dlfcn.h>

#include <iostream>

#include "common.h"
#include "kosmos/runtime.h"

namespace kosmos::cli {

static std::string nccl_version() {
  void* h = dlopen("libnccl.so.2", RTLD_LAZY);
  if (!h) return "not found";
  using Fn = int (*)(int*);
  auto fn = reinterpret_cast<Fn>(dlsym(h, "ncclGetVersion"));
  int v = 0;
  std::string out = "unknown";
  if (fn && fn(&v) == 0) out = std::to_string(v / 10000) + "." + std::to_string((v / 100) % 100) + "." + std::to_string(v % 100);
  dlclose(h);
  return out;
}

void add_info(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "Show the GPU, driver, NCCL version and available backends");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "Print JSON instead of text");
  cmd->callback([json] {
    auto info = runtime::query_device(0);
    auto meta = run_metadata(command_line());
    meta["nccl"] = nccl_version();
    meta["executors"] = info.available && info.cc_major == 9 ? nlohmann::json{"gpu", "cpu"} : nlohmann::json{"cpu"};
    meta["memory_gib"] = double(info.memory_bytes) / (1 << 30);
    meta["l2_mib"] = double(info.l2_bytes) / (1 << 20);
    if (!info.available) meta["gpu_error"] = info.error;
    if (*json) {
      std::cout << meta.dump(2) << "\n";
      return;
    }
    std::cout << "kosmos " << "0.1.0" << " (commit " << meta["commit"].get<std::string>() << ")\n";
    if (info.available) {
      std::cout << "GPU:      " << info.name << ", sm_" << info.cc_major << info.cc_minor << ", " << info.sms << " SMs, "
                << meta["memory_gib"].get<double>() << " GiB, L2 " << meta["l2_mib"].get<double>() << " MiB\n"
                << "driver:   " << meta["driver"].get<std::string>() << " (CUDA driver API " << info.driver
                << ", runtime " << info.runtime << ")\n";
      if (info.cc_major != 9) std::cout << "note:     kosmos GPU kernels need sm_90a (H100/H200); GPU executor unavailable\n";
    } else {
      std::cout << "GPU:      none (" << info.error << ")\n";
    }
    std::cout << "NCCL:     " << meta["nccl"].get<std::string>() << "\n"
              << "backends: executors " << meta["executors"].dump() << "; transport local (virtual ranks)\n";
  });
}

}  // namespace kosmos::cli
