// The unfused MoE forward from standard pieces (moe_cublas_pipeline.h).
#include "moe_cublas_pipeline.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cub/device/device_radix_sort.cuh>

#include <algorithm>

#include "bench_nccl.h"
#include "kosmos/cuda_check.h"

namespace kosmos::cli {

namespace {

constexpr int kMaxLocal = CublasGroupedMoe::kMaxWorld;
struct CbPtrs {
  const void* p[kMaxLocal];
};
struct CbOutPtrs {
  void* p[kMaxLocal];
};
struct CbChunk {
  int64_t src, dst;  // rows
  int64_t rows;
};

// Over the slots of the S sources in this process (source s: slots s * tk ..).
__global__ void cb_keys(CbPtrs ids, int E, int64_t tk, int S, uint32_t* keys, int32_t* vals, int32_t* counts) {
  const int64_t n = tk * S;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int s = int(i / tk);
    const int e0 = static_cast<const int32_t*>(ids.p[s])[i - s * tk];
    const int e = (e0 >= 0 && e0 < E) ? e0 : E;
    keys[i] = uint32_t(s * (E + 1) + e);
    vals[i] = int32_t(i);
    atomicAdd(&counts[s * (E + 1) + e], 1);
  }
}

// One warp per permuted row p: send_x[p] = x_s[t], inv[slot] = p (local to the source).
__global__ void cb_permute(CbPtrs x, int64_t H, int k, int64_t tk, int S, int E, const uint32_t* keys_sorted,
                           const int32_t* vals_sorted, uint4* send_x, int32_t* inv) {
  const int64_t n = tk * S, vec = H / 8;
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

// One warp per token of the S sources: lanes stride over 8-column groups; slots summed in order
// j = 0..k-1 in fp32.
__global__ void cb_combine(CbPtrs w, CbOutPtrs y, CbPtrs ids, const __nv_bfloat16* back, const int32_t* inv, int64_t T, int k,
                           int64_t H, int S, int E) {
  const int lane = threadIdx.x % 32;
  const int64_t tk = T * k;
  for (int64_t g = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32; g < T * S; g += int64_t(gridDim.x) * blockDim.x / 32) {
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

int grid(int64_t threads, int block) { return int(std::clamp<int64_t>((threads + block - 1) / block, 1, 8192)); }
int32_t* i32(void* p) { return static_cast<int32_t*>(p); }
uint32_t* u32(void* p) { return static_cast<uint32_t*>(p); }
template <class T>
T* rows_at(void* base, int64_t row, int64_t cols) {
  return static_cast<T*>(base) + row * cols;
}

CbPtrs ptrs(const void* const* p, int n) {
  CbPtrs c{};
  for (int i = 0; i < n; ++i) c.p[i] = p[i];
  return c;
}

}  // namespace

CublasGroupedMoe::~CublasGroupedMoe() {
  if (h_) cublasDestroy(h_);
  for (void* p : dev_) cudaFree(p);
  if (host_) cudaFreeHost(host_);
}

Status CublasGroupedMoe::alloc(void** p, int64_t bytes) {
  KOSMOS_CUDA_CHECK(cudaMalloc(p, size_t(std::max<int64_t>(bytes, 16))));
  dev_.push_back(*p);
  bytes_[*p] = size_t(std::max<int64_t>(bytes, 16));
  return Status::ok();
}

Status CublasGroupedMoe::init(const MoeLayer& layer, const std::vector<int64_t>& rows_per_rank, cudaStream_t s, ncclComm_t comm,
                              int rank) {
  const MoeConfig& c = layer.config();
  W_ = c.world, E_ = c.num_experts, k_ = c.top_k, T_ = c.tokens, H_ = c.hidden, I_ = c.intermediate, L_ = E_ / W_;
  s_ = s;
  comm_ = comm;
  r0_ = comm ? rank : 0;
  nr_ = comm ? 1 : W_;
  KOSMOS_CHECK(nr_ <= kMaxWorld, "cuBLAS baseline: at most ", kMaxWorld, " virtual ranks in one process, got ", nr_);
  KOSMOS_CHECK(r0_ >= 0 && r0_ + nr_ <= W_, "cuBLAS baseline: rank ", rank, " outside the world of ", W_);
  KOSMOS_CHECK(int64_t(rows_per_rank.size()) == W_, "cuBLAS baseline: rows_per_rank has ", rows_per_rank.size(), " entries for W = ", W_);
  tk_ = T_ * k_;
  base_.assign(W_ + 1, 0);
  for (int d = 0; d < W_; ++d) base_[d + 1] = base_[d] + rows_per_rank[d];
  row0_ = base_[r0_];
  const int64_t R = std::max<int64_t>(base_[r0_ + nr_] - row0_, 1), n = tk_ * nr_;
  for (int i = 0; i < nr_; ++i) {
    const int r = r0_ + i;
    x_[i] = layer.buffer(MoeBuffer::kX, r);
    ids_[i] = layer.buffer(MoeBuffer::kIds, r);
    w_[i] = layer.buffer(MoeBuffer::kWeights, r);
    gu_[i] = layer.buffer(MoeBuffer::kGateUp, r);
    dn_[i] = layer.buffer(MoeBuffer::kDown, r);
  }
  KOSMOS_RETURN_IF_ERROR(alloc(&keys_, n * 4));
  KOSMOS_RETURN_IF_ERROR(alloc(&keys_sorted_, n * 4));
  KOSMOS_RETURN_IF_ERROR(alloc(&vals_, n * 4));
  KOSMOS_RETURN_IF_ERROR(alloc(&vals_sorted_, n * 4));
  KOSMOS_RETURN_IF_ERROR(alloc(&inv_, n * 4));
  KOSMOS_RETURN_IF_ERROR(alloc(&counts_, int64_t(nr_) * (E_ + 1) * 4));
  if (comm_) KOSMOS_RETURN_IF_ERROR(alloc(&counts_all_, int64_t(W_) * (E_ + 1) * 4));
  else counts_all_ = counts_;  // every rank's counts are computed here
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
  KOSMOS_RETURN_IF_ERROR(alloc(&y_, int64_t(nr_) * T_ * H_ * 2));
  for (int i = 0; i < nr_; ++i) y_ptrs_[i] = rows_at<char>(y_, int64_t(i) * T_, H_ * 2);
  // Device side of the per-run tables: 6 pointer arrays of E entries, 2 x W·E chunks.
  table_bytes_ = size_t(6) * E_ * sizeof(void*) + size_t(2) * W_ * E_ * sizeof(CbChunk);
  KOSMOS_RETURN_IF_ERROR(alloc(&table_, int64_t(table_bytes_)));
  KOSMOS_CUDA_CHECK(cudaMallocHost(&host_, table_bytes_ + size_t(W_) * (E_ + 1) * 4));
  end_bit_ = 1;
  while ((int64_t(1) << end_bit_) < int64_t(nr_) * (E_ + 1)) ++end_bit_;
  KOSMOS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes_, u32(keys_), u32(keys_sorted_), i32(vals_),
                                                    i32(vals_sorted_), int(n), 0, end_bit_, s_));
  KOSMOS_RETURN_IF_ERROR(alloc(&sort_tmp_, int64_t(sort_bytes_)));
  KOSMOS_CUBLAS_CHECK(cublasCreate(&h_));
  KOSMOS_CUBLAS_CHECK(cublasSetStream(h_, s_));  // before the workspace: SetStream resets it
  KOSMOS_RETURN_IF_ERROR(alloc(&ws_, 64 << 20));
  KOSMOS_CUBLAS_CHECK(cublasSetWorkspace(h_, ws_, 64 << 20));
  return Status::ok();
}

Status CublasGroupedMoe::poison() {
  for (void* p : {h1_, act_, out_, send_x_}) KOSMOS_CUDA_CHECK(cudaMemsetAsync(p, 0xFF, bytes_[p], s_));
  if (W_ > 1)
    for (void* p : {recv_x_, back_}) KOSMOS_CUDA_CHECK(cudaMemsetAsync(p, 0xFF, bytes_[p], s_));
  KOSMOS_CUDA_CHECK(cudaMemsetAsync(y_, 0xFF, bytes_[y_], s_));
  return Status::ok();
}

// start[s (E + 1) + e]: row of expert e's first entry in source s's permuted rows; stage_off[s W + d]:
// first staging row (global receive-row numbering) of s's rows at destination d; nsd[s W + d]: their count.
Status CublasGroupedMoe::all_to_all(bool forward, const std::vector<int64_t>& start, const std::vector<int64_t>& stage_off,
                                    const std::vector<int64_t>& nsd) {
  const size_t row_bytes = size_t(H_) * 2;
  auto send_rows = [&](int s, int d) { return rows_at<char>(send_x_, (s - r0_) * tk_ + start[size_t(s) * (E_ + 1) + d * L_], row_bytes); };
  auto back_rows = [&](int s, int d) { return rows_at<char>(back_, (s - r0_) * tk_ + start[size_t(s) * (E_ + 1) + d * L_], row_bytes); };
  // forward: the staging rows are out_'s (free until GEMM2); backward: recv_x_'s (free after GEMM1)
  auto stage_rows = [&](int s, int d) { return rows_at<char>(forward ? out_ : recv_x_, stage_off[size_t(s) * W_ + d] - row0_, row_bytes); };
  if (!comm_) {  // virtual ranks: one device copy per (source, destination) pair
    for (int s = 0; s < W_; ++s)
      for (int d = 0; d < W_; ++d) {
        const size_t bytes = size_t(nsd[size_t(s) * W_ + d]) * row_bytes;
        if (bytes == 0) continue;
        if (forward) KOSMOS_CUDA_CHECK(cudaMemcpyAsync(stage_rows(s, d), send_rows(s, d), bytes, cudaMemcpyDeviceToDevice, s_));
        else KOSMOS_CUDA_CHECK(cudaMemcpyAsync(back_rows(s, d), stage_rows(s, d), bytes, cudaMemcpyDeviceToDevice, s_));
      }
    return Status::ok();
  }
  const int r = r0_;  // one rank per process: send / receive pairs with every rank (itself included)
  KOSMOS_NCCL_BENCH_CHECK(ncclGroupStart());
  for (int p = 0; p < W_; ++p) {
    const size_t out_rows = size_t(nsd[size_t(r) * W_ + p]), in_rows = size_t(nsd[size_t(p) * W_ + r]);
    if (forward) {  // my rows for p's experts; p's rows for mine
      if (out_rows) KOSMOS_NCCL_BENCH_CHECK(ncclSend(send_rows(r, p), out_rows * H_, ncclBfloat16, p, comm_, s_));
      if (in_rows) KOSMOS_NCCL_BENCH_CHECK(ncclRecv(stage_rows(p, r), in_rows * H_, ncclBfloat16, p, comm_, s_));
    } else {  // p's results back to p; my results from p
      if (in_rows) KOSMOS_NCCL_BENCH_CHECK(ncclSend(stage_rows(p, r), in_rows * H_, ncclBfloat16, p, comm_, s_));
      if (out_rows) KOSMOS_NCCL_BENCH_CHECK(ncclRecv(back_rows(r, p), out_rows * H_, ncclBfloat16, p, comm_, s_));
    }
  }
  KOSMOS_NCCL_BENCH_CHECK(ncclGroupEnd());
  return Status::ok();
}

Status CublasGroupedMoe::run() {
  const int64_t n = tk_ * nr_, vec = H_ / 8;
  auto* counts_h = reinterpret_cast<int32_t*>(static_cast<char*>(host_) + table_bytes_);
  const CbPtrs x = ptrs(x_, nr_), ids = ptrs(ids_, nr_), w = ptrs(w_, nr_);
  CbOutPtrs y{};
  for (int i = 0; i < nr_; ++i) y.p[i] = y_ptrs_[i];
  KOSMOS_CUDA_CHECK(cudaMemsetAsync(counts_, 0, size_t(nr_) * (E_ + 1) * 4, s_));
  cb_keys<<<grid(n, 256), 256, 0, s_>>>(ids, E_, tk_, nr_, u32(keys_), i32(vals_), i32(counts_));
  KOSMOS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(sort_tmp_, sort_bytes_, u32(keys_), u32(keys_sorted_), i32(vals_),
                                                    i32(vals_sorted_), int(n), 0, end_bit_, s_));
  cb_permute<<<grid(n * 32, 256), 256, 0, s_>>>(x, H_, k_, tk_, nr_, E_, u32(keys_sorted_), i32(vals_sorted_),
                                                 static_cast<uint4*>(send_x_), i32(inv_));
  if (comm_) KOSMOS_NCCL_BENCH_CHECK(ncclAllGather(counts_, counts_all_, size_t(E_ + 1), ncclInt32, comm_, s_));
  KOSMOS_CUDA_CHECK(cudaMemcpyAsync(counts_h, counts_all_, size_t(W_) * (E_ + 1) * 4, cudaMemcpyDeviceToHost, s_));
  KOSMOS_CUDA_CHECK(cudaStreamSynchronize(s_));  // the one host round trip
  auto cnt = [&](int s, int e) { return int64_t(counts_h[s * (E_ + 1) + e]); };
  // Host layout over every rank (global receive-row numbering from base_): group_off per expert
  // (expert-major receive rows), stage_off per (source, destination) (source-major staging rows).
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
  // Tables for this process's experts: GEMM pointer arrays and regroup chunks (staging -> expert-major).
  void** pt = static_cast<void**>(host_);
  void **pa1 = pt, **pb1 = pt + E_, **pc1 = pt + 2 * E_, **pa2 = pt + 3 * E_, **pb2 = pt + 4 * E_, **pc2 = pt + 5 * E_;
  auto* ch_in = reinterpret_cast<CbChunk*>(pt + 6 * E_);
  auto* ch_out = ch_in + size_t(W_) * E_;
  int G = 0, nch = 0;
  mm1_.clear();
  for (int e = r0_ * L_; e < (r0_ + nr_) * L_; ++e) {
    if (gm[e] == 0) continue;  // skip empty experts
    const int d = e / L_, l = e % L_;
    const int64_t row = goff[e] - row0_;
    pa1[G] = const_cast<__nv_bfloat16*>(static_cast<const __nv_bfloat16*>(gu_[d - r0_])) + size_t(l) * H_ * 2 * I_;
    pb1[G] = rows_at<__nv_bfloat16>(recv_x_, row, H_);
    pc1[G] = rows_at<__nv_bfloat16>(h1_, row, 2 * I_);
    pa2[G] = const_cast<__nv_bfloat16*>(static_cast<const __nv_bfloat16*>(dn_[d - r0_])) + size_t(l) * I_ * H_;
    pb2[G] = rows_at<__nv_bfloat16>(act_, row, I_);
    pc2[G] = rows_at<__nv_bfloat16>(out_, row, H_);
    mm1_.push_back(int(gm[e]));
    ++G;
    if (W_ > 1) {
      int64_t dst = row;
      for (int s = 0; s < W_; ++s) {
        const int64_t c = cnt(s, e);
        if (c == 0) continue;
        const int64_t st = stage_off[s * W_ + d] - row0_ + (start[s * (E_ + 1) + e] - start[s * (E_ + 1) + d * L_]);
        ch_in[nch] = CbChunk{st, dst, c};
        ch_out[nch] = CbChunk{dst, st, c};
        ++nch, dst += c;
      }
    }
  }
  KOSMOS_CUDA_CHECK(cudaMemcpyAsync(table_, host_, table_bytes_, cudaMemcpyHostToDevice, s_));
  void** dt = static_cast<void**>(table_);
  void **da1 = dt, **db1 = dt + E_, **dc1 = dt + 2 * E_, **da2 = dt + 3 * E_, **db2 = dt + 4 * E_, **dc2 = dt + 5 * E_;
  auto* dch_in = reinterpret_cast<const CbChunk*>(dt + 6 * E_);
  auto* dch_out = dch_in + size_t(W_) * E_;
  if (W_ > 1) {
    KOSMOS_RETURN_IF_ERROR(all_to_all(true, start, stage_off, nsd));  // into out_ as the staging rows
    if (nch > 0)
      cb_chunk_copy<<<dim3(8, nch), 256, 0, s_>>>(dch_in, static_cast<const uint4*>(out_), static_cast<uint4*>(recv_x_), vec);
  }
  const int64_t rows = base_[r0_ + nr_] - row0_;
  if (G > 0) {
    KOSMOS_RETURN_IF_ERROR(grouped(G, 2 * I_, H_, da1, db1, dc1, mm1_));
    cb_swiglu<<<grid(rows * I_ / 8, 256), 256, 0, s_>>>(static_cast<const uint4*>(h1_), static_cast<uint4*>(act_), rows, I_);
    KOSMOS_RETURN_IF_ERROR(grouped(G, H_, I_, da2, db2, dc2, mm1_));
  }
  if (W_ > 1) {
    if (nch > 0)  // expert-major -> source-major staging (recv_x_ is free after GEMM1)
      cb_chunk_copy<<<dim3(8, nch), 256, 0, s_>>>(dch_out, static_cast<const uint4*>(out_), static_cast<uint4*>(recv_x_), vec);
    KOSMOS_RETURN_IF_ERROR(all_to_all(false, start, stage_off, nsd));
  }
  cb_combine<<<grid(int64_t(nr_) * T_ * 32, 256), 256, 0, s_>>>(w, y, ids, static_cast<const __nv_bfloat16*>(back_), i32(inv_), T_,
                                                                 k_, H_, nr_, E_);
  KOSMOS_CUDA_CHECK(cudaGetLastError());
  return Status::ok();
}

const void* CublasGroupedMoe::y(int rank) const { return y_ptrs_[rank - r0_]; }

std::string CublasGroupedMoe::describe() const {
  const std::string a2a = comm_ ? "ncclSend/ncclRecv pairs in one group" : std::to_string(W_ * W_) + " cudaMemcpyAsync D2D";
  return std::string("keys + cub radix sort + gather permute, ") + (comm_ ? "ncclAllGather of the counts, " : "") +
         "counts to host (1 sync), " + (W_ > 1 ? "all-to-all as " + a2a + " + regroup kernel, " : "") +
         "cublasGemmGroupedBatchedEx (bf16, fp32 compute, one problem per non-empty expert), SwiGLU kernel, "
         "cublasGemmGroupedBatchedEx, " +
         (W_ > 1 ? "un-regroup + all-to-all back (" + a2a + "), " : "") + "weight scale + un-permute + slot-order sum kernel";
}

// Row-major C[M_g, N] = A[M_g, K] · B_g[K, N] per problem g, as column-major Cᵀ = B_gᵀ · Aᵀ.
Status CublasGroupedMoe::grouped(int G, int64_t N, int64_t K, const void* const* b_arr, const void* const* a_arr, void* const* c_arr,
                                 const std::vector<int>& m) {
  ta_.assign(G, CUBLAS_OP_N);
  mN_.assign(G, int(N));
  kK_.assign(G, int(K));
  ldN_.assign(G, int(N));
  ldK_.assign(G, int(K));
  one_.assign(G, 1);
  alpha_.assign(G, 1.0f);
  beta_.assign(G, 0.0f);
  KOSMOS_CUBLAS_CHECK(cublasGemmGroupedBatchedEx(h_, ta_.data(), ta_.data(), mN_.data(), m.data(), kK_.data(), alpha_.data(), b_arr,
                                                 CUDA_R_16BF, ldN_.data(), a_arr, CUDA_R_16BF, ldK_.data(), beta_.data(), c_arr,
                                                 CUDA_R_16BF, ldN_.data(), G, one_.data(), CUBLAS_COMPUTE_32F));
  return Status::ok();
}

}  // namespace kosmos::cli
