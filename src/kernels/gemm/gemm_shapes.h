// The GEMM shapes of issue 3 (M x N x K) and the "MxNxK[,MxNxK...]" lists the benchmarks accept in
// their place (`kosmos bench gemm --shapes`, `gemm_engine_bench --shapes`).
#pragma once

#include <array>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace kosmos::kernels::gemm {

using GemmShape = std::array<int64_t, 3>;  // M, N, K

inline constexpr std::array<GemmShape, 8> kIssueGemmShapes = {{{8192, 8192, 8192},
                                                               {8192, 3584, 8192},
                                                               {8192, 8192, 3584},
                                                               {8192, 1536, 8192},
                                                               {2048, 3584, 8192},
                                                               {16384, 7168, 2048},
                                                               {4096, 4096, 1536},
                                                               {128, 7168, 2048}}};

// Parses "MxNxK[,MxNxK...]" (positive sizes) into `out`; on a bad item returns false with the item
// in `bad`.
inline bool parse_gemm_shapes(const std::string& list, std::vector<GemmShape>* out, std::string* bad) {
  out->clear();
  for (size_t at = 0; at <= list.size();) {
    size_t end = list.find(',', at);
    if (end == std::string::npos) end = list.size();
    const std::string item = list.substr(at, end - at);
    long long m = 0, n = 0, k = 0;
    char tail = 0;
    if (std::sscanf(item.c_str(), "%lldx%lldx%lld%c", &m, &n, &k, &tail) != 3 || m <= 0 || n <= 0 || k <= 0) {
      *bad = item;
      return false;
    }
    out->push_back({m, n, k});
    at = end + 1;
  }
  return true;
}

}  // namespace kosmos::kernels::gemm
