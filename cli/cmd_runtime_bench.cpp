// kosmos runtime-bench: scheduling overhead of the persistent runtime on the GPU.
//
//   wide:  N independent empty tasks; amortized cost per task with every CTA claiming.
//   chain: L tasks, each waiting on the previous one; cost per dependency hop (consecutive tasks
//          land on different SMs, verified from a trace).
//   base:  one empty kernel launch per task, back to back on a stream.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <iostream>

#include "common.h"
#include "kosmos/cuda_check.h"
#include "kosmos/runtime.h"
#include "runtime/launch_baseline.h"

namespace kosmos::cli {

namespace {
struct Timing {
  double median_us = 0, min_us = 0;
};

Status time_plan(const plan::Plan& p, int max_ctas, int reps, Timing* t, int* grid) {
  runtime::GpuOptions o;
  o.max_ctas = max_ctas;
  std::unique_ptr<runtime::GpuExecutor> ex;
  KOSMOS_RETURN_IF_ERROR(runtime::GpuExecutor::create(p, o, &ex));
  *grid = ex->grid_size();
  cudaStream_t s;
  KOSMOS_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t a, b;
  KOSMOS_CUDA_CHECK(cudaEventCreate(&a));
  KOSMOS_CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) KOSMOS_RETURN_IF_ERROR(ex->run(s));
  KOSMOS_RETURN_IF_ERROR(ex->finish(s));
  std::vector<double> v;
  for (int i = 0; i < reps; ++i) {
    KOSMOS_CUDA_CHECK(cudaEventRecord(a, s));
    KOSMOS_RETURN_IF_ERROR(ex->run(s));
    KOSMOS_CUDA_CHECK(cudaEventRecord(b, s));
    KOSMOS_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    KOSMOS_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    v.push_back(ms * 1e3);
  }
  KOSMOS_RETURN_IF_ERROR(ex->finish(s));
  uint64_t epoch = 0;
  KOSMOS_RETURN_IF_ERROR(ex->read_epoch(&epoch));
  KOSMOS_CHECK_CODE(epoch == uint64_t(reps + 3), StatusCode::kInternal, "runtime-bench: epoch ", epoch, " after ", reps + 3, " runs");
  std::sort(v.begin(), v.end());
  t->median_us = v[v.size() / 2];
  t->min_us = v.front();
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaStreamDestroy(s);
  return Status::ok();
}

plan::Plan wide_plan(uint32_t n) {
  plan::PlanBuilder b(1, "wide");
  for (uint32_t i = 0; i < n; ++i) b.add_task(plan::TaskKind::kNop, 0);
  plan::Plan p;
  throw_if_error(b.build(&p));
  return p;
}

plan::Plan chain_plan(uint32_t n) {
  plan::PlanBuilder b(1, "chain");
  uint32_t c = b.add_counters(n);
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t t = b.add_task(plan::TaskKind::kNop, 0);
    if (i) b.wait(t, c + i - 1, 1);
    b.signal(t, 0, c + i);
  }
  plan::Plan p;
  throw_if_error(b.build(&p));
  return p;
}

// Fraction of consecutive chain tasks that ran on different SMs (from a traced run).
Status chain_cross_sm_fraction(const plan::Plan& p, double* frac) {
  runtime::GpuOptions o;
  o.trace = true;
  std::unique_ptr<runtime::GpuExecutor> ex;
  KOSMOS_RETURN_IF_ERROR(runtime::GpuExecutor::create(p, o, &ex));
  KOSMOS_RETURN_IF_ERROR(ex->run(nullptr));
  KOSMOS_RETURN_IF_ERROR(ex->finish(nullptr));
  std::vector<runtime::TraceRecord> tr;
  KOSMOS_RETURN_IF_ERROR(ex->read_trace(&tr));
  size_t cross = 0;
  for (size_t i = 1; i < tr.size(); ++i) cross += tr[i].sm != tr[i - 1].sm;
  *frac = tr.size() > 1 ? double(cross) / double(tr.size() - 1) : 0;
  return Status::ok();
}
}  // namespace

void add_runtime_bench(CLI::App& app) {
  auto* cmd = app.add_subcommand("runtime-bench", "Measure the runtime's scheduling overhead on the GPU");
  struct Opts {
    std::string json;
    int reps = 20;
    uint32_t wide = 1u << 20, chain = 20000;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--json", o->json, "Write results as JSON to this path");
  cmd->add_option("--reps", o->reps, "Timed repetitions (median reported)")->check(CLI::Range(3, 10000));
  cmd->add_option("--wide-tasks", o->wide, "Tasks in the wide graph")->check(CLI::Range(1000u, 100000000u));
  cmd->add_option("--chain-tasks", o->chain, "Tasks in the dependency chain")->check(CLI::Range(100u, 10000000u));
  cmd->callback([o] {
    if (!gpu_available()) throw Error(Status(StatusCode::kUnavailable, "runtime-bench needs a Hopper GPU (none visible)"));
    auto info = runtime::query_device(0);
    nlohmann::json j = run_metadata(command_line());
    j["bench"] = "runtime";
    nlohmann::json rows = nlohmann::json::array();
    auto row = [&](const std::string& name, const std::string& metric, double value, const std::string& unit,
                   const nlohmann::json& extra) {
      nlohmann::json r = extra;
      r["case"] = name;
      r["metric"] = metric;
      r["value"] = value;
      r["unit"] = unit;
      rows.push_back(r);
      std::printf("%-34s %-36s %10.4f %s\n", name.c_str(), metric.c_str(), value, unit.c_str());
    };
    std::printf("%-34s %-36s %10s\n", "case", "metric", "value");
    const uint32_t small = std::max<uint32_t>(info.sms * 8, 1024);
    for (int per_sm_cap : {1, 0}) {
      const int max_ctas = per_sm_cap ? info.sms : 0;
      const std::string tag = per_sm_cap ? "1 CTA/SM" : "full occupancy";
      std::fprintf(stderr, "[runtime-bench] wide graph, %u tasks, %s ...\n", o->wide, tag.c_str());
      Timing big, little;
      int grid = 0;
      throw_if_error(time_plan(wide_plan(o->wide), max_ctas, o->reps, &big, &grid));
      throw_if_error(time_plan(wide_plan(small), max_ctas, o->reps, &little, &grid));
      const double per_task = big.median_us / o->wide;
      const double marginal = (big.median_us - little.median_us) / double(o->wide - small);
      row("wide (" + tag + ")", "us per empty task (amortized)", per_task, "us",
          {{"tasks", o->wide}, {"grid", grid}, {"run_us", big.median_us}});
      row("wide (" + tag + ")", "us per empty task (marginal)", marginal, "us",
          {{"tasks", o->wide}, {"grid", grid}, {"small_tasks", small}, {"small_run_us", little.median_us}});
      std::fprintf(stderr, "[runtime-bench] chain, %u tasks, %s ...\n", o->chain, tag.c_str());
      Timing ch;
      throw_if_error(time_plan(chain_plan(o->chain), max_ctas, o->reps, &ch, &grid));
      row("chain (" + tag + ")", "us per dependency hop", ch.median_us / o->chain, "us",
          {{"tasks", o->chain}, {"grid", grid}, {"run_us", ch.median_us}});
    }
    double frac = 0;
    throw_if_error(chain_cross_sm_fraction(chain_plan(std::min<uint32_t>(o->chain, 20000)), &frac));
    row("chain (full occupancy, traced)", "fraction of hops crossing SMs", frac, "", nlohmann::json::object());
    std::fprintf(stderr, "[runtime-bench] launch-per-task baseline ...\n");
    double us = 0;
    throw_if_error(runtime::time_launch_per_task(std::min<uint32_t>(o->chain, 20000), o->reps, &us));
    row("baseline: launch per task", "us per launch (back to back)", us, "us", {{"launches", std::min<uint32_t>(o->chain, 20000)}});
    j["rows"] = rows;
    j["goals"] = {{"wide_us_per_task", 0.5}, {"chain_us_per_hop", 2.0}};
    if (!o->json.empty()) {
      throw_if_error(write_json(o->json, j));
      std::printf("wrote %s\n", o->json.c_str());
    }
  });
}

}  // namespace kosmos::cli
