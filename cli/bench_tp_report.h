// The timing keys both TP benchmarks (virtual ranks, and one process per GPU over NCCL) write into
// their JSON, from the same six measurements.
#pragma once

#include <algorithm>

#include <nlohmann/json.hpp>

namespace kosmos::cli {

struct TpTimes {
  double fused, unfused, a, b, comm, gemm;  // ms
};

// fused / unfused / baselines / comm-only / GEMM-only times, TFLOP/s of the fused op, speedups over
// (a) and (b), and the ideal overlap max(T_gemm, T_comm) with the fraction of it the fused op reaches.
inline void put_tp_times(nlohmann::json& j, const TpTimes& t, double flops) {
  const double ideal = std::max(t.comm, t.gemm);
  j["fused_ms"] = t.fused;
  j["fused_tflops"] = flops / (t.fused * 1e-3) / 1e12;
  j["unfused_ms"] = t.unfused;
  j["baseline_a_ms"] = t.a;
  j["baseline_b_ms"] = t.b;
  j["comm_only_ms"] = t.comm;
  j["gemm_only_ms"] = t.gemm;
  j["ideal_overlap_ms"] = ideal;
  j["speedup_vs_a"] = t.a / t.fused;
  j["speedup_vs_b"] = t.b / t.fused;
  j["fraction_of_ideal"] = ideal / t.fused;
}

}  // namespace kosmos::cli
