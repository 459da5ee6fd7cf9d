// kosmos bench tp --transport nccl: the fused TP/SP op with one process per GPU over the NCCL
// transport (TpLayer::plan_distributed + transport::make_tp_distributed), against, on the same
// inputs and the same communicator:
//   (a) the NCCL collective(s) and cuBLAS in sequence on one stream:
//         ag_gemm   ncclAllGather(X) ; Y = AG(X)·W_r
//         gemm_rs   P = X_r·W_r ; ncclReduceScatter(P)
//         gemm_ar   P = X_r·W_r ; ncclAllReduce(P)
//         ag_gemm --backward (column-parallel)  P = dY_r·W_rᵀ ; ncclReduceScatter(P) ; ncclAllGather(X) ; dW = AG(X)ᵀ·dY_r
//         gemm_rs --backward (row-parallel)     ncclAllGather(dY) ; dX = AG(dY)·W_rᵀ ; dW = X_rᵀ·AG(dY)
//   (b) the classic chunked overlap: the collective split into W chunks on a communication stream,
//       the per-chunk GEMMs on a compute stream, ordered by events:
//         gathers:    step k = 1..W-1 receives rank (r+k)%W's shard (ncclSend/ncclRecv pairs in a
//                     group; rank r's own chunk is computed first, from its input), the GEMM of a
//                     chunk waits for that chunk only
//         reductions: owner o = 0..W-1: GEMM of the o-th row block, then ncclReduce to root o
//                     (gemm_rs / column-parallel dX) or ncclAllReduce of the block (gemm_ar);
//                     the column-parallel backward gathers X on the comm stream first, and its
//                     dW GEMM runs once the gather is done
//   (u) our own unfused composition (the same tasks as two launches),
// and the ideal overlap max(T_gemm, T_comm) from (a)'s parts timed alone. W = 1 (a one-rank
// communicator): (a) and (b) are the plain GEMM(s); the fused op takes the plain path too.
//
// Inputs are index- and rank-encoded: element i of rank r's buffer b is a hash of (b, r, i) mapped
// to an integer in [-128, 127] times a power of two, exact in bf16; the host recomputes any element
// of any rank's inputs, so sampled outputs are checked against an fp64 reference without moving data.
// Verification (every rank, verdict reduced across ranks so that all ranks stop together): fused ==
// unfused bit for bit; the gathered buffer (ops that gather) == NCCL's AllGather bit for bit; fused
// vs (a) relative L2 error < 2e-2; sampled rows x sampled columns vs fp64 < 1e-2.
//
// Timing: bench_nccl.h's gated, barriered repetitions (3 warm-ups, median of --reps per rank, the
// variants alternating), reported as the max over ranks (ncclAllReduce(max)).
// The fused variant's own epoch barrier (TpLayer::run, an NCCL all-reduce before each launch) is
// inside the timed region: it is part of what a distributed run costs today.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_nccl.h"
#include "bench_timing.h"
#include "bench_tp_report.h"
#include "bench_tp_nccl.h"
#include "common.h"
#include "kosmos/cuda_check.h"
#include "kosmos/tp.h"
#include "kosmos/transport.h"

namespace kosmos::cli {

namespace {

using bf16_t = uint16_t;  // raw bf16 bits; cuBLAS / NCCL get the type from their enums

// ---------------------------------------------------------------------------------------------
// Index- and rank-encoded inputs.

__host__ __device__ inline uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

constexpr uint64_t kSeed = 0x6b6f736d6f735450ull;  // "kosmosTP"

// Exact in bf16: an integer of at most 7 significant bits times a power of two.
__host__ __device__ inline bf16_t enc_bf16(uint32_t buf, uint32_t rank, uint64_t idx, int shift) {
  const uint64_t z = splitmix64(kSeed ^ (uint64_t(buf) << 56) ^ (uint64_t(rank) << 48) ^ idx);
  const int v = int(int8_t(uint8_t(z >> 56)));
  const float f = float(v) / float(1u << shift);
  uint32_t bits;
#ifdef __CUDA_ARCH__
  bits = __float_as_uint(f);
#else
  std::memcpy(&bits, &f, 4);
#endif
  return bf16_t(bits >> 16);
}

inline double bf16_to_double(bf16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

int input_shift(TpBuffer b) { return b == TpBuffer::kW ? 11 : 7; }  // X, dY in [-1, 1); W in [-1/16, 1/16)

__global__ void fill_encoded(bf16_t* p, uint64_t n, uint32_t buf, uint32_t rank, int shift) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n; i += uint64_t(gridDim.x) * blockDim.x)
    p[i] = enc_bf16(buf, rank, i, shift);
}

// ---------------------------------------------------------------------------------------------
// The baselines' state: plain (cudaMalloc) copies of this rank's inputs and the baselines' own
// scratch and outputs, so that NCCL and cuBLAS never touch the fused layer's symmetric memory.

struct DevBuf {
  void* p = nullptr;
  size_t bytes = 0;
  Status alloc(size_t b) {
    bytes = b;
    if (b) KOSMOS_CUDA_CHECK(cudaMalloc(&p, b));
    return Status::ok();
  }
  ~DevBuf() {
    if (p) cudaFree(p);
  }
  bf16_t* h() const { return static_cast<bf16_t*>(p); }
};

struct Net : NcclRank {
  TpConfig cfg;
  cublasHandle_t h = nullptr;
  cudaStream_t s1 = nullptr;
  std::vector<cudaEvent_t> ev;  // 0..63 chunk events, 64 fork, 65 join, 66 gather done
  DevBuf buf[size_t(TpBuffer::kCount)];  // baseline inputs (X, W, DY), scratch (Gathered, Partial), outputs (Y, DX, DW)
  bf16_t* B(TpBuffer b) { return buf[size_t(b)].h(); }
  ~Net() {
    for (auto e : ev) cudaEventDestroy(e);
    if (h) cublasDestroy(h);
    if (s0) cudaStreamDestroy(s0);
    if (s1) cudaStreamDestroy(s1);
  }
};

// Row-major C[m, n] = op(A) op(B); a_col: A stored [k, m]; b_t: B stored [n, k].
Status rm_gemm(Net& c, cudaStream_t s, const void* A, bool a_col, int64_t lda, const void* Bm, bool b_t, int64_t ldb, void* C,
               int64_t ldc, int64_t m, int64_t n, int64_t k) {
  const float one = 1.0f, zero = 0.0f;
  cublasStatus_t st = cublasSetStream(c.h, s);
  KOSMOS_CHECK_CODE(st == CUBLAS_STATUS_SUCCESS, StatusCode::kInternal, "cublasSetStream failed: ", int(st));
  st = cublasGemmEx(c.h, b_t ? CUBLAS_OP_T : CUBLAS_OP_N, a_col ? CUBLAS_OP_T : CUBLAS_OP_N, int(n), int(m), int(k), &one, Bm,
                    CUDA_R_16BF, int(ldb), A, CUDA_R_16BF, int(lda), &zero, C, CUDA_R_16BF, int(ldc), CUBLAS_COMPUTE_32F,
                    CUBLAS_GEMM_DEFAULT);
  KOSMOS_CHECK_CODE(st == CUBLAS_STATUS_SUCCESS, StatusCode::kInternal, "cublasGemmEx failed: ", int(st));
  return Status::ok();
}

// part: 0 everything, 1 communication only, 2 GEMMs only.
Status baseline(Net& c, bool overlapped, int part) {
  const TpConfig& g = c.cfg;
  const int W = c.W, r = c.rank;
  const int64_t M = g.m, N = g.n, K = g.k, R = M / W;
  const bool comm = part != 2, gemm = part != 1;
  const ncclDataType_t bf = ncclBfloat16;
  cudaStream_t s0 = c.s0, s1 = overlapped ? c.s1 : c.s0;
  auto fork = [&] { return stream_wait(s1, s0, c.ev[64]); };  // s1 starts after s0's prior work
  auto join = [&] { return stream_wait(s0, s1, c.ev[65]); };  // s0 continues after s1's work
  using TB = TpBuffer;
  if (W == 1) {  // the plain path: the GEMM(s) on the inputs, no communication
    if (!gemm) return Status::ok();
    switch (g.op) {
      case TpOp::kAgGemm:
      case TpOp::kGemmRs:
      case TpOp::kGemmAr:
        return rm_gemm(c, s0, c.B(TB::kX), false, K, c.B(TB::kW), false, N, c.B(TB::kY), N, M, N, K);
      default:
        KOSMOS_RETURN_IF_ERROR(rm_gemm(c, s0, c.B(TB::kDY), false, N, c.B(TB::kW), true, N, c.B(TB::kDX), K, M, K, N));
        return rm_gemm(c, s0, c.B(TB::kX), true, K, c.B(TB::kDY), false, N, c.B(TB::kDW), N, K, N, M);
    }
  }
  KOSMOS_RETURN_IF_ERROR(fork());
  switch (g.op) {
    case TpOp::kAgGemm:
    case TpOp::kRowParallelBwd: {
      const bool fwd = g.op == TpOp::kAgGemm;
      bf16_t* src = c.B(fwd ? TB::kX : TB::kDY);
      bf16_t* G = c.B(TB::kGathered);
      const int64_t cols = fwd ? K : N;
      // One chunk's GEMM: rows ch*R.. of the output from `a` (R rows of the gathered input).
      auto chunk_gemm = [&](const bf16_t* a, int ch) -> Status {
        if (fwd) return rm_gemm(c, s0, a, false, K, c.B(TB::kW), false, N / W, c.B(TB::kY) + ch * R * (N / W), N / W, R, N / W, K);
        return rm_gemm(c, s0, a, false, N, c.B(TB::kW), true, N, c.B(TB::kDX) + ch * R * (K / W), K / W, R, K / W, N);
      };
      if (!overlapped) {
        if (comm) KOSMOS_NCCL_BENCH_CHECK(ncclAllGather(src, G, size_t(R * cols), bf, c.comm, s0));
        if (gemm) {
          if (fwd) KOSMOS_RETURN_IF_ERROR(rm_gemm(c, s0, G, false, K, c.B(TB::kW), false, N / W, c.B(TB::kY), N / W, M, N / W, K));
          else KOSMOS_RETURN_IF_ERROR(rm_gemm(c, s0, G, false, N, c.B(TB::kW), true, N, c.B(TB::kDX), K / W, M, K / W, N));
        }
      } else {
        if (comm) KOSMOS_CUDA_CHECK(cudaMemcpyAsync(G + r * R * cols, src, R * cols * 2, cudaMemcpyDeviceToDevice, s1));
        if (gemm) KOSMOS_RETURN_IF_ERROR(chunk_gemm(src, r));  // local data first
        for (int k = 1; k < W; ++k) {
          const int ch = (r + k) % W, to = (r - k + W) % W;
          if (comm) {
            KOSMOS_NCCL_BENCH_CHECK(ncclGroupStart());
            KOSMOS_NCCL_BENCH_CHECK(ncclSend(src, size_t(R * cols), bf, to, c.comm, s1));
            KOSMOS_NCCL_BENCH_CHECK(ncclRecv(G + ch * R * cols, size_t(R * cols), bf, ch, c.comm, s1));
            KOSMOS_NCCL_BENCH_CHECK(ncclGroupEnd());
          }
          KOSMOS_CUDA_CHECK(cudaEventRecord(c.ev[k], s1));
          KOSMOS_CUDA_CHECK(cudaStreamWaitEvent(s0, c.ev[k]));
          if (gemm) KOSMOS_RETURN_IF_ERROR(chunk_gemm(G + ch * R * cols, ch));
        }
        if (!fwd) KOSMOS_RETURN_IF_ERROR(join());  // dW needs the whole gathered dY
      }
      if (gemm && !fwd)  // dW_r = X_rᵀ · AG(dY)
        KOSMOS_RETURN_IF_ERROR(rm_gemm(c, s0, c.B(TB::kX), true, K / W, G, false, N, c.B(TB::kDW), N, K / W, N, M));
      break;
    }
    case TpOp::kGemmRs:
    case TpOp::kGemmAr:
    case TpOp::kColParallelBwd: {
      const bool bwd = g.op == TpOp::kColParallelBwd, ar = g.op == TpOp::kGemmAr;
      const int64_t cols = bwd ? K : N;
      bf16_t* P = c.B(TB::kPartial);
      bf16_t* out = c.B(bwd ? TB::kDX : TB::kY);
      // Partial rows [row0, row0 + rows) of X_r·W_r (forward) or dY_r·W_rᵀ (backward).
      auto part_gemm = [&](int64_t row0, int64_t rows) -> Status {
        if (!bwd) return rm_gemm(c, s0, c.B(TB::kX) + row0 * (K / W), false, K / W, c.B(TB::kW), false, N, P + row0 * N, N, rows, N, K / W);
        return rm_gemm(c, s0, c.B(TB::kDY) + row0 * (N / W), false, N / W, c.B(TB::kW), true, N / W, P + row0 * K, K, rows, K, N / W);
      };
      auto dw_gemm = [&]() -> Status {  // dW_r = AG(X)ᵀ · dY_r
        return rm_gemm(c, s0, c.B(TB::kGathered), true, K, c.B(TB::kDY), false, N / W, c.B(TB::kDW), N / W, K, N / W, M);
      };
      if (!overlapped) {
        if (gemm) KOSMOS_RETURN_IF_ERROR(part_gemm(0, M));
        if (comm) {
          if (ar) KOSMOS_NCCL_BENCH_CHECK(ncclAllReduce(P, out, size_t(M * cols), bf, ncclSum, c.comm, s0));
          else KOSMOS_NCCL_BENCH_CHECK(ncclReduceScatter(P, out, size_t(R * cols), bf, ncclSum, c.comm, s0));
          if (bwd) KOSMOS_NCCL_BENCH_CHECK(ncclAllGather(c.B(TB::kX), c.B(TB::kGathered), size_t(R * K), bf, c.comm, s0));
        }
        if (gemm && bwd) KOSMOS_RETURN_IF_ERROR(dw_gemm());
      } else {
        if (bwd) {  // gather X first on the comm stream: dW can start as soon as it lands
          if (comm) KOSMOS_NCCL_BENCH_CHECK(ncclAllGather(c.B(TB::kX), c.B(TB::kGathered), size_t(R * K), bf, c.comm, s1));
          KOSMOS_CUDA_CHECK(cudaEventRecord(c.ev[66], s1));
        }
        for (int o = 0; o < W; ++o) {
          if (gemm) KOSMOS_RETURN_IF_ERROR(part_gemm(o * R, R));
          KOSMOS_CUDA_CHECK(cudaEventRecord(c.ev[o], s0));
          KOSMOS_CUDA_CHECK(cudaStreamWaitEvent(s1, c.ev[o]));
          if (!comm) continue;
          if (ar) KOSMOS_NCCL_BENCH_CHECK(ncclAllReduce(P + o * R * cols, out + o * R * cols, size_t(R * cols), bf, ncclSum, c.comm, s1));
          else KOSMOS_NCCL_BENCH_CHECK(ncclReduce(P + o * R * cols, out, size_t(R * cols), bf, ncclSum, o, c.comm, s1));
        }
        if (bwd) {
          KOSMOS_CUDA_CHECK(cudaStreamWaitEvent(s0, c.ev[66]));
          if (gemm) KOSMOS_RETURN_IF_ERROR(dw_gemm());
        }
      }
      break;
    }
  }
  return join();
}

double flops(const TpConfig& c) {
  const double f = 2.0 * c.m * c.n * c.k;
  return (c.op == TpOp::kColParallelBwd || c.op == TpOp::kRowParallelBwd) ? 2 * f : f;
}

std::vector<TpBuffer> outputs(TpOp op) {
  if (op == TpOp::kAgGemm || op == TpOp::kGemmRs || op == TpOp::kGemmAr) return {TpBuffer::kY};
  return {TpBuffer::kDX, TpBuffer::kDW};
}

// ---------------------------------------------------------------------------------------------
// fp64 reference of one output element of rank r, from the encoded inputs of every rank.

double in(const TpConfig& c, TpBuffer b, int rank, int64_t i, int64_t j) {
  const TpBufferShape s = tp_buffer_shape(c, b);
  return bf16_to_double(enc_bf16(uint32_t(b), uint32_t(rank), uint64_t(i * s.cols + j), input_shift(b)));
}

double ref_entry(const TpConfig& c, TpBuffer out, int r, int64_t i, int64_t j) {
  const int W = c.world;
  const int64_t M = c.m, N = c.n, K = c.k, R = M / W;
  using TB = TpBuffer;
  double acc = 0;
  switch (c.op) {
    case TpOp::kAgGemm:  // Y_r[i, j] = AG(X)[i, :] · W_r[:, j]
      for (int64_t kk = 0; kk < K; ++kk) acc += in(c, TB::kX, int(i / R), i % R, kk) * in(c, TB::kW, r, kk, j);
      break;
    case TpOp::kGemmRs:
    case TpOp::kGemmAr: {  // rows of Σ_s X_s · W_s
      const int64_t row = c.op == TpOp::kGemmRs ? r * R + i : i;
      for (int s = 0; s < W; ++s)
        for (int64_t kk = 0; kk < K / W; ++kk) acc += in(c, TB::kX, s, row, kk) * in(c, TB::kW, s, kk, j);
      break;
    }
    case TpOp::kColParallelBwd:
      if (out == TB::kDX) {  // rows r of Σ_s dY_s · W_sᵀ
        for (int s = 0; s < W; ++s)
          for (int64_t n = 0; n < N / W; ++n) acc += in(c, TB::kDY, s, r * R + i, n) * in(c, TB::kW, s, j, n);
      } else {  // dW_r = AG(X)ᵀ · dY_r
        for (int64_t m = 0; m < M; ++m) acc += in(c, TB::kX, int(m / R), m % R, i) * in(c, TB::kDY, r, m, j);
      }
      break;
    case TpOp::kRowParallelBwd:
      if (out == TB::kDX) {  // AG(dY) · W_rᵀ
        for (int64_t n = 0; n < N; ++n) acc += in(c, TB::kDY, int(i / R), i % R, n) * in(c, TB::kW, r, j, n);
      } else {  // X_rᵀ · AG(dY)
        for (int64_t m = 0; m < M; ++m) acc += in(c, TB::kX, r, m, i) * in(c, TB::kDY, int(m / R), m % R, j);
      }
      break;
  }
  return acc;
}

// Sampled rows x sampled columns of every output of this rank vs fp64: relative L2 error.
Status check_sampled(const TpConfig& c, const TpLayer& L, int rank, double* rel_err) {
  std::mt19937_64 rng(1234 + rank);
  double num = 0, den = 0;
  for (TpBuffer b : outputs(c.op)) {
    const TpBufferShape s = tp_buffer_shape(c, b);
    std::vector<int64_t> rows = {0, s.rows - 1}, cols = {0, s.cols - 1};
    for (int i = 0; i < 6; ++i) rows.push_back(int64_t(rng() % uint64_t(s.rows)));
    for (int i = 0; i < 30; ++i) cols.push_back(int64_t(rng() % uint64_t(s.cols)));
    std::vector<bf16_t> row(size_t(s.cols));
    for (int64_t i : rows) {
      KOSMOS_CUDA_CHECK(cudaMemcpy(row.data(), static_cast<const bf16_t*>(L.buffer(b, rank)) + i * s.cols, size_t(s.cols) * 2,
                                   cudaMemcpyDeviceToHost));
      for (int64_t j : cols) {
        const double x = bf16_to_double(row[size_t(j)]), ref = ref_entry(c, b, rank, i, j);
        if (!std::isfinite(x)) {
          *rel_err = INFINITY;
          return Status::ok();
        }
        num += (x - ref) * (x - ref);
        den += ref * ref;
      }
    }
  }
  *rel_err = std::sqrt(num / std::max(den, 1e-30));
  return Status::ok();
}

}  // namespace

void run_bench_tp_nccl(const TpNcclBenchOptions& o) {
  int world = 0;
  throw_if_error(check_nccl_launch_env("bench tp --transport nccl", &world));
  std::unique_ptr<transport::NcclTransport> t;
  throw_if_error(transport::NcclTransport::create_from_env(&t));
  run_rank_or_exit(*t, "bench tp --transport nccl", [&] {
    const int rank = t->rank(), W = t->world();
    const bool lead = rank == 0;
    auto say = [&](const char* msg) {
      if (lead) std::fprintf(stderr, "[bench tp nccl] %s\n", msg);
    };
    TpConfig cfg = o.cfg;
    cfg.world = W;
    cfg.fused = true;
    cfg.cpu = false;
    cfg.trace = false;
    cfg.watchdog_seconds = std::max(cfg.watchdog_seconds, 30.0);
    if (lead)
      std::fprintf(stderr, "[bench tp nccl] %s %s W=%d M=%ld N=%ld K=%ld, NCCL %s: planning...\n", o.model.c_str(), to_string(cfg.op), W,
                   long(cfg.m), long(cfg.n), long(cfg.k), transport::nccl_library_version().to_string().c_str());

    const TpDistributed dist = transport::make_tp_distributed(*t);
    std::unique_ptr<TpLayer> fused, unfused;
    throw_if_error(TpLayer::plan_distributed(cfg, dist, &fused));
    TpConfig cu = cfg;
    cu.fused = false;
    throw_if_error(TpLayer::plan_distributed(cu, dist, &unfused));

    Net c;
    c.cfg = cfg;
    c.rank = rank;
    c.W = W;
    c.t = t.get();
    c.comm = static_cast<ncclComm_t>(t->nccl_comm());
    auto cuda = [](cudaError_t e, const char* what) {
      if (e != cudaSuccess) throw Error(Status(StatusCode::kCudaError, std::string(what) + ": " + cudaGetErrorString(e)));
    };
    if (cublasCreate(&c.h) != CUBLAS_STATUS_SUCCESS) throw Error(Status(StatusCode::kInternal, "cublasCreate failed"));
    cuda(cudaStreamCreateWithFlags(&c.s0, cudaStreamNonBlocking), "stream");
    cuda(cudaStreamCreateWithFlags(&c.s1, cudaStreamNonBlocking), "stream");
    c.ev.resize(67);
    for (auto& e : c.ev) cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "event");
    Gate gate;
    throw_if_error(gate.init());
    HostDoubles xfer;
    throw_if_error(xfer.init(W, 64));

    // Inputs: encoded on the device into both layers; the baselines get plain copies.
    for (TpBuffer b : {TpBuffer::kX, TpBuffer::kW, TpBuffer::kDY}) {
      const size_t bytes = fused->buffer_bytes(b);
      if (!bytes) continue;
      for (TpLayer* L : {fused.get(), unfused.get()}) {
        fill_encoded<<<1056, 256, 0, c.s0>>>(static_cast<bf16_t*>(L->buffer(b, rank)), bytes / 2, uint32_t(b), uint32_t(rank), input_shift(b));
        cuda(cudaGetLastError(), "fill_encoded");
      }
      throw_if_error(c.buf[size_t(b)].alloc(bytes));
      cuda(cudaMemcpyAsync(c.buf[size_t(b)].p, fused->buffer(b, rank), bytes, cudaMemcpyDeviceToDevice, c.s0), "copy inputs");
    }
    for (TpBuffer b : {TpBuffer::kGathered, TpBuffer::kPartial, TpBuffer::kY, TpBuffer::kDX, TpBuffer::kDW})
      throw_if_error(c.buf[size_t(b)].alloc(fused->buffer_bytes(b)));
    cuda(cudaStreamSynchronize(c.s0), "fill inputs");

    // ---- verification (collective: every rank reaches the same verdict)
    say("verifying...");
    throw_if_error(t->barrier(c.s0));
    throw_if_error(fused->run(c.s0));
    throw_if_error(fused->finish(c.s0));
    throw_if_error(unfused->run(c.s0));
    throw_if_error(unfused->finish(c.s0));
    throw_if_error(baseline(c, false, 0));
    cuda(cudaStreamSynchronize(c.s0), "baseline (a)");
    CmpOut* d_cmp = nullptr;
    cuda(cudaMalloc(reinterpret_cast<void**>(&d_cmp), sizeof(CmpOut)), "cudaMalloc");
    double not_bitwise = 0, nonfinite = 0, err_cublas = 0, gathered_diff = 0, err_fp64 = 0;
    for (TpBuffer b : outputs(cfg.op)) {
      const size_t elems = fused->buffer_bytes(b) / 2;
      CmpOut u{}, a{};
      throw_if_error(compare_bf16(fused->buffer(b, rank), unfused->buffer(b, rank), elems, d_cmp, c.s0, &u));
      throw_if_error(compare_bf16(fused->buffer(b, rank), c.buf[size_t(b)].p, elems, d_cmp, c.s0, &a));
      not_bitwise = std::max(not_bitwise, double(u.mismatches));
      nonfinite = std::max(nonfinite, double(a.nonfinite));
      err_cublas = std::max(err_cublas, std::sqrt(a.num / std::max(a.den, 1e-30)));
    }
    if (fused->buffer_bytes(TpBuffer::kGathered)) {  // W > 1 and the op gathers: AllGather is exact
      CmpOut gcmp{};
      throw_if_error(compare_bf16(fused->buffer(TpBuffer::kGathered, rank), c.buf[size_t(TpBuffer::kGathered)].p,
                             fused->buffer_bytes(TpBuffer::kGathered) / 2, d_cmp, c.s0, &gcmp));
      gathered_diff = double(gcmp.mismatches);
    }
    cudaFree(d_cmp);
    throw_if_error(check_sampled(cfg, *fused, rank, &err_fp64));
    std::vector<double> verdict = {not_bitwise, nonfinite, err_cublas, gathered_diff, std::isfinite(err_fp64) ? err_fp64 : 1e300};
    throw_if_error(xfer.allreduce_max(c, &verdict));
    const bool bitwise = verdict[0] == 0;
    err_cublas = verdict[2];
    err_fp64 = verdict[4];
    if (verdict[1] > 0) throw Error(Status(StatusCode::kInternal, "fused output has non-finite values (on some rank)"));
    if (!bitwise)
      throw Error(Status(StatusCode::kInternal, "fused differs from the unfused composition: up to " + std::to_string(long(verdict[0])) +
                                                    " elements on some rank"));
    if (verdict[3] > 0)
      throw Error(Status(StatusCode::kInternal, "fused gathered buffer differs from ncclAllGather in " + std::to_string(long(verdict[3])) +
                                                    " elements on some rank"));
    if (!(err_cublas < 2e-2)) throw Error(Status(StatusCode::kInternal, "fused vs NCCL+cuBLAS relative error " + std::to_string(err_cublas)));
    if (!(err_fp64 < 1e-2)) throw Error(Status(StatusCode::kInternal, "fused vs fp64 (sampled) relative error " + std::to_string(err_fp64)));

    // ---- timing (collective)
    say("timing...");
    std::vector<double> mine;  // fused, unfused, (a), (b), comm only, GEMMs only
    throw_if_error(time_nccl_variants(c, gate, o.reps,
                                 {[&] { return fused->run(c.s0); }, [&] { return unfused->run(c.s0); },
                                  [&] { return baseline(c, false, 0); }, [&] { return baseline(c, true, 0); },
                                  [&] { return baseline(c, false, 1); }, [&] { return baseline(c, false, 2); }},
                                 &mine));
    throw_if_error(fused->finish(c.s0));
    throw_if_error(unfused->finish(c.s0));
    cuda(cudaStreamSynchronize(c.s0), "timing");
    double t_fused, t_unfused, t_a, t_b, t_comm, t_gemm;
    std::vector<double> per_rank;
    throw_if_error(xfer.allgather(c, mine, &per_rank));
    std::vector<double> mx = mine;
    throw_if_error(xfer.allreduce_max(c, &mx));
    t_fused = mx[0], t_unfused = mx[1], t_a = mx[2], t_b = mx[3], t_comm = mx[4], t_gemm = mx[5];
    throw_if_error(t->barrier(c.s0));
    cuda(cudaStreamSynchronize(c.s0), "final barrier");
    if (!lead) return;

    const double ideal = std::max(t_comm, t_gemm);
    const double tf = flops(cfg) / (t_fused * 1e-3) / 1e12;
    std::printf("%s %s W=%d M=%ld N=%ld K=%ld (NCCL transport, one process per GPU; NCCL %s)\n", o.model.c_str(), to_string(cfg.op), W,
                long(cfg.m), long(cfg.n), long(cfg.k), transport::nccl_library_version().to_string().c_str());
    std::printf("  %s\n", fused->describe().c_str());
    std::printf("  times: max over %d rank(s) of each rank's median of %d; TFLOP/s: whole layer (all ranks)\n", W, o.reps);
    std::printf("  %-44s %10s %10s %10s %10s\n", "variant", "ms", "TFLOP/s", "/GPU", "fused x");
    auto line = [&](const char* name, double ms) {
      const double f = flops(cfg) / (ms * 1e-3) / 1e12;
      std::printf("  %-44s %10.3f %10.1f %10.1f %10.3f\n", name, ms, f, f / W, ms / t_fused);
    };
    line("fused (kosmos, one launch + epoch barrier)", t_fused);
    line("unfused kosmos composition (two launches)", t_unfused);
    line("(a) NCCL collective then cuBLAS, sequential", t_a);
    line("(b) chunked, NCCL || cuBLAS on 2 streams", t_b);
    line("    comm only (NCCL collectives of (a))", t_comm);
    line("    cuBLAS GEMMs only", t_gemm);
    std::printf("  ideal overlap max(T_gemm, T_comm) = %.3f ms; fused reaches %.1f%% of it; bitwise fused==unfused: %s; "
                "rel.err vs NCCL+cuBLAS %.2e, vs fp64 (sampled) %.2e\n",
                ideal, 100 * ideal / t_fused, bitwise ? "yes" : "no", err_cublas, err_fp64);
    if (!o.json.empty()) {
      nlohmann::json j = run_metadata(command_line());
      j["bench"] = "tp";
      j["model"] = o.model;
      j["op"] = to_string(cfg.op);
      j["world"] = W;
      j["m"] = cfg.m;
      j["n"] = cfg.n;
      j["k"] = cfg.k;
      j["transport"] = "nccl (one process per GPU)";
      j["nccl_library"] = transport::nccl_library_version().to_string();
      j["nccl_headers"] = transport::nccl_header_version().to_string();
      put_tp_times(j, {t_fused, t_unfused, t_a, t_b, t_comm, t_gemm}, flops(cfg));
      j["fused_tflops_per_gpu"] = tf / W;
      j["bitwise_fused_eq_unfused"] = bitwise;
      j["rel_err_vs_cublas"] = err_cublas;
      j["rel_err_vs_fp64_sampled"] = err_fp64;
      j["reps"] = o.reps;
      j["timing"] = "per rank: gate kernel + NCCL barrier, then CUDA events around the variant; 3 warm-ups, median of reps, the variants alternating repetition by repetition; "
                    "reported: max over ranks. fused includes TpLayer::run's epoch barrier (one NCCL all-reduce).";
      j["baseline_a"] = "NCCL collective(s) and cublasGemmEx in sequence on one stream";
      j["baseline_b"] = "collective split into W chunks on a comm stream (ncclSend/Recv pairs for gathers; ncclReduce to each owner "
                        "or per-chunk ncclAllReduce for reductions) overlapped with per-chunk cublasGemmEx on a compute stream";
      const char* names[] = {"fused_ms", "unfused_ms", "baseline_a_ms", "baseline_b_ms", "comm_only_ms", "gemm_only_ms"};
      nlohmann::json pr;
      for (size_t v = 0; v < 6; ++v) {
        std::vector<double> col;
        for (int r = 0; r < W; ++r) col.push_back(per_rank[size_t(r) * 6 + v]);
        pr[names[v]] = col;
      }
      j["per_rank_median_ms"] = pr;
      throw_if_error(write_json(o.json, j));
    }
  });
}

}  // namespace kosmos::cli
