// `kosmos bench tp --transport nccl`: one process per GPU (RANK / WORLD_SIZE / LOCAL_RANK /
// KOSMOS_NCCL_ID_FILE), the fused TP op over the NCCL transport against NCCL + cuBLAS baselines.
// Implemented in cmd_bench_tp_nccl.cu; cmd_bench_tp.cu parses the options and dispatches here.
#pragma once

#include <string>

#include "kosmos/tp.h"

namespace kosmos::cli {

struct TpNcclBenchOptions {
  std::string model;  // name for the report (shapes are already in cfg)
  TpConfig cfg;       // op, m, n, k; world is taken from WORLD_SIZE
  int reps = 20;
  std::string json;   // written by rank 0 when not empty
};

// Throws kosmos::Error with a clear message on a bad launch environment, a failed verification
// (on every rank alike: the verdict is reduced across ranks first) or a CUDA / NCCL / cuBLAS error.
void run_bench_tp_nccl(const TpNcclBenchOptions& opts);

}  // namespace kosmos::cli
