#pragma once
#include <vector>

#include "kosmos/runtime.h"

namespace kosmos::runtime {

struct SampleResult {
  std::string executor;
  uint32_t world = 0, chunks = 0, tasks = 0;
  uint64_t chunk_bytes = 0;
  double median_us = 0;  // per run
  int runs = 0;
  bool verified = false;
  std::vector<TraceRecord> trace;
};

// A small pipeline that exercises every built-in kind: per chunk copy (data movement) -> spin
// (stand-in compute) -> checksum; rank r copies chunks from rank (r+1) % world (a ring).
Status make_sample_plan(uint32_t world, uint32_t chunks, uint64_t chunk_bytes, uint64_t spin_ns, plan::Plan* out);

// Builds the sample pipeline, fills every rank's source with rank- and index-encoded words, runs
// it `runs` times on the chosen executor, and verifies the copies and checksums of the last run.
Status run_sample(const std::string& executor, uint32_t world, uint32_t chunks, uint64_t chunk_bytes, uint64_t spin_ns,
                  int runs, bool trace, SampleResult* out);

}  // namespace kosmos::runtime
