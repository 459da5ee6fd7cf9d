// Shared by the CPU and GPU TP tests: fill inputs, fp64 reference of every op, comparisons.
#pragma once

#include <cuda_runtime_api.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "graph_replay.h"

#include "gemm_reference.h"
#include "kosmos/tp.h"

namespace kosmos::test {

struct TpHost {  // host copies of every rank's buffers
  explicit TpHost(const TpConfig& c) : cfg(c) {}
  TpConfig cfg;
  std::vector<std::vector<uint16_t>> buf[size_t(TpBuffer::kCount)];
  std::vector<uint16_t>& at(TpBuffer b, int r) { return buf[size_t(b)][r]; }
};

inline void copy_buffer(TpLayer& L, const TpConfig& c, TpBuffer b, int r, void* dst, const void* src, size_t bytes,
                        bool to_layer) {
  (void)L;
  if (c.cpu) std::memcpy(dst, src, bytes);
  else cudaMemcpy(dst, src, bytes, to_layer ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost);
  (void)b;
  (void)r;
}

// Random inputs into the layer (and h); outputs poisoned (NaN). only_rank >= 0: a distributed
// layer, where this process writes only its own rank's memory (all ranks' data is still made on
// the host, from the same seeds, for the reference).
inline void fill_inputs(TpLayer& L, TpHost& h, uint64_t seed, int only_rank = -1) {
  const TpConfig& c = h.cfg;
  for (uint32_t bi = 0; bi < uint32_t(TpBuffer::kCount); ++bi) {
    const TpBuffer b = TpBuffer(bi);
    const TpBufferShape s = tp_buffer_shape(c, b);
    h.buf[bi].assign(c.world, {});
    if (!s.exists) continue;
    const bool input = b == TpBuffer::kX || b == TpBuffer::kW || b == TpBuffer::kDY;
    for (int r = 0; r < c.world; ++r) {
      const size_t n = size_t(s.rows) * s.cols;
      h.buf[bi][r] = input ? random_bf16(n, seed + 97 * bi + r, b == TpBuffer::kW ? 0.5f : 1.0f) : std::vector<uint16_t>(n, 0x7FC1);
      if (only_rank < 0 || r == only_rank) copy_buffer(L, c, b, r, L.buffer(b, r), h.buf[bi][r].data(), n * 2, true);
    }
  }
}

inline void read_outputs(TpLayer& L, TpHost& h, int only_rank = -1) {
  const TpConfig& c = h.cfg;
  for (uint32_t bi = 0; bi < uint32_t(TpBuffer::kCount); ++bi) {
    const TpBufferShape s = tp_buffer_shape(c, TpBuffer(bi));
    if (!s.exists) continue;
    for (int r = 0; r < c.world; ++r)
      if (only_rank < 0 || r == only_rank)
        copy_buffer(L, c, TpBuffer(bi), r, h.buf[bi][r].data(), L.buffer(TpBuffer(bi), r), h.buf[bi][r].size() * 2, false);
  }
}

// fp64 product of row-major bf16 matrices, optional transposes: C[m,n] = op(A) op(B).
inline std::vector<double> matmul(const std::vector<uint16_t>& A, bool at, int64_t a_rows, int64_t a_cols,
                                  const std::vector<uint16_t>& B, bool bt, int64_t b_rows, int64_t b_cols) {
  const int64_t m = at ? a_cols : a_rows, k = at ? a_rows : a_cols, n = bt ? b_rows : b_cols;
  std::vector<double> C(size_t(m) * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t kk = 0; kk < k; ++kk) {
      const double a = bf16_to_float(at ? A[kk * a_cols + i] : A[i * a_cols + kk]);
      if (a == 0) continue;
      for (int64_t j = 0; j < n; ++j) C[i * n + j] += a * bf16_to_float(bt ? B[j * b_cols + kk] : B[kk * b_cols + j]);
    }
  return C;
}

inline double rel_err(const std::vector<uint16_t>& out, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double x = bf16_to_float(out[i]);
    if (!std::isfinite(x)) return INFINITY;
    num += (x - ref[i]) * (x - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

inline std::vector<uint16_t> concat_rows(const std::vector<std::vector<uint16_t>>& parts) {
  std::vector<uint16_t> all;
  for (auto& p : parts) all.insert(all.end(), p.begin(), p.end());
  return all;
}

// Checks every output of the op against fp64; returns "" or a description of the worst failure.
inline std::string check_tp(TpHost& h, double tol = 1e-2, int only_rank = -1) {
  const TpConfig& c = h.cfg;
  const int W = c.world;
  const int64_t M = c.m, N = c.n, K = c.k, R = M / W;
  std::string err;
  auto expect = [&](const std::string& what, const std::vector<uint16_t>& out, const std::vector<double>& ref) {
    if (only_rank >= 0 && what.find("rank " + std::to_string(only_rank)) == std::string::npos) return;
    const double e = rel_err(out, ref);
    if (!(e < tol) && err.empty()) err = what + ": relative error " + std::to_string(e);
  };
  auto rows = [](const std::vector<double>& full, int64_t r0, int64_t n, int64_t cols) {
    return std::vector<double>(full.begin() + r0 * cols, full.begin() + (r0 + n) * cols);
  };
  auto sum = [&](std::function<std::vector<double>(int)> f) {
    std::vector<double> acc;
    for (int s = 0; s < W; ++s) {
      auto p = f(s);
      if (acc.empty()) acc.assign(p.size(), 0.0);
      for (size_t i = 0; i < p.size(); ++i) acc[i] += p[i];
    }
    return acc;
  };
  switch (c.op) {
    case TpOp::kAgGemm: {
      auto X = concat_rows(h.buf[size_t(TpBuffer::kX)]);
      for (int r = 0; r < W; ++r) {
        expect("Y rank " + std::to_string(r), h.at(TpBuffer::kY, r), matmul(X, false, M, K, h.at(TpBuffer::kW, r), false, K, N / W));
        if (W > 1 && (only_rank < 0 || r == only_rank) && h.at(TpBuffer::kGathered, r) != X && err.empty()) err = "gathered X of rank " + std::to_string(r) + " differs from the concatenation";
      }
      break;
    }
    case TpOp::kGemmRs:
    case TpOp::kGemmAr: {
      auto full = sum([&](int s) { return matmul(h.at(TpBuffer::kX, s), false, M, K / W, h.at(TpBuffer::kW, s), false, K / W, N); });
      for (int r = 0; r < W; ++r)
        expect("Y rank " + std::to_string(r), h.at(TpBuffer::kY, r), c.op == TpOp::kGemmRs ? rows(full, r * R, R, N) : full);
      break;
    }
    case TpOp::kColParallelBwd: {
      auto X = concat_rows(h.buf[size_t(TpBuffer::kX)]);
      auto dx = sum([&](int s) { return matmul(h.at(TpBuffer::kDY, s), false, M, N / W, h.at(TpBuffer::kW, s), true, K, N / W); });
      for (int r = 0; r < W; ++r) {
        expect("dX rank " + std::to_string(r), h.at(TpBuffer::kDX, r), rows(dx, r * R, R, K));
        expect("dW rank " + std::to_string(r), h.at(TpBuffer::kDW, r), matmul(X, true, M, K, h.at(TpBuffer::kDY, r), false, M, N / W));
      }
      break;
    }
    case TpOp::kRowParallelBwd: {
      auto dY = concat_rows(h.buf[size_t(TpBuffer::kDY)]);
      for (int r = 0; r < W; ++r) {
        expect("dX rank " + std::to_string(r), h.at(TpBuffer::kDX, r), matmul(dY, false, M, N, h.at(TpBuffer::kW, r), true, K / W, N));
        expect("dW rank " + std::to_string(r), h.at(TpBuffer::kDW, r), matmul(h.at(TpBuffer::kX, r), true, M, K / W, dY, false, M, N));
        if (W > 1 && (only_rank < 0 || r == only_rank) && h.at(TpBuffer::kGathered, r) != dY && err.empty()) err = "gathered dY of rank " + std::to_string(r) + " differs";
      }
      break;
    }
  }
  return err;
}

// Output buffers of an op (for fused == unfused comparisons).
inline std::vector<TpBuffer> tp_outputs(TpOp op) {
  switch (op) {
    case TpOp::kAgGemm: return {TpBuffer::kY, TpBuffer::kGathered};
    case TpOp::kGemmRs:
    case TpOp::kGemmAr: return {TpBuffer::kY};
    case TpOp::kColParallelBwd:
    case TpOp::kRowParallelBwd: return {TpBuffer::kDX, TpBuffer::kDW};
  }
  return {};
}

// Plans the op fused and unfused with the same inputs, runs the fused one twice (or captures it in
// a CUDA graph and replays it `graph_replays` times), checks it against fp64 and the unfused
// composition bit for bit.
inline void run_and_check_tp(TpConfig c, uint64_t seed, int graph_replays = 0) {
  std::unique_ptr<TpLayer> fused, unfused;
  Status s = TpLayer::plan(c, &fused);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  TpConfig cu = c;
  cu.fused = false;
  ASSERT_TRUE(TpLayer::plan(cu, &unfused).is_ok());
  TpHost hf{c}, hu{cu};
  fill_inputs(*fused, hf, seed);
  fill_inputs(*unfused, hu, seed);
  cudaStream_t st = nullptr;
  if (!c.cpu) cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
  run_graph_or_twice(st, graph_replays, [&] { return fused->run(st); });
  if (::testing::Test::HasFatalFailure()) return;
  s = fused->finish(st);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  ASSERT_TRUE(unfused->run(st).is_ok());
  ASSERT_TRUE(unfused->finish(st).is_ok());
  if (st) cudaStreamDestroy(st);
  read_outputs(*fused, hf);
  read_outputs(*unfused, hu);
  EXPECT_EQ(check_tp(hf), "") << to_string(c.op) << " W=" << c.world << " M=" << c.m << " " << fused->describe();
  for (TpBuffer b : tp_outputs(c.op)) {
    if (!tp_buffer_shape(c, b).exists) continue;
    for (int r = 0; r < c.world; ++r)
      EXPECT_TRUE(hf.at(b, r) == hu.at(b, r)) << to_string(c.op) << " W=" << c.world << ": fused " << to_string(b) << " rank "
                                               << r << " differs from the unfused composition";
  }
}

inline TpConfig tp_config(TpOp op, int W, int64_t M, int64_t N, int64_t K, bool cpu) {
  TpConfig c;
  c.op = op;
  c.world = W;
  c.m = M;
  c.n = N;
  c.k = K;
  c.cpu = cpu;
  c.watchdog_seconds = 60;
  return c;
}

}  // namespace kosmos::test
