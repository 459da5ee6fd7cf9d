// kosmos — command-line tool: device info, plans, traces, benchmarks and the demo.
#include <iostream>

#include "common.h"

namespace kosmos::cli {
static std::string g_command_line;
std::string command_line() { return g_command_line; }
}  // namespace kosmos::cli

int main(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) kosmos::cli::g_command_line += (i ? " " : "") + std::string(argv[i]);
  CLI::App app{"kosmos: transformer layers as self-scheduling persistent kernels on Hopper GPUs"};
  app.require_subcommand(1);
  kosmos::cli::add_info(app);
  kosmos::cli::add_plan(app);
  kosmos::cli::add_trace(app);
  kosmos::cli::add_runtime_bench(app);
  kosmos::cli::add_demo(app);
  kosmos::cli::add_bench(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const kosmos::Error& e) {
    std::cerr << "kosmos: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
