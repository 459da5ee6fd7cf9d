// `kosmos bench moe --transport nccl`: one process per GPU (RANK / WORLD_SIZE / LOCAL_RANK /
// KOSMOS_NCCL_ID_FILE), the fused MoE layer (MoeLayer::plan_distributed over the NCCL transport)
// against our own unfused composition and, forward, the unfused pipeline from standard pieces with
// NCCL's all-to-all (moe_cublas_pipeline.h). Implemented in cmd_bench_moe_nccl.cu; cmd_bench_moe.cu
// parses the options and dispatches here.
#pragma once

#include <string>

#include "kosmos/moe.h"

namespace kosmos::cli {

struct MoeNcclBenchOptions {
  std::string model;    // name for the report (shapes are already in cfg)
  std::string routing;  // "uniform" | "skewed" (moe_bench_common.h)
  MoeConfig cfg;        // world = WORLD_SIZE; backward / save_activations select the direction
  int reps = 20;
  std::string json;  // written by rank 0 when not empty
  bool skip_cublas = false;
  std::string trace_svg;  // not empty: the runs record traces (timed ones too); each rank writes one more run's SVG
};

// Expects the launch environment checked (check_nccl_launch_env) and opts.cfg.world = WORLD_SIZE.
// Throws kosmos::Error with a clear message on a bad launch environment, a failed verification (on
// every rank alike: the verdict is reduced across ranks first) or a CUDA / NCCL / cuBLAS error.
void run_bench_moe_nccl(const MoeNcclBenchOptions& opts);

}  // namespace kosmos::cli
