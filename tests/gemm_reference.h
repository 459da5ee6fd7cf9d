// fp64 reference GEMM and helpers shared by the CPU and GPU GEMM tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/gemm/bf16.h"
#include "kosmos/gemm.h"

namespace kosmos::test {

using kernels::gemm::bf16_to_float;
using kernels::gemm::float_to_bf16;

inline std::vector<uint16_t> random_bf16(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = float_to_bf16(u(rng));
  return v;
}

// Group sizes for merged-tail tests of grouped GEMMs: last blocks of 1, 32 and 33 rows past a
// multiple of 128, an empty group, a lone short group, 300 and 256 rows, repeated `reps` times
// (reps = 8: 120 worst-case slots, so 128 x 256 tiles win the tile heuristic on 132 SMs at N = 512).
// Fills group_m and group_offset (back to back) and returns the total rows.
inline int64_t merged_tail_groups(int reps, std::vector<int>* group_m, std::vector<int>* group_offset) {
  int64_t rows = 0;
  for (int rep = 0; rep < reps; ++rep)
    for (int m : {129, 160, 161, 0, 7, 300, 256}) {
      group_offset->push_back(int(rows));
      group_m->push_back(m);
      rows += m;
    }
  return rows;
}

// Reference for GemmArguments over host copies of A, B, C_in (C_in used with kEpilogueAccumulate).
inline std::vector<double> reference_gemm(const GemmArguments& g, const std::vector<uint16_t>& a,
                                          const std::vector<uint16_t>& b, const std::vector<uint16_t>& c_in,
                                          const std::vector<float>& row_scale, int64_t n_out) {
  std::vector<double> out(size_t(g.m) * n_out, 0.0);
  std::vector<double> acc(size_t(g.n));
  for (int64_t i = 0; i < g.m; ++i) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t kk = 0; kk < g.k; ++kk) {
      const double av = bf16_to_float(g.a_col_major ? a[kk * g.lda + i] : a[i * g.lda + kk]);
      for (int64_t j = 0; j < g.n; ++j) acc[j] += av * bf16_to_float(g.b_transposed ? b[j * g.ldb + kk] : b[kk * g.ldb + j]);
    }
    for (int64_t j = 0; j < n_out; ++j) {
      double v;
      if (g.epilogue & kEpilogueSwiGLU) {
        const int64_t gate = 16 * (j / 8) + j % 8, up = gate + 8;
        const double x = acc[gate];
        v = x / (1.0 + std::exp(-x)) * acc[up];
      } else {
        v = acc[j];
      }
      if (g.epilogue & kEpilogueRowScale) v *= row_scale[i];
      if (g.epilogue & kEpilogueAccumulate) v += bf16_to_float(c_in[i * g.ldc + j]);
      out[i * n_out + j] = v;
    }
  }
  return out;
}

// ||out - ref|| / ||ref|| over the m x n_out block; NaN anywhere returns +inf.
inline double relative_error(const std::vector<uint16_t>& c, int64_t ldc, const std::vector<double>& ref, int64_t m,
                             int64_t n_out) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n_out; ++j) {
      const double x = bf16_to_float(c[i * ldc + j]), y = ref[i * n_out + j];
      if (!std::isfinite(x)) return INFINITY;
      num += (x - y) * (x - y);
      den += y * y;
    }
  return std::sqrt(num / std::max(den, 1e-30));
}

}  // namespace kosmos::test
