// Timing shared by the benchmarks: CUDA events around each repetition on `stream`, 3 warm-up
// calls, median of `reps`.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kosmos/runtime_types.h"
#include "kosmos/status.h"

namespace kosmos::cli {

Status time_median_ms(cudaStream_t stream, int reps, const std::function<Status()>& fn, double* median_ms);

// The median of each variant's samples (every samples[j] non-empty; the upper median of an even count).
std::vector<double> medians_of(std::vector<std::vector<double>> samples);

// Times several functions alternately, median of `reps` each: repetition i runs every function once
// (starting with function i % n), each between its own events and synchronised, so that the card's
// drifting clocks and temperature reach all of them alike. Timing one after the other gave the second
// a hotter card: on the H200 cuBLAS's 24576x4096x7168 NT ran 1.81 ms alone under ncu (free clocks)
// and 2.10 ms when timed after 30 runs of ours. fns[j](rep) gets the repetition index (warm-up: 0..2).
Status time_median_interleaved_ms(cudaStream_t stream, int reps, const std::vector<std::function<Status(int)>>& fns,
                                  std::vector<double>* medians);

// Makes `waiter` wait for the work enqueued on `source` so far (through `ev`); nothing when they are
// the same stream. The two-stream baselines fork and join with it.
inline Status stream_wait(cudaStream_t waiter, cudaStream_t source, cudaEvent_t ev) {
  if (waiter == source) return Status::ok();
  if (cudaEventRecord(ev, source) != cudaSuccess || cudaStreamWaitEvent(waiter, ev) != cudaSuccess)
    return Status(StatusCode::kCudaError, "stream_wait: cudaEventRecord / cudaStreamWaitEvent failed");
  return Status::ok();
}

// Where the time of one traced fused run went, by task label (labels[task_id]; e.g.
// MoeLayer::task_labels): tasks, SM-busy time, mean / median task, and the window from the first
// start to the last end of that label, and the gaps before its tasks (SM-ms and mean us: on the
// task's CTA, from the previous task's end to this start -- claim, waits, release). The header line
// gives the run's span, the busy fraction of `lanes` SMs over it and the gaps' fraction. When the
// records carry clock cycles (the GPU executor's), a last column gives each label's SM clock: its
// tasks' cycles over their nanoseconds, in MHz. With `useful_flops` (label -> the FLOPs its tasks
// compute, without padding) and cycles, one more column gives those FLOPs over the label's cycles
// as a share of Hopper's dense bf16 tensor peak per SM and clock (kTensorFlopsPerClock): the tensor
// pipe's use at whatever clock the card held (docs/design/moe.md, "Where the time goes"). Records
// that did not run (end_ns == 0) are skipped.
inline constexpr double kTensorFlopsPerClock = 4096.0;  // H100 / H200: 989 TFLOP/s = 132 SMs x 1.83 GHz x 4096
std::string trace_breakdown(const std::vector<runtime::TraceRecord>& records, const std::vector<std::string>& labels,
                            int lanes, const std::map<std::string, double>* useful_flops = nullptr);

// The records of one traced launch as CSV rows for offline study (scripts/trace_windows.py):
// launch,label,task,sm,cta,start_ns,end_ns,cycles -- `launch` is the caller's number for the launch
// (trace_moe_run's are in its comment), start and end relative to the launch's first start. With
// header = true the column line comes first. Records that did not run are skipped.
std::string trace_csv(const std::vector<runtime::TraceRecord>& records, const std::vector<std::string>& labels, int launch,
                      bool header);

}  // namespace kosmos::cli
