// kosmos bench moe: the fused MoE forward (one launch) against, in the same process and on the
// same buffers, the unfused pipeline made of our own kernels as separate launches (route,
// offsets, dispatch = permute + all-to-all by device stores, grouped GEMM1 with SwiGLU, grouped
// GEMM2 with the router-weight scale, combine: six persistent launches). Virtual ranks on one GPU.
// Verified: fused == unfused bit for bit, and a few tokens of rank 0 against an fp64 host
// reference. Reported: median ms, TFLOP/s, ratio to the unfused pipeline, and the weight-read
// floor (all expert weight bytes / 4.2 TB/s, the H200's measured device copy rate).
// --backward: the fused backward (one launch) against its unfused composition (seven launches:
// route, offsets, dispatch of x and dy, H1 recompute + dA', SwiGLU backward, dX + weight
// gradients, combine); verified bit for bit on every output (dx, d_weights, dGateUp, dDown) and
// dx / d_weights of three tokens of rank 0 against fp64 (the weight gradients are checked against
// fp64 by the GPU tests). FLOPs = 2 x the forward's GEMM FLOPs + the recomputed GEMM1.
// Forward, third variant: an unfused pipeline from standard pieces on the same inputs (cub sort
// permute, counts to the host with one sync, device copies as the all-to-all for W > 1,
// cublasGemmGroupedBatchedEx for both expert GEMMs, elementwise SwiGLU, weighted un-permute; see
// CublasGroupedMoe below), verified against the fused output by relative error (different kernels
// and roundings: h1 is rounded to bf16 before SwiGLU, the router weight applied after GEMM2).
// --dump-routing PATH writes the exact routing (per rank ids [T, k], weights [T, k]) and shapes as
// JSON for bench/torch_baselines.py; it needs no GPU (the routing is generated on the host first).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <random>

#include "bench_timing.h"
#include "common.h"
#include "kernels/gemm/bf16.h"
#include "kosmos/cuda_check.h"
#include "kosmos/moe.h"
#include "kosmos/trace.h"

namespace kosmos::cli {

namespace {

struct MoeModel {
  int64_t hidden, intermediate;
  int experts_per_rank;  // default E = experts_per_rank * world (DeepSeek: 32 local experts, as in issue 5's proxy)
  int fixed_experts;     // > 0: E regardless of the world (Qwen3-235B: 128)
};
const std::map<std::string, MoeModel> kMoeModels = {{"deepseek-v3", {7168, 2048, 32, 0}}, {"qwen3-235b", {4096, 1536, 0, 128}}};

__global__ void fill_bf16(__nv_bfloat16* p, size_t n, uint64_t seed, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint64_t z = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float u = float(z >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    p[i] = __float2bfloat16_rn((2.0f * u - 1.0f) * scale);
  }
}


template <class T>
Status download(const void* src, size_t count, size_t offset, std::vector<T>* out) {
  out->resize(count);
  KOSMOS_CUDA_CHECK(cudaMemcpy(out->data(), static_cast<const T*>(src) + offset, count * sizeof(T), cudaMemcpyDeviceToHost));
  return Status::ok();
}

// fp64 reference of token t of rank 0, reading the (interleaved) expert weights from the device.
Status reference_token(const MoeLayer& L, int64_t t, const std::vector<int32_t>& ids, const std::vector<float>& w,
                       std::vector<double>* y) {
  const MoeConfig& c = L.config();
  const int64_t H = c.hidden, I = c.intermediate, Lx = c.num_experts / c.world;
  std::vector<uint16_t> x, gu, dn;
  KOSMOS_RETURN_IF_ERROR(download(L.buffer(MoeBuffer::kX, 0), size_t(H), size_t(t * H), &x));
  y->assign(size_t(H), 0.0);
  for (int j = 0; j < c.top_k; ++j) {
    const int e = ids[t * c.top_k + j];
    KOSMOS_RETURN_IF_ERROR(download(L.buffer(MoeBuffer::kGateUp, int(e / Lx)), size_t(H * 2 * I), size_t((e % Lx) * H * 2 * I), &gu));
    KOSMOS_RETURN_IF_ERROR(download(L.buffer(MoeBuffer::kDown, int(e / Lx)), size_t(I * H), size_t((e % Lx) * I * H), &dn));
    std::vector<double> acc(size_t(2 * I), 0.0);
    for (int64_t h = 0; h < H; ++h) {
      const double xv = kernels::gemm::bf16_to_float(x[h]);
      for (int64_t n = 0; n < 2 * I; ++n) acc[n] += xv * kernels::gemm::bf16_to_float(gu[h * 2 * I + n]);
    }
    for (int64_t i = 0; i < I; ++i) {
      const double g = acc[16 * (i / 8) + i % 8], u = acc[16 * (i / 8) + 8 + i % 8];
      const double a = g / (1.0 + std::exp(-g)) * u * w[t * c.top_k + j];
      for (int64_t h = 0; h < H; ++h) (*y)[h] += a * kernels::gemm::bf16_to_float(dn[i * H + h]);
    }
  }
  return Status::ok();
}

// fp64 dx and d_weights of token t of rank 0 (expert weights read back from the device).
Status reference_token_backward(const MoeLayer& L, int64_t t, const std::vector<int32_t>& ids, const std::vector<float>& w,
                                std::vector<double>* dx, std::vector<double>* dw) {
  const MoeConfig& c = L.config();
  const int64_t H = c.hidden, I = c.intermediate, Lx = c.num_experts / c.world;
  std::vector<uint16_t> x, dy, gu, dn;
  KOSMOS_RETURN_IF_ERROR(download(L.buffer(MoeBuffer::kX, 0), size_t(H), size_t(t * H), &x));
  KOSMOS_RETURN_IF_ERROR(download(L.buffer(MoeBuffer::kDy, 0), size_t(H), size_t(t * H), &dy));
  dx->assign(size_t(H), 0.0);
  dw->assign(size_t(c.top_k), 0.0);
  auto f = [](uint16_t v) { return double(kernels::gemm::bf16_to_float(v)); };
  for (int j = 0; j < c.top_k; ++j) {
    const int e = ids[t * c.top_k + j];
    KOSMOS_RETURN_IF_ERROR(download(L.buffer(MoeBuffer::kGateUp, int(e / Lx)), size_t(H * 2 * I), size_t((e % Lx) * H * 2 * I), &gu));
    KOSMOS_RETURN_IF_ERROR(download(L.buffer(MoeBuffer::kDown, int(e / Lx)), size_t(I * H), size_t((e % Lx) * I * H), &dn));
    std::vector<double> acc(size_t(2 * I), 0.0), dh(size_t(2 * I), 0.0);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t n = 0; n < 2 * I; ++n) acc[n] += f(x[h]) * f(gu[h * 2 * I + n]);
    for (int64_t i = 0; i < I; ++i) {
      const int64_t gc = 16 * (i / 8) + i % 8;  // interleaved gate column; up = gc + 8
      const double g = acc[gc], u = acc[gc + 8], sg = 1.0 / (1.0 + std::exp(-g));
      double da = 0.0;
      for (int64_t h = 0; h < H; ++h) da += f(dn[i * H + h]) * f(dy[h]);
      (*dw)[j] += da * g * sg * u;
      const double dA = w[t * c.top_k + j] * da;
      dh[gc] = dA * u * sg * (1.0 + g * (1.0 - sg));
      dh[gc + 8] = dA * g * sg;
    }
    for (int64_t h = 0; h < H; ++h)
      for (int64_t n = 0; n < 2 * I; ++n) (*dx)[h] += dh[n] * f(gu[h * 2 * I + n]);
  }
  return Status::ok();
}

// Poison (0xFF bytes: bf16 NaN) on the stream the layer runs on. NOT cudaMemset: that runs on the
// legacy default stream, which a cudaStreamNonBlocking stream does not wait for, so the memset
// raced the fused kernel and overwrote most of d_gate_up after the kernel had stored it (the
// "non-finite backward output" of the second session).
void poison_on(cudaStream_t s, void* p, size_t bytes) {
  if (cudaMemsetAsync(p, 0xFF, bytes, s) != cudaSuccess) throw Error(Status(StatusCode::kCudaError, "poison"));
}

// "" when all n bf16 values are finite (outputs start from NaN poison, so this also says every
// element was written); else "<count> elements, first at row R col C (raw 0xXXXX)" for rows of
// `cols` values.
std::string non_finite_bf16(const uint16_t* v, size_t n, int64_t cols) {
  size_t bad = 0, first = 0;
  for (size_t e = 0; e < n; ++e)
    if (!std::isfinite(kernels::gemm::bf16_to_float(v[e])) && bad++ == 0) first = e;
  if (bad == 0) return "";
  char raw[8];
  std::snprintf(raw, sizeof raw, "%04x", v[first]);
  return std::to_string(bad) + " elements, first at row " + std::to_string(first / size_t(cols)) + " col " +
         std::to_string(first % size_t(cols)) + " (raw 0x" + raw + ")";
}

// The backward outputs of every rank, as raw bytes (for the bitwise comparison).
Status download_grads(const MoeLayer& L, std::vector<std::vector<uint8_t>>* out) {
  out->clear();
  for (int r = 0; r < L.config().world; ++r)
    for (MoeBuffer b : {MoeBuffer::kDx, MoeBuffer::kDWeights, MoeBuffer::kDGateUp, MoeBuffer::kDDown}) {
      std::vector<uint8_t> v;
      KOSMOS_RETURN_IF_ERROR(download(L.buffer(b, r), L.buffer_bytes(b), 0, &v));
      out->push_back(std::move(v));
    }
  return Status::ok();
}

// ---- Unfused baseline from standard pieces (cuBLAS grouped GEMM) ---------------------------------
// Per iteration, on one stream, all virtual ranks at once (one launch per step, not one per rank):
//   1. keys: key = s * (E + 1) + e (E for a dropped slot), val = global slot index; atomic counts.
//   2. cub::DeviceRadixSort::SortPairs (stable) over all W·T·k slots: each rank's slots grouped by
//      expert, t-major then j inside an expert (= torch.argsort(stable=True)).
//   3. permute: send_x[p] = x_s[slot / k] (gather), inv[slot] = p.
//   4. counts [W, E + 1] to the host, one stream sync (as real unfused pipelines do).
//   5. W > 1: all-to-all as W² cudaMemcpyAsync (s's rows for d's experts, one contiguous chunk) into
//      d's staging rows (source-major), then a local regroup (chunk-copy kernel) to expert-major.
//      W = 1: neither (the permuted rows are already expert-major).
//   6. GEMM1 cublasGemmGroupedBatchedEx: one problem per non-empty expert of every rank, bf16 in /
//      out, fp32 compute: h1 [rows, 2I] = recv_x · gate_up_e ([H, 2I] row-major, interleaved).
//   7. SwiGLU elementwise (the layer's interleave: gate column c at 16(c/8) + c%8, up 8 further).
//   8. GEMM2 grouped: out [rows, I -> H] = act · down_e ([I, H] row-major).
//   9. W > 1: un-regroup to source-major, W² copies back into each source's permuted layout.
//  10. combine: y_s[t] = bf16( Σ_{j in order} w_s[t,j] · float(back_s[inv[t,j]]) ) (fp32, no atomics).
// Row-major C[M,N] = A[M,K]·B[K,N] is column-major Cᵀ = Bᵀ·Aᵀ: cuBLAS m = N, n = M, both ops N.
constexpr int kCbMaxWorld = 16;
struct CbPtrs {
  const void* p[kCbMaxWorld];
};
struct CbOutPtrs {
  void* p[kCbMaxWorld];
};

__global__ void cb_keys(CbPtrs ids, int E, int64_t tk, int W, uint32_t* keys, int32_t* vals, int32_t* counts) {
  const int64_t n = tk * W;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int s = int(i / tk);
    const int e0 = static_cast<const int32_t*>(ids.p[s])[i - s * tk];
    const int e = (e0 >= 0 && e0 < E) ? e0 : E;
    keys[i] = uint32_t(s * (E + 1) + e);
    vals[i] = int32_t(i);
    atomicAdd(&counts[s * (E + 1) + e], 1);
  }
}

// One warp per permuted row p (global): send_x[p] = x_s[t], inv[slot] = p (local to the rank).
__global__ void cb_permute(CbPtrs x, int64_t H, int k, int64_t tk, int W, int E, const uint32_t* keys_sorted,
                           const int32_t* vals_sorted, uint4* send_x, int32_t* inv) {
  const int64_t n = tk * W, vec = H / 8;
  const int lane = threadIdx.x % 32;
  for (int64_t p = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32; p < n; p += int64_t(gridDim.x) * blockDim.x / 32) {
    const int64_t slot = vals_sorted[p];
    const int s = int(slot / tk);
    if (lane == 0) inv[slot] = int32_t(p - s * tk);
    if (keys_sorted[p] % uint32_t(E + 1) == uint32_t(E)) continue;  // dropped slot: no row
    const uint4* src = static_cast<const uint4*>(x.p[s]) + ((slot - s * tk) / k) * vec;
    for (int64_t c = lane; c < vec; c += 32) send_x[p * vec + c] = src[c];
  }
}

struct CbChunk {
  int64_t src, dst;  // rows
  int64_t rows;
};
// blockIdx.y = chunk; rows of H bf16 (uint4 vectors) copied src -> dst.
__global__ void cb_chunk_copy(const CbChunk* chunks, const uint4* src, uint4* dst, int64_t vec) {
  const CbChunk c = chunks[blockIdx.y];
  const int64_t n = c.rows * vec;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[c.dst * vec + i] = src[c.src * vec + i];
}

// 8 output columns per thread: gate = h1[r, 16b .. 16b+7], up = h1[r, 16b+8 .. 16b+15] (interleave).
__global__ void cb_swiglu(const uint4* h1, uint4* act, int64_t rows, int64_t I) {
  const int64_t nb = I / 8, n = rows * nb;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / nb, b = i % nb;
    const uint4 gv = h1[r * 2 * nb + 2 * b], uv = h1[r * 2 * nb + 2 * b + 1];
    const __nv_bfloat16* g = reinterpret_cast<const __nv_bfloat16*>(&gv);
    const __nv_bfloat16* u = reinterpret_cast<const __nv_bfloat16*>(&uv);
    uint4 ov;
    __nv_bfloat16* o = reinterpret_cast<__nv_bfloat16*>(&ov);
    for (int q = 0; q < 8; ++q) {
      const float gf = __bfloat162float(g[q]), uf = __bfloat162float(u[q]);
      o[q] = __float2bfloat16_rn(gf / (1.0f + __expf(-gf)) * uf);
    }
    act[i] = ov;
  }
}

// One warp per token: lanes stride over 8-column groups; slots summed in order j = 0..k-1 in fp32.
__global__ void cb_combine(CbPtrs w, CbOutPtrs y, CbPtrs ids, const __nv_bfloat16* back, const int32_t* inv, int64_t T, int k,
                           int64_t H, int W, int E) {
  const int lane = threadIdx.x % 32;
  const int64_t tk = T * k;
  for (int64_t g = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32; g < T * W; g += int64_t(gridDim.x) * blockDim.x / 32) {
    const int s = int(g / T);
    const int64_t t = g - s * T;
    const float* ws = static_cast<const float*>(w.p[s]);
    const int32_t* is = static_cast<const int32_t*>(ids.p[s]);
    __nv_bfloat16* ys = static_cast<__nv_bfloat16*>(y.p[s]) + t * H;
    for (int64_t c0 = lane * 8; c0 < H; c0 += 32 * 8) {
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int j = 0; j < k; ++j) {
        const int e = is[t * k + j];
        if (e < 0 || e >= E) continue;
        const float wt = ws[t * k + j];
        const uint4 v = *reinterpret_cast<const uint4*>(back + (s * tk + inv[s * tk + t * k + j]) * H + c0);
        const __nv_bfloat16* row = reinterpret_cast<const __nv_bfloat16*>(&v);
        for (int q = 0; q < 8; ++q) acc[q] += wt * __bfloat162float(row[q]);
      }
      uint4 ov;
      __nv_bfloat16* o = reinterpret_cast<__nv_bfloat16*>(&ov);
      for (int q = 0; q < 8; ++q) o[q] = __float2bfloat16_rn(acc[q]);
      *reinterpret_cast<uint4*>(ys + c0) = ov;
    }
  }
}

#define KOSMOS_CUBLAS_CHECK(x)                                                                                      \
  do {                                                                                                              \
    const cublasStatus_t st_ = (x);                                                                                 \
    KOSMOS_CHECK_CODE(st_ == CUBLAS_STATUS_SUCCESS, StatusCode::kInternal, #x " failed: cuBLAS status ", int(st_)); \
  } while (0)

class CublasGroupedMoe {
 public:
  ~CublasGroupedMoe() {
    if (h_) cublasDestroy(h_);
    for (void* p : dev_) cudaFree(p);
    if (host_) cudaFreeHost(host_);
  }
  // rows_per_rank: rows each rank receives with this bench's routing (buffer capacity; checked
  // against the device counts every run).
  Status init(const MoeLayer& layer, const std::vector<int64_t>& rows_per_rank, cudaStream_t s) {
    const MoeConfig& c = layer.config();
    W_ = c.world, E_ = c.num_experts, k_ = c.top_k, T_ = c.tokens, H_ = c.hidden, I_ = c.intermediate, L_ = E_ / W_;
    s_ = s;
    KOSMOS_CHECK(W_ <= kCbMaxWorld, "cuBLAS baseline: world <= ", kCbMaxWorld);
    tk_ = T_ * k_;
    base_.assign(W_ + 1, 0);
    for (int d = 0; d < W_; ++d) base_[d + 1] = base_[d] + rows_per_rank[d];
    const int64_t R = std::max<int64_t>(base_[W_], 1), n = tk_ * W_;
    for (int r = 0; r < W_; ++r) {
      x_.p[r] = layer.buffer(MoeBuffer::kX, r);
      ids_.p[r] = layer.buffer(MoeBuffer::kIds, r);
      w_.p[r] = layer.buffer(MoeBuffer::kWeights, r);
      gu_[r] = static_cast<const __nv_bfloat16*>(layer.buffer(MoeBuffer::kGateUp, r));
      dn_[r] = static_cast<const __nv_bfloat16*>(layer.buffer(MoeBuffer::kDown, r));
    }
    KOSMOS_RETURN_IF_ERROR(alloc(&keys_, n * 4));
    KOSMOS_RETURN_IF_ERROR(alloc(&keys_sorted_, n * 4));
    KOSMOS_RETURN_IF_ERROR(alloc(&vals_, n * 4));
    KOSMOS_RETURN_IF_ERROR(alloc(&vals_sorted_, n * 4));
    KOSMOS_RETURN_IF_ERROR(alloc(&inv_, n * 4));
    KOSMOS_RETURN_IF_ERROR(alloc(&counts_, int64_t(W_) * (E_ + 1) * 4));
    KOSMOS_RETURN_IF_ERROR(alloc(&send_x_, n * H_ * 2));
    KOSMOS_RETURN_IF_ERROR(alloc(&h1_, R * 2 * I_ * 2));
    KOSMOS_RETURN_IF_ERROR(alloc(&act_, R * I_ * 2));
    KOSMOS_RETURN_IF_ERROR(alloc(&out_, R * H_ * 2));
    if (W_ > 1) {
      KOSMOS_RETURN_IF_ERROR(alloc(&recv_x_, R * H_ * 2));
      KOSMOS_RETURN_IF_ERROR(alloc(&back_, n * H_ * 2));
    } else {
      recv_x_ = send_x_;  // W = 1: the permuted rows are the expert-major rows
      back_ = out_;
    }
    KOSMOS_RETURN_IF_ERROR(alloc(&y_, int64_t(W_) * T_ * H_ * 2));
    for (int r = 0; r < W_; ++r) y_ptrs_.p[r] = static_cast<char*>(y_) + size_t(r) * T_ * H_ * 2;
    // Device side of the per-run tables: 6 pointer arrays of E entries, 2 x W·E chunks.
    table_bytes_ = size_t(6) * E_ * sizeof(void*) + size_t(2) * W_ * E_ * sizeof(CbChunk);
    KOSMOS_RETURN_IF_ERROR(alloc(&table_, int64_t(table_bytes_)));
    KOSMOS_CUDA_CHECK(cudaMallocHost(&host_, table_bytes_ + size_t(W_) * (E_ + 1) * 4));
    end_bit_ = 1;
    while ((int64_t(1) << end_bit_) < int64_t(W_) * (E_ + 1)) ++end_bit_;
    KOSMOS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes_, static_cast<uint32_t*>(keys_),
                                                      static_cast<uint32_t*>(keys_sorted_), static_cast<int32_t*>(vals_),
                                                      static_cast<int32_t*>(vals_sorted_), int(n), 0, end_bit_, s_));
    KOSMOS_RETURN_IF_ERROR(alloc(&sort_tmp_, int64_t(sort_bytes_)));
    KOSMOS_CUBLAS_CHECK(cublasCreate(&h_));
    KOSMOS_CUBLAS_CHECK(cublasSetStream(h_, s_));  // before the workspace: SetStream resets it
    KOSMOS_RETURN_IF_ERROR(alloc(&ws_, 64 << 20));
    KOSMOS_CUBLAS_CHECK(cublasSetWorkspace(h_, ws_, 64 << 20));
    return Status::ok();
  }

  Status poison() {
    for (void* p : {h1_, act_, out_, send_x_}) KOSMOS_CUDA_CHECK(cudaMemsetAsync(p, 0xFF, bytes_[p], s_));
    if (W_ > 1)
      for (void* p : {recv_x_, back_}) KOSMOS_CUDA_CHECK(cudaMemsetAsync(p, 0xFF, bytes_[p], s_));
    KOSMOS_CUDA_CHECK(cudaMemsetAsync(y_, 0xFF, bytes_[y_], s_));
    return Status::ok();
  }

  Status run() {
    const int64_t n = tk_ * W_, vec = H_ / 8;
    auto* counts_h = reinterpret_cast<int32_t*>(static_cast<char*>(host_) + table_bytes_);
    KOSMOS_CUDA_CHECK(cudaMemsetAsync(counts_, 0, size_t(W_) * (E_ + 1) * 4, s_));
    cb_keys<<<grid(n, 256), 256, 0, s_>>>(ids_, E_, tk_, W_, u32(keys_), i32(vals_), i32(counts_));
    KOSMOS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(sort_tmp_, sort_bytes_, u32(keys_), u32(keys_sorted_), i32(vals_),
                                                      i32(vals_sorted_), int(n), 0, end_bit_, s_));
    cb_permute<<<grid(n * 32, 256), 256, 0, s_>>>(x_, H_, k_, tk_, W_, E_, u32(keys_sorted_), i32(vals_sorted_),
                                                   static_cast<uint4*>(send_x_), i32(inv_));
    KOSMOS_CUDA_CHECK(cudaMemcpyAsync(counts_h, counts_, size_t(W_) * (E_ + 1) * 4, cudaMemcpyDeviceToHost, s_));
    KOSMOS_CUDA_CHECK(cudaStreamSynchronize(s_));  // the one host round trip
    auto cnt = [&](int s, int e) { return int64_t(counts_h[s * (E_ + 1) + e]); };
    // Host layout: start[s][e] (row of e's first entry in s's permuted rows), per destination d the
    // expert-major receive rows (group_off), the source-major staging rows (stage_off).
    std::vector<int64_t> start(size_t(W_) * (E_ + 1), 0), gm(E_, 0), goff(E_, 0), stage_off(size_t(W_) * W_, 0), nsd(size_t(W_) * W_, 0);
    for (int s = 0; s < W_; ++s)
      for (int e = 1; e <= E_; ++e) start[s * (E_ + 1) + e] = start[s * (E_ + 1) + e - 1] + cnt(s, e - 1);
    for (int d = 0; d < W_; ++d) {
      int64_t off = base_[d];
      for (int l = 0; l < L_; ++l) {
        const int e = d * L_ + l;
        for (int s = 0; s < W_; ++s) gm[e] += cnt(s, e);
        goff[e] = off;
        off += gm[e];
      }
      KOSMOS_CHECK_CODE(off <= base_[d + 1], StatusCode::kInternal, "cuBLAS baseline: rank ", d, " receives ", off - base_[d],
                        " rows, more than its buffer (", base_[d + 1] - base_[d], ")");
      int64_t so = base_[d];
      for (int s = 0; s < W_; ++s) {
        int64_t m = 0;
        for (int l = 0; l < L_; ++l) m += cnt(s, d * L_ + l);
        stage_off[s * W_ + d] = so;
        nsd[s * W_ + d] = m;
        so += m;
      }
    }
    // Tables: GEMM pointer arrays and regroup chunks (dispatch: staging -> expert-major).
    void** pt = static_cast<void**>(host_);
    void **pa1 = pt, **pb1 = pt + E_, **pc1 = pt + 2 * E_, **pa2 = pt + 3 * E_, **pb2 = pt + 4 * E_, **pc2 = pt + 5 * E_;
    auto* ch_in = reinterpret_cast<CbChunk*>(pt + 6 * E_);
    auto* ch_out = ch_in + size_t(W_) * E_;
    int G = 0, nch = 0;
    mm1_.clear();
    for (int e = 0; e < E_; ++e) {
      if (gm[e] == 0) continue;  // skip empty experts
      const int d = e / L_, l = e % L_;
      pa1[G] = const_cast<__nv_bfloat16*>(gu_[d]) + size_t(l) * H_ * 2 * I_;
      pb1[G] = static_cast<__nv_bfloat16*>(recv_x_) + goff[e] * H_;
      pc1[G] = static_cast<__nv_bfloat16*>(h1_) + goff[e] * 2 * I_;
      pa2[G] = const_cast<__nv_bfloat16*>(dn_[d]) + size_t(l) * I_ * H_;
      pb2[G] = static_cast<__nv_bfloat16*>(act_) + goff[e] * I_;
      pc2[G] = static_cast<__nv_bfloat16*>(out_) + goff[e] * H_;
      mm1_.push_back(int(gm[e]));
      ++G;
      if (W_ > 1) {
        int64_t row = goff[e];
        for (int s = 0; s < W_; ++s) {
          const int64_t c = cnt(s, e);
          if (c == 0) continue;
          const int64_t st = stage_off[s * W_ + d] + (start[s * (E_ + 1) + e] - start[s * (E_ + 1) + d * L_]);
          ch_in[nch] = CbChunk{st, row, c};
          ch_out[nch] = CbChunk{row, st, c};
          ++nch, row += c;
        }
      }
    }
    KOSMOS_CUDA_CHECK(cudaMemcpyAsync(table_, host_, table_bytes_, cudaMemcpyHostToDevice, s_));
    void** dt = static_cast<void**>(table_);
    void **da1 = dt, **db1 = dt + E_, **dc1 = dt + 2 * E_, **da2 = dt + 3 * E_, **db2 = dt + 4 * E_, **dc2 = dt + 5 * E_;
    auto* dch_in = reinterpret_cast<const CbChunk*>(dt + 6 * E_);
    auto* dch_out = dch_in + size_t(W_) * E_;
    // All-to-all (W > 1): one device copy per (source, destination) pair, then the local regroup.
    auto a2a = [&](bool forward) -> Status {
      for (int s = 0; s < W_; ++s)
        for (int d = 0; d < W_; ++d) {
          const int64_t m = nsd[s * W_ + d];
          if (m == 0) continue;
          char* src_rows = static_cast<char*>(send_x_) + (s * tk_ + start[s * (E_ + 1) + d * L_]) * H_ * 2;
          char* stage = static_cast<char*>(forward ? out_ : recv_x_) + stage_off[s * W_ + d] * H_ * 2;
          char* back_rows = static_cast<char*>(back_) + (s * tk_ + start[s * (E_ + 1) + d * L_]) * H_ * 2;
          if (forward) KOSMOS_CUDA_CHECK(cudaMemcpyAsync(stage, src_rows, size_t(m) * H_ * 2, cudaMemcpyDeviceToDevice, s_));
          else KOSMOS_CUDA_CHECK(cudaMemcpyAsync(back_rows, stage, size_t(m) * H_ * 2, cudaMemcpyDeviceToDevice, s_));
        }
      return Status::ok();
    };
    if (W_ > 1) {
      KOSMOS_RETURN_IF_ERROR(a2a(true));  // into out_ (free until GEMM2) as the staging rows
      if (nch > 0)
        cb_chunk_copy<<<dim3(8, nch), 256, 0, s_>>>(dch_in, static_cast<const uint4*>(out_), static_cast<uint4*>(recv_x_), vec);
    }
    const int64_t rows = base_[W_];
    if (G > 0) {
      KOSMOS_RETURN_IF_ERROR(grouped(G, 2 * I_, H_, da1, db1, dc1, mm1_));
      cb_swiglu<<<grid(rows * I_ / 8, 256), 256, 0, s_>>>(static_cast<const uint4*>(h1_), static_cast<uint4*>(act_), rows, I_);
      KOSMOS_RETURN_IF_ERROR(grouped(G, H_, I_, da2, db2, dc2, mm1_));
    }
    if (W_ > 1) {
      if (nch > 0)  // expert-major -> source-major staging (recv_x_ is free after GEMM1)
        cb_chunk_copy<<<dim3(8, nch), 256, 0, s_>>>(dch_out, static_cast<const uint4*>(out_), static_cast<uint4*>(recv_x_), vec);
      KOSMOS_RETURN_IF_ERROR(a2a(false));
    }
    cb_combine<<<grid(int64_t(W_) * T_ * 32, 256), 256, 0, s_>>>(w_, y_ptrs_, ids_, static_cast<const __nv_bfloat16*>(back_),
                                                                i32(inv_), T_, k_, H_, W_, E_);
    KOSMOS_CUDA_CHECK(cudaGetLastError());
    return Status::ok();
  }

  const void* y(int rank) const { return y_ptrs_.p[rank]; }
  std::string describe() const {
    return std::string("keys + cub radix sort + gather permute, counts to host (1 sync), ") +
           (W_ > 1 ? "all-to-all as " + std::to_string(W_ * W_) + " cudaMemcpyAsync D2D + regroup kernel, " : "") +
           "cublasGemmGroupedBatchedEx (bf16, fp32 compute, one problem per non-empty expert), SwiGLU kernel, "
           "cublasGemmGroupedBatchedEx, " +
           (W_ > 1 ? "un-regroup + " + std::to_string(W_ * W_) + " copies back, " : "") +
           "weight scale + un-permute + slot-order sum kernel";
  }

 private:
  static int grid(int64_t threads, int block) { return int(std::clamp<int64_t>((threads + block - 1) / block, 1, 8192)); }
  static int32_t* i32(void* p) { return static_cast<int32_t*>(p); }
  static uint32_t* u32(void* p) { return static_cast<uint32_t*>(p); }
  Status alloc(void** p, int64_t bytes) {
    KOSMOS_CUDA_CHECK(cudaMalloc(p, size_t(std::max<int64_t>(bytes, 16))));
    dev_.push_back(*p);
    bytes_[*p] = size_t(std::max<int64_t>(bytes, 16));
    return Status::ok();
  }
  // Row-major C[M_g, N] = A[M_g, K] · B_g[K, N] per problem g, as column-major Cᵀ = B_gᵀ · Aᵀ.
  Status grouped(int G, int64_t N, int64_t K, const void* const* b_arr, const void* const* a_arr, void* const* c_arr,
                 const std::vector<int>& m) {
    ta_.assign(G, CUBLAS_OP_N);
    mN_.assign(G, int(N));
    kK_.assign(G, int(K));
    ldN_.assign(G, int(N));
    ldK_.assign(G, int(K));
    one_.assign(G, 1);
    alpha_.assign(G, 1.0f);
    beta_.assign(G, 0.0f);
    KOSMOS_CUBLAS_CHECK(cublasGemmGroupedBatchedEx(h_, ta_.data(), ta_.data(), mN_.data(), m.data(), kK_.data(), alpha_.data(),
                                                   b_arr, CUDA_R_16BF, ldN_.data(), a_arr, CUDA_R_16BF, ldK_.data(),
                                                   beta_.data(), c_arr, CUDA_R_16BF, ldN_.data(), G, one_.data(),
                                                   CUBLAS_COMPUTE_32F));
    return Status::ok();
  }

  int W_ = 1, E_ = 1, k_ = 1, L_ = 1, end_bit_ = 1;
  int64_t T_ = 0, H_ = 0, I_ = 0, tk_ = 0;
  cudaStream_t s_ = nullptr;
  cublasHandle_t h_ = nullptr;
  CbPtrs x_{}, ids_{}, w_{};
  CbOutPtrs y_ptrs_{};
  const __nv_bfloat16* gu_[kCbMaxWorld] = {};
  const __nv_bfloat16* dn_[kCbMaxWorld] = {};
  std::vector<int64_t> base_;
  std::vector<void*> dev_;
  std::map<void*, size_t> bytes_;
  void *keys_ = nullptr, *keys_sorted_ = nullptr, *vals_ = nullptr, *vals_sorted_ = nullptr, *inv_ = nullptr, *counts_ = nullptr;
  void *send_x_ = nullptr, *recv_x_ = nullptr, *h1_ = nullptr, *act_ = nullptr, *out_ = nullptr, *back_ = nullptr, *y_ = nullptr;
  void *table_ = nullptr, *sort_tmp_ = nullptr, *ws_ = nullptr, *host_ = nullptr;
  size_t table_bytes_ = 0, sort_bytes_ = 0;
  std::vector<int> mm1_;
  std::vector<cublasOperation_t> ta_;
  std::vector<int> mN_, kK_, ldN_, ldK_, one_;
  std::vector<float> alpha_, beta_;
};

}  // namespace

void add_bench_moe(CLI::App& bench) {
  auto* cmd = bench.add_subcommand("moe", "Fused MoE forward (one launch) on virtual ranks vs the unfused pipeline of our kernels");
  struct Opts {
    std::string model = "deepseek-v3", routing = "uniform", json, trace_svg, dump_routing;
    int world = 1, reps = 20, experts = 0, top_k = 8, gemm2_lag = 0, gemm1_run = 0, gemm2_run = 0, gemm2_n_run = 0, bwd_run = 0, dx_lag = 0, dw_tile = 0;
    int64_t tokens = 4096;
    bool backward = false, skip_cublas = false, phase_times = false, save_activations = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model, "deepseek-v3 (H 7168, I 2048, 32 experts per rank) | qwen3-235b (H 4096, I 1536, E 128)")
      ->check(CLI::IsMember({"deepseek-v3", "qwen3-235b"}));
  cmd->add_option("--tokens", o->tokens, "Tokens per rank (4096 training, 128 decode)")->check(CLI::Range(int64_t(1), int64_t(16384)));
  cmd->add_option("--world", o->world, "Virtual ranks on this GPU")->check(CLI::Range(1, 16));
  cmd->add_option("--routing", o->routing, "uniform | skewed (half the experts empty, p ~ 1/(i+1) over the rest)")
      ->check(CLI::IsMember({"uniform", "skewed"}));
  cmd->add_option("--experts", o->experts, "Override E (total experts)");
  cmd->add_option("--reps", o->reps, "Timed repetitions (median)")->check(CLI::Range(3, 1000));
  cmd->add_option("--json", o->json, "Write results as JSON here");
  cmd->add_option("--trace-svg", o->trace_svg, "Record a trace of one fused run and write it as SVG");
  cmd->add_flag("--backward", o->backward, "Benchmark the backward pass (world <= 8) instead of the forward");
  cmd->add_flag("--save-activations", o->save_activations,
                "With --backward: training mode -- the forward keeps x rows and GEMM1's pre-activation, the backward "
                "moves only dy and skips the h1 recompute (also times that forward and the step)");
  cmd->add_option("--dump-routing", o->dump_routing,
                  "Write the routing (per rank ids [T,k], weights [T,k]) and shapes as JSON here (no GPU needed)");
  cmd->add_option("--gemm2-lag", o->gemm2_lag,
                  "Forward claim order: queue each GEMM2 step this many GEMM1 steps after its inputs (0: chosen; "
                  "a large value: all GEMM2 after all GEMM1)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--gemm1-run", o->gemm1_run, "Forward: worst-case slots per GEMM1 task (0: chosen with the claim groups; set: one run per claim group)")->check(CLI::Range(0, 16));
  cmd->add_option("--gemm2-run", o->gemm2_run, "Forward: worst-case slots per GEMM2 task (0: chosen)")->check(CLI::Range(0, 16));
  cmd->add_option("--gemm2-n-run", o->gemm2_n_run, "Forward: GEMM2 tiles per task along N, with one-slot GEMM2 runs (0: chosen)")
      ->check(CLI::Range(0, 16));
  cmd->add_option("--bwd-run", o->bwd_run, "Backward: worst-case slots per H1 / dA' / dX task (0: chosen)")
      ->check(CLI::Range(0, 16));
  cmd->add_option("--dx-lag", o->dx_lag,
                  "Backward claim order: queue a step's dX tiles this many steps after its swiglu_backward (0: chosen)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--dw-tile", o->dw_tile,
                  "Backward: output tile width of the weight-gradient GEMMs (256, 128 or 64; 0: chosen)")
      ->check(CLI::IsMember({0, 64, 128, 256}));
  cmd->add_flag("--phase-times", o->phase_times,
                "Also time each launch of the unfused composition alone (median of --reps), to see which phase the "
                "fused launch gains or loses");
  cmd->add_flag("--skip-cublas", o->skip_cublas, "Forward: leave out the cuBLAS grouped-GEMM pipeline (saves its memory)");
  cmd->callback([o] {
    const MoeModel md = kMoeModels.at(o->model);
    MoeConfig cfg;
    cfg.world = o->world;
    cfg.tokens = o->tokens;
    cfg.hidden = md.hidden;
    cfg.intermediate = md.intermediate;
    cfg.num_experts = o->experts > 0 ? o->experts : md.fixed_experts > 0 ? md.fixed_experts : md.experts_per_rank * o->world;
    cfg.top_k = o->top_k;
    cfg.trace = !o->trace_svg.empty();
    if (cfg.trace)  // the runners record a trace on every fused run: the timed ones too
      std::fprintf(stderr, "[bench moe] --trace-svg: every fused run records its trace, so the times include tracing\n");
    cfg.backward = o->backward;
    if (o->save_activations && !o->backward)
      throw Error(Status(StatusCode::kInvalidArgument, "bench moe: --save-activations needs --backward"));
    cfg.save_activations = o->save_activations;
    cfg.gemm2_lag = o->gemm2_lag;
    cfg.gemm1_run = o->gemm1_run;
    cfg.gemm2_run = o->gemm2_run;
    cfg.gemm2_n_run = o->gemm2_n_run;
    cfg.backward_run = o->bwd_run;
    cfg.backward_dx_lag = o->dx_lag;
    cfg.backward_dw_tile_n = o->dw_tile;
    const int W = cfg.world, E = cfg.num_experts, k = cfg.top_k;
    const int64_t T = cfg.tokens, H = cfg.hidden, I = cfg.intermediate;
    if (E < 1 || E % W != 0)
      throw Error(Status(StatusCode::kInvalidArgument, "bench moe: E = " + std::to_string(E) + " is not a positive multiple of the world"));
    // Routing on the host (before any GPU work, so --dump-routing needs no GPU; same RNG sequence
    // as before this was moved).
    std::mt19937_64 rng(7);
    std::vector<double> p(E, 1.0);
    if (o->routing == "skewed")
      for (int e = 0; e < E; ++e) p[e] = e < std::max(1, E / 2) ? 1.0 / (e + 1) : 0.0;
    std::discrete_distribution<int> pick(p.begin(), p.end());
    std::uniform_real_distribution<float> uw(0.05f, 1.0f);
    std::vector<int32_t> ids0;
    std::vector<float> w0;
    std::vector<int64_t> rows_per_rank(W, 0);
    std::vector<std::vector<int32_t>> all_ids(W);
    std::vector<std::vector<float>> all_w(W);
    for (int r = 0; r < W; ++r) {
      std::vector<int32_t> ids(size_t(T) * k);
      std::vector<float> w(ids.size());
      for (size_t i = 0; i < ids.size(); ++i) {
        // distinct experts per token when possible (as a top-k router picks them)
        int e = pick(rng);
        for (int tries = 0; tries < 64; ++tries) {
          bool dup = false;
          for (size_t j = i - i % k; j < i; ++j) dup |= ids[j] == e;
          if (!dup) break;
          e = pick(rng);
        }
        ids[i] = e;
        w[i] = uw(rng);
        rows_per_rank[e / (E / W)]++;
      }
      all_ids[r] = std::move(ids);
      all_w[r] = std::move(w);
    }
    ids0 = all_ids[0];
    w0 = all_w[0];
    // The layer's shape and routing, as every JSON this bench writes names them.
    auto put_shape = [&](nlohmann::json& j) {
      j["model"] = o->model;
      j["world"] = W;
      j["tokens"] = T;
      j["hidden"] = H;
      j["intermediate"] = I;
      j["experts"] = E;
      j["top_k"] = k;
      j["routing"] = o->routing;
    };
    if (!o->dump_routing.empty()) {
      nlohmann::json j;
      j["format"] = "kosmos-moe-routing-v1";
      j["command"] = command_line();
      put_shape(j);
      j["local_experts"] = E / W;
      j["gate_up_layout"] = "[E/W, H, 2I] per rank, gate/up interleaved in blocks of 8 columns";
      j["down_layout"] = "[E/W, I, H] per rank";
      j["rows_per_rank"] = rows_per_rank;
      nlohmann::json ranks = nlohmann::json::array();
      for (int r = 0; r < W; ++r) ranks.push_back({{"rank", r}, {"ids", all_ids[r]}, {"weights", all_w[r]}});
      j["ranks"] = std::move(ranks);
      throw_if_error(write_json(o->dump_routing, j));
      std::fprintf(stderr, "[bench moe] routing written to %s\n", o->dump_routing.c_str());
    }
    if (!gpu_available()) {
      if (!o->dump_routing.empty()) {
        std::fprintf(stderr, "[bench moe] no Hopper GPU visible: routing dumped, nothing timed\n");
        return;
      }
      throw Error(Status(StatusCode::kUnavailable, "bench moe needs a Hopper GPU (none visible)"));
    }
    std::fprintf(stderr, "[bench moe]%s %s W=%d T=%ld H=%ld I=%ld E=%d k=%d %s: planning...\n", o->backward ? " backward" : "", o->model.c_str(), cfg.world,
                 cfg.tokens, cfg.hidden, cfg.intermediate, cfg.num_experts, cfg.top_k, o->routing.c_str());
    std::unique_ptr<MoeLayer> L;
    throw_if_error(MoeLayer::plan(cfg, &L));
    // Inputs: weights and x on the device (hash RNG), routing from the host.
    for (int r = 0; r < W; ++r) {
      fill_bf16<<<1024, 256>>>(static_cast<__nv_bfloat16*>(L->buffer(MoeBuffer::kX, r)), size_t(T * H), 101 + r, 1.0f);
      fill_bf16<<<1024, 256>>>(static_cast<__nv_bfloat16*>(L->buffer(MoeBuffer::kGateUp, r)), L->buffer_bytes(MoeBuffer::kGateUp) / 2,
                               202 + r, 2.0f / std::sqrt(float(H)));
      fill_bf16<<<1024, 256>>>(static_cast<__nv_bfloat16*>(L->buffer(MoeBuffer::kDown, r)), L->buffer_bytes(MoeBuffer::kDown) / 2,
                               303 + r, 2.0f / std::sqrt(float(I)));
      if (cudaMemcpy(L->buffer(MoeBuffer::kIds, r), all_ids[r].data(), all_ids[r].size() * 4, cudaMemcpyHostToDevice) != cudaSuccess ||
          cudaMemcpy(L->buffer(MoeBuffer::kWeights, r), all_w[r].data(), all_w[r].size() * 4, cudaMemcpyHostToDevice) != cudaSuccess)
        throw Error(Status(StatusCode::kCudaError, "upload routing"));
    }
    if (o->backward)
      for (int r = 0; r < W; ++r)
        fill_bf16<<<1024, 256>>>(static_cast<__nv_bfloat16*>(L->buffer(MoeBuffer::kDy, r)), size_t(T * H), 404 + r, 1.0f);
    if (cudaDeviceSynchronize() != cudaSuccess) throw Error(Status(StatusCode::kCudaError, "input fill failed"));
    // The keys every MoE result carries (forward and backward).
    auto result_json = [&](const char* bench, double t_fused, double t_unfused) {
      nlohmann::json j = run_metadata(command_line());
      j["bench"] = bench;
      put_shape(j);
      j["transport"] = "local virtual ranks (device stores between ranks' buffers)";
      j["plan"] = L->describe();
      j["fused_ms"] = t_fused;
      j["unfused_ms"] = t_unfused;
      j["speedup_vs_unfused"] = t_unfused / t_fused;
      return j;
    };
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    // --trace-svg: one more fused run, its timeline as SVG and where its time went by task label.
    auto trace_one_run = [&](bool backward) {
      throw_if_error(backward ? L->run_backward_composition(true, s) : L->run_composition(true, s));
      throw_if_error(L->finish(s));
      std::vector<runtime::TraceRecord> tr;
      throw_if_error(L->read_trace(&tr, backward));
      int dev = 0, sms = 0;
      cudaGetDevice(&dev);
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
      std::printf("%s", trace_breakdown(tr, L->task_labels(backward), sms).c_str());
      throw_if_error(runtime::write_trace_files(tr, std::string("kosmos moe ") + (backward ? "backward " : "forward ") + o->model +
                                                        " W=" + std::to_string(W) + " T=" + std::to_string(T) +
                                                        " (virtual ranks, one H200)",
                                                "", o->trace_svg));
    };
    // --phase-times: each launch of the unfused composition alone, median of --reps (inputs are
    // what the full runs before left in the buffers; every phase reads and writes the same bytes
    // each time), as [{phase, ms}] for the JSON; print_phases adds a line under the table.
    auto time_phases = [&](bool backward) {
      nlohmann::json out = nlohmann::json::array();
      const std::vector<std::string>& names = L->phase_names(backward);
      for (size_t i = 0; i < names.size(); ++i) {
        double ms = 0;
        throw_if_error(time_median_ms(s, o->reps, [&] { return L->run_phase(i, backward, s); }, &ms));
        throw_if_error(L->finish(s));
        out.push_back({{"phase", names[i]}, {"ms", ms}});
      }
      return out;
    };
    auto print_phases = [&](const nlohmann::json& phases) {
      if (phases.is_null()) return;
      double sum = 0;
      std::printf("  unfused, each launch alone (median of %d):", o->reps);
      for (const auto& p : phases) {
        std::printf(" %s %.3f;", p["phase"].get<std::string>().c_str(), p["ms"].get<double>());
        sum += p["ms"].get<double>();
      }
      std::printf(" sum %.3f ms\n", sum);
    };
    if (o->backward) {
      if (cfg.save_activations) {  // the backward reads what this forward saves
        std::fprintf(stderr, "[bench moe] forward (saving activations)...\n");
        throw_if_error(L->run_composition(true, s));
        throw_if_error(L->finish(s));
      }
      std::fprintf(stderr, "[bench moe] backward: verifying...\n");
      auto poison_grads = [&] {
        for (int r = 0; r < W; ++r)
          for (MoeBuffer b : {MoeBuffer::kDx, MoeBuffer::kDWeights, MoeBuffer::kDGateUp, MoeBuffer::kDDown})
            poison_on(s, L->buffer(b, r), L->buffer_bytes(b));
      };
      poison_grads();
      throw_if_error(L->run_backward_composition(false, s));
      throw_if_error(L->finish(s));
      std::vector<std::vector<uint8_t>> unf, fus;
      throw_if_error(download_grads(*L, &unf));
      poison_grads();
      throw_if_error(L->run_backward_composition(true, s));
      throw_if_error(L->finish(s));
      throw_if_error(download_grads(*L, &fus));
      const bool bitwise = fus == unf;
      // Every bf16 output finite (0xFFFF poison is NaN), unfused and fused; the message names the
      // tensor, rank, count and first element (row, column) so a failure points at a task.
      for (const auto* set : {&unf, &fus}) {
        const char* which = set == &unf ? "unfused" : "fused";
        static const char* kNames[4] = {"dx", "d_weights", "d_gate_up", "d_down"};
        const int64_t cols[4] = {H, k, 2 * I, H};
        for (size_t i = 0; i < set->size(); i += 4)
          for (size_t q : {size_t(0), size_t(2), size_t(3)}) {
            const std::string bad = non_finite_bf16(reinterpret_cast<const uint16_t*>((*set)[i + q].data()),
                                                    (*set)[i + q].size() / 2, cols[q]);
            if (!bad.empty())
              throw Error(Status(StatusCode::kInternal, std::string(which) + " backward output is not finite: " + kNames[q] +
                                                            " of rank " + std::to_string(i / 4) + ", " + bad));
          }
      }
      double num = 0, den = 0;
      const auto* dx0 = reinterpret_cast<const uint16_t*>(fus[0].data());
      const auto* dw0 = reinterpret_cast<const float*>(fus[1].data());
      for (int64_t t : {int64_t(0), T / 2, T - 1}) {
        std::vector<double> rdx, rdw;
        throw_if_error(reference_token_backward(*L, t, ids0, w0, &rdx, &rdw));
        for (int64_t h = 0; h < H; ++h) {
          const double v = kernels::gemm::bf16_to_float(dx0[t * H + h]);
          num += (v - rdx[h]) * (v - rdx[h]);
          den += rdx[h] * rdx[h];
        }
        for (int j = 0; j < k; ++j) {
          num += (dw0[t * k + j] - rdw[j]) * (dw0[t * k + j] - rdw[j]);
          den += rdw[j] * rdw[j];
        }
      }
      const double rel = std::sqrt(num / std::max(den, 1e-30));
      if (!bitwise) throw Error(Status(StatusCode::kInternal, "fused backward differs from the unfused composition"));
      if (!(rel < 2e-2)) throw Error(Status(StatusCode::kInternal, "fused backward vs fp64: relative error " + std::to_string(rel)));
      std::fprintf(stderr, "[bench moe] backward: timing...\n");
      std::vector<double> med;  // fused and unfused alternate (bench_timing.h)
      throw_if_error(time_median_interleaved_ms(s, o->reps,
                                                {[&](int) { return L->run_backward_composition(true, s); },
                                                 [&](int) { return L->run_backward_composition(false, s); }},
                                                &med));
      throw_if_error(L->finish(s));
      const double t_fused = med[0], t_unfused = med[1];
      double t_forward = 0;  // --save-activations: the saving forward, timed after the backward (it rewrites what it saved)
      if (cfg.save_activations) {
        throw_if_error(time_median_ms(s, o->reps, [&] { return L->run_composition(true, s); }, &t_forward));
        throw_if_error(L->finish(s));
      }
      const nlohmann::json phases = o->phase_times ? time_phases(true) : nlohmann::json();
      const double rows = double(W) * T * k;
      const double gemm1 = 2.0 * rows * double(H) * 2 * I, gemm2 = 2.0 * rows * double(I) * H;
      // dX + dGU, dA' + dD, and the recomputed h1 unless the forward saved it
      const double flops = 2.0 * (gemm1 + gemm2) + (cfg.save_activations ? 0.0 : gemm1);
      std::printf("moe backward %s W=%d T=%ld H=%ld I=%ld E=%d k=%d routing=%s (virtual ranks on one GPU)\n", o->model.c_str(), W,
                  T, H, I, E, k, o->routing.c_str());
      std::printf("  %s\n", L->describe().c_str());
      std::printf("  %-46s %10s %10s %10s\n", "variant", "ms", "TFLOP/s", "x fused");
      auto line = [&](const char* name, double ms) {
        std::printf("  %-46s %10.3f %10.1f %10.3f\n", name, ms, flops / (ms * 1e-3) / 1e12, ms / t_fused);
      };
      line("fused backward (kosmos, one launch)", t_fused);
      const std::string unfused_name =
          "unfused backward (same kernels, " + std::to_string(L->phase_names(true).size()) + " launches)";
      line(unfused_name.c_str(), t_unfused);
      if (cfg.save_activations) {
        std::printf("  %-46s %10.3f %10.1f\n", "forward saving activations (one launch)", t_forward,
                    (gemm1 + gemm2) / (t_forward * 1e-3) / 1e12);
        std::printf("  %-46s %10.3f %10.1f\n", "training step: that forward + fused backward", t_forward + t_fused,
                    3.0 * (gemm1 + gemm2) / ((t_forward + t_fused) * 1e-3) / 1e12);
      }
      std::printf("  bitwise fused==unfused (dx, d_weights, dGateUp, dDown of every rank): %s; rel.err of dx, d_weights vs "
                  "fp64 (3 tokens of rank 0) %.2e\n",
                  bitwise ? "yes" : "no", rel);
      print_phases(phases);
      if (!o->trace_svg.empty()) trace_one_run(true);
      if (!o->json.empty()) {
        nlohmann::json j = result_json("moe_backward", t_fused, t_unfused);
        j["flops"] = flops;
        j["fused_tflops"] = flops / (t_fused * 1e-3) / 1e12;
        j["unfused_tflops"] = flops / (t_unfused * 1e-3) / 1e12;
        j["bitwise_fused_eq_unfused"] = bitwise;
        j["save_activations"] = cfg.save_activations;
        if (cfg.save_activations) {
          j["forward_saving_ms"] = t_forward;
          j["step_ms"] = t_forward + t_fused;
        }
        j["rel_err_vs_fp64"] = rel;
        j["trace_enabled"] = cfg.trace;
        if (o->phase_times) j["unfused_phase_ms"] = phases;
        throw_if_error(write_json(o->json, j));
      }
      cudaStreamDestroy(s);
      return;
    }

    std::fprintf(stderr, "[bench moe] verifying...\n");
    auto poison_y = [&] {
      for (int r = 0; r < W; ++r) poison_on(s, L->buffer(MoeBuffer::kY, r), L->buffer_bytes(MoeBuffer::kY));
    };
    poison_y();
    throw_if_error(L->run_composition(false, s));
    throw_if_error(L->finish(s));
    std::vector<uint16_t> y_unfused, y_fused;
    std::vector<std::vector<uint16_t>> unf(W);
    for (int r = 0; r < W; ++r) throw_if_error(download(L->buffer(MoeBuffer::kY, r), size_t(T * H), 0, &unf[r]));
    poison_y();
    throw_if_error(L->run_composition(true, s));
    throw_if_error(L->finish(s));
    bool bitwise = true;
    for (int r = 0; r < W; ++r) {
      std::vector<uint16_t> yf;
      throw_if_error(download(L->buffer(MoeBuffer::kY, r), size_t(T * H), 0, &yf));
      bitwise &= yf == unf[r];
      if (const std::string bad = non_finite_bf16(yf.data(), yf.size(), H); !bad.empty())
        throw Error(Status(StatusCode::kInternal, "fused output y of rank " + std::to_string(r) + " is not finite: " + bad));
      if (r == 0) y_fused = yf;
    }
    double num = 0, den = 0;
    for (int64_t t : {int64_t(0), T / 2, T - 1}) {
      std::vector<double> ref;
      throw_if_error(reference_token(*L, t, ids0, w0, &ref));
      for (int64_t h = 0; h < H; ++h) {
        const double v = kernels::gemm::bf16_to_float(y_fused[t * H + h]);
        if (!std::isfinite(v)) throw Error(Status(StatusCode::kInternal, "fused output is not finite"));
        num += (v - ref[h]) * (v - ref[h]);
        den += ref[h] * ref[h];
      }
    }
    const double rel = std::sqrt(num / std::max(den, 1e-30));
    if (!bitwise) throw Error(Status(StatusCode::kInternal, "fused differs from the unfused composition"));
    if (!(rel < 2e-2)) throw Error(Status(StatusCode::kInternal, "fused vs fp64 reference: relative error " + std::to_string(rel)));

    // Third variant: the unfused pipeline from standard pieces (cuBLAS grouped GEMMs), verified
    // against the fused output (relative Frobenius error over every rank's y), then timed with the
    // other two.
    double t_cublas = 0, rel_cublas = 0;
    std::string cublas_desc;
    CublasGroupedMoe cb;
    if (!o->skip_cublas) {
      std::fprintf(stderr, "[bench moe] cuBLAS grouped pipeline: verifying...\n");
      throw_if_error(cb.init(*L, rows_per_rank, s));
      throw_if_error(cb.poison());
      throw_if_error(cb.run());
      if (cudaStreamSynchronize(s) != cudaSuccess) throw Error(Status(StatusCode::kCudaError, "cuBLAS grouped pipeline failed"));
      double cn = 0, cd = 0;
      for (int r = 0; r < W; ++r) {
        std::vector<uint16_t> yc;
        throw_if_error(download(cb.y(r), size_t(T * H), 0, &yc));
        for (size_t i = 0; i < yc.size(); ++i) {
          const double a = kernels::gemm::bf16_to_float(yc[i]), b = kernels::gemm::bf16_to_float(unf[r][i]);
          if (!std::isfinite(a)) throw Error(Status(StatusCode::kInternal, "cuBLAS grouped pipeline output is not finite (rank " +
                                                                              std::to_string(r) + ", element " + std::to_string(i) + ")"));
          cn += (a - b) * (a - b);
          cd += b * b;
        }
      }
      rel_cublas = std::sqrt(cn / std::max(cd, 1e-30));
      if (!(rel_cublas < 2e-2))
        throw Error(Status(StatusCode::kInternal, "cuBLAS grouped pipeline vs fused: relative error " + std::to_string(rel_cublas)));
      std::fprintf(stderr, "[bench moe] cuBLAS grouped pipeline: rel.err vs fused %.2e\n", rel_cublas);
      cublas_desc = cb.describe();
    }
    // The variants alternate repetition by repetition (bench_timing.h: timed one after the other,
    // the last one ran on a hotter card -- until the ninth session that was the cuBLAS pipeline).
    std::fprintf(stderr, "[bench moe] timing...\n");
    std::vector<std::function<Status(int)>> variants = {[&](int) { return L->run_composition(true, s); },
                                                        [&](int) { return L->run_composition(false, s); }};
    if (!o->skip_cublas) variants.push_back([&](int) { return cb.run(); });
    std::vector<double> med;
    throw_if_error(time_median_interleaved_ms(s, o->reps, variants, &med));
    throw_if_error(L->finish(s));
    if (cudaStreamSynchronize(s) != cudaSuccess) throw Error(Status(StatusCode::kCudaError, "cuBLAS grouped pipeline failed"));
    const double t_fused = med[0], t_unfused = med[1];
    if (!o->skip_cublas) t_cublas = med[2];
    const nlohmann::json phases = o->phase_times ? time_phases(false) : nlohmann::json();
    const double weight_bytes = double(W) * (L->buffer_bytes(MoeBuffer::kGateUp) + L->buffer_bytes(MoeBuffer::kDown));
    const double floor_ms = weight_bytes / 4.2e12 * 1e3;
    const double flops = 2.0 * double(W) * T * k * (double(H) * 2 * I + double(I) * H);
    const int64_t max_rows = *std::max_element(rows_per_rank.begin(), rows_per_rank.end());
    std::printf("moe %s W=%d T=%ld H=%ld I=%ld E=%d k=%d routing=%s (virtual ranks on one GPU)\n", o->model.c_str(), W, T, H, I, E,
                k, o->routing.c_str());
    std::printf("  %s\n", L->describe().c_str());
    std::printf("  rows received: max %ld per rank (worst-case buffers %ld)\n", max_rows, int64_t(W) * T * k);
    std::printf("  %-46s %10s %10s %10s\n", "variant", "ms", "TFLOP/s", "x fused");
    auto line = [&](const char* name, double ms) {
      std::printf("  %-46s %10.3f %10.1f %10.3f\n", name, ms, flops / (ms * 1e-3) / 1e12, ms / t_fused);
    };
    line("fused (kosmos, one launch)", t_fused);
    line("unfused (same kernels, 6 launches)", t_unfused);
    if (!o->skip_cublas) line("unfused: cub permute + cuBLAS grouped GEMMs", t_cublas);
    std::printf("  weight-read floor %.3f ms (%.2f GB / 4.2 TB/s): fused at %.2fx the floor; bitwise fused==unfused: %s; "
                "rel.err vs fp64 (3 tokens of rank 0) %.2e\n",
                floor_ms, weight_bytes / 1e9, t_fused / floor_ms, bitwise ? "yes" : "no", rel);
    if (!o->skip_cublas)
      std::printf("  cuBLAS grouped pipeline: %s; rel.err vs fused (y of every rank) %.2e; fused speedup over it %.3fx\n",
                  cublas_desc.c_str(), rel_cublas, t_cublas / t_fused);
    print_phases(phases);
    if (!o->trace_svg.empty()) trace_one_run(false);
    if (!o->json.empty()) {
      nlohmann::json j = result_json("moe", t_fused, t_unfused);
      j["fused_tflops"] = flops / (t_fused * 1e-3) / 1e12;
      j["weight_bytes"] = weight_bytes;
      j["weight_floor_ms"] = floor_ms;
      j["fused_over_floor"] = t_fused / floor_ms;
      j["max_rows_per_rank"] = max_rows;
      j["bitwise_fused_eq_unfused"] = bitwise;
      j["rel_err_vs_fp64"] = rel;
      j["trace_enabled"] = cfg.trace;
      if (o->phase_times) j["unfused_phase_ms"] = phases;
      if (!o->skip_cublas) {
        j["cublas_grouped_ms"] = t_cublas;
        j["cublas_grouped_tflops"] = flops / (t_cublas * 1e-3) / 1e12;
        j["speedup_vs_cublas_grouped"] = t_cublas / t_fused;
        j["cublas_grouped_rel_err_vs_fused"] = rel_cublas;
        j["cublas_grouped_pipeline"] = cublas_desc;
      }
      throw_if_error(write_json(o->json, j));
    }
    cudaStreamDestroy(s);
  });
}

}  // namespace kosmos::cli
