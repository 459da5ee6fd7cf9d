// Runs an op's fused launch the way the GPU tests exercise it: `replays` > 0 captures one run on
// `st` into a CUDA graph and launches the graph that many times; otherwise runs it twice eagerly
// (epochs advance between runs, nothing is reset). Shared by the TP and MoE GPU tests.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <functional>

#include "kosmos/status.h"

namespace kosmos::test {

inline void run_graph_or_twice(cudaStream_t st, int replays, const std::function<Status()>& run) {
  if (replays <= 0) {
    for (int i = 0; i < 2; ++i) ASSERT_TRUE(run().is_ok());
    return;
  }
  cudaGraph_t g;
  cudaGraphExec_t ge;
  ASSERT_EQ(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_TRUE(run().is_ok());
  ASSERT_EQ(cudaStreamEndCapture(st, &g), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&ge, g, 0), cudaSuccess);
  for (int i = 0; i < replays; ++i) ASSERT_EQ(cudaGraphLaunch(ge, st), cudaSuccess);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
}

}  // namespace kosmos::test
