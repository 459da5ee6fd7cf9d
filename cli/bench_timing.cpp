#include "bench_timing.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <vector>

#include "kosmos/cuda_check.h"

namespace kosmos::cli {

std::vector<double> medians_of(std::vector<std::vector<double>> samples) {
  std::vector<double> out;
  for (auto& v : samples) {
    std::sort(v.begin(), v.end());
    out.push_back(v[v.size() / 2]);
  }
  return out;
}

Status time_median_interleaved_ms(cudaStream_t stream, int reps, const std::vector<std::function<Status(int)>>& fns,
                                  std::vector<double>* medians) {
  KOSMOS_CHECK(reps > 0 && !fns.empty(), "bench timing: needs reps > 0 and at least one function");
  const size_t n = fns.size();
  cudaEvent_t a, b;
  KOSMOS_CUDA_CHECK(cudaEventCreate(&a));
  KOSMOS_CUDA_CHECK(cudaEventCreate(&b));
  Status st;
  std::vector<std::vector<double>> v(n);
  for (int i = 0; i < 3 && st.is_ok(); ++i)
    for (size_t j = 0; j < n && st.is_ok(); ++j) st = fns[j](i);
  for (int i = 0; i < reps && st.is_ok(); ++i) {
    for (size_t jj = 0; jj < n && st.is_ok(); ++jj) {
      const size_t j = (size_t(i) + jj) % n;
      float ms = 0;
      if (cudaEventRecord(a, stream) != cudaSuccess || !(st = fns[j](i)).is_ok() ||
          cudaEventRecord(b, stream) != cudaSuccess || cudaEventSynchronize(b) != cudaSuccess ||
          cudaEventElapsedTime(&ms, a, b) != cudaSuccess) {
        if (st.is_ok()) st = Status(StatusCode::kCudaError, "bench timing: CUDA event timing failed");
        break;
      }
      v[j].push_back(ms);
    }
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  KOSMOS_RETURN_IF_ERROR(st);
  *medians = medians_of(std::move(v));
  return Status::ok();
}

Status time_median_ms(cudaStream_t stream, int reps, const std::function<Status()>& fn, double* median_ms) {
  std::vector<double> med;
  KOSMOS_RETURN_IF_ERROR(time_median_interleaved_ms(stream, reps, {[&](int) { return fn(); }}, &med));
  *median_ms = med[0];
  return Status::ok();
}

std::string trace_breakdown(const std::vector<runtime::TraceRecord>& records, const std::vector<std::string>& labels,
                            int lanes, const std::map<std::string, double>* useful_flops) {
  struct Acc {
    std::vector<double> us;
    double cycles = 0, timed_ns = 0;  // over the records with cycles (the GPU's): the clock
    double gap_us = 0;  // idle time of the task's CTA between its previous task's end and this start
    size_t gaps = 0;
    uint64_t first = UINT64_MAX, last = 0;
  };
  std::map<std::string, Acc> by;
  struct Run {  // one record on its CTA's timeline, and its label's accumulator
    const runtime::TraceRecord* r;
    Acc* acc;
  };
  std::map<uint32_t, std::vector<Run>> by_cta;
  uint64_t t0 = UINT64_MAX, t1 = 0;
  double busy = 0, gap_total = 0;
  bool clocked = false;  // some record has cycles: print the SM clock per label
  for (const auto& r : records) {
    if (r.end_ns == 0) continue;
    Acc& a = by[r.task_id < labels.size() ? labels[r.task_id] : std::string("?")];
    a.us.push_back((r.end_ns - r.start_ns) * 1e-3);
    if (r.cycles != 0) {
      a.cycles += double(r.cycles);
      a.timed_ns += double(r.end_ns - r.start_ns);
      clocked = true;
    }
    a.first = std::min(a.first, r.start_ns);
    a.last = std::max(a.last, r.end_ns);
    t0 = std::min(t0, r.start_ns);
    t1 = std::max(t1, r.end_ns);
    busy += (r.end_ns - r.start_ns) * 1e-3;
    by_cta[r.cta].push_back({&r, &a});  // std::map: the accumulator's address stays valid
  }
  if (by.empty()) return "  (no trace records)\n";
  // The gap before a task: from the end of its CTA's previous task to its start -- the claim, the
  // task's waits and the runtime's release of the previous one (a task claimed ahead and ready
  // starts with next to none). A CTA's first task has no gap.
  for (auto& [cta, v] : by_cta) {
    std::sort(v.begin(), v.end(), [](const Run& x, const Run& y) { return x.r->start_ns < y.r->start_ns; });
    for (size_t i = 1; i < v.size(); ++i) {
      const uint64_t start = v[i].r->start_ns, prev_end = v[i - 1].r->end_ns;
      const double g = start > prev_end ? (start - prev_end) * 1e-3 : 0.0;
      v[i].acc->gap_us += g;
      v[i].acc->gaps += 1;
      gap_total += g;
    }
  }
  const double span = (t1 - t0) * 1e-3;
  const double lane_us = std::max(1, lanes) * span;
  char line[256];
  std::string out;
  std::snprintf(line, sizeof line, "  trace: span %.1f us, tasks busy %.1f%% of %d SMs over it, gaps between a CTA's tasks %.1f%%\n",
                span, 100.0 * busy / lane_us, lanes, 100.0 * gap_total / lane_us);
  out += line;
  const bool tensor = clocked && useful_flops != nullptr && !useful_flops->empty();
  std::snprintf(line, sizeof line, "  %-26s %7s %11s %9s %9s %11s %11s %9s %9s%s%s\n", "tasks", "count", "SM-busy ms",
                "mean us", "median us", "first us", "last us", "gap ms", "gap us", clocked ? "  SM MHz" : "",
                tensor ? "  tensor %" : "");
  out += line;
  for (auto& [name, a] : by) {
    std::sort(a.us.begin(), a.us.end());
    double sum = 0;
    for (double v : a.us) sum += v;
    std::snprintf(line, sizeof line, "  %-26s %7zu %11.3f %9.2f %9.2f %11.1f %11.1f %9.3f %9.2f", name.c_str(), a.us.size(),
                  sum * 1e-3, sum / a.us.size(), a.us[a.us.size() / 2], (a.first - t0) * 1e-3, (a.last - t0) * 1e-3,
                  a.gap_us * 1e-3, a.gaps ? a.gap_us / a.gaps : 0.0);
    out += line;
    if (clocked) {  // cycles per microsecond of the label's tasks = their SM clock in MHz
      std::snprintf(line, sizeof line, "  %6.0f", a.timed_ns > 0 ? a.cycles / a.timed_ns * 1e3 : 0.0);
      out += line;
    }
    if (tensor) {  // the label's useful FLOPs per cycle of its tasks, against the peak per SM and clock
      const auto f = useful_flops->find(name);
      if (f != useful_flops->end() && a.cycles > 0) {
        std::snprintf(line, sizeof line, "  %9.1f", 100.0 * f->second / (a.cycles * kTensorFlopsPerClock));
        out += line;
      }
    }
    out += "\n";
  }
  return out;
}

std::string trace_csv(const std::vector<runtime::TraceRecord>& records, const std::vector<std::string>& labels, int launch,
                      bool header) {
  uint64_t t0 = UINT64_MAX;
  for (const auto& r : records)
    if (r.end_ns != 0) t0 = std::min(t0, r.start_ns);
  std::string out = header ? "launch,label,task,sm,cta,start_ns,end_ns,cycles\n" : "";
  char line[160];
  for (const auto& r : records) {
    if (r.end_ns == 0) continue;
    std::snprintf(line, sizeof line, "%d,%s,%u,%u,%u,%llu,%llu,%llu\n", launch,
                  r.task_id < labels.size() ? labels[r.task_id].c_str() : "?", r.task_id, r.sm, r.cta,
                  (unsigned long long)(r.start_ns - t0), (unsigned long long)(r.end_ns - t0), (unsigned long long)r.cycles);
    out += line;
  }
  return out;
}

}  // namespace kosmos::cli
