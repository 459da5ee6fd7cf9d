// gather_probe: could GEMM1 read its A rows straight from x, with no dispatch copy, on Hopper?
// docs/design/moe.md, "Where the time goes": at W = 1 the forward's dispatch copies every routed row
// (470 MB for the DeepSeek-V3 proxy at T = 4096) only so that GEMM1's A block is one TMA box.
// That copy is 5 % of the launch's SM time, and a persistent launch cannot hide it. Hopper's TMA
// has no gather. The candidates: one TMA per row (a [1 row, 64 k] box with the engine's 128-byte
// swizzle, written at row r's place of the stage), or `cp.async` by two producer warps (16 bytes a
// thread and instruction, written at their swizzled places by hand, completing on the stage's full
// barrier through `cp.async.mbarrier.arrive.noinc`). This probe answers, on the machine at hand:
//   1. layout: are the stages these give byte for byte the stage one 128-row box of the same rows
//      gives (the engine's A map, from a copy where the rows are contiguous)? Random gathers, several
//      row blocks and k offsets, rows issued by one lane and by 32 lanes; the box's stage is also
//      decoded against the host's rows, so neither side can be wrong unnoticed.
//   2. throughput: persistent CTAs, one per SM, stream GEMM1's loads at the DeepSeek-V3 proxy's
//      shape: A [128 rows, 64 k] and B [256 n, 64 k] per k block, 4 stages of 48 KB, tiles in slot
//      order with 16 n tiles per row block. A comes one of four ways: one box from the dispatched
//      copy (the engine today), 128 one-row boxes issued by one lane or by 32 lanes, or `cp.async`.
//      A consumer warp releases each stage once its bytes have landed. The probe prints each mode's
//      k-block period per SM against the MMA's (128x256x64 at --clock-ghz: ~0.76 us at the 1.35 GHz
//      the H100 holds in the MoE's GEMM1). Measured on an H100 (thirty-eighth session,
//      docs/perf-notes.md): all layouts the same; one-row boxes 5x too slow, `cp.async` 1.04-1.07x
//      the box's period with B.
// Usage: gather_probe [--tokens 4096] [--hidden 7168] [--experts 32] [--topk 8] [--n 4096]
//                     [--reps 5] [--clock-ghz 1.35] [--no-b]
// A diagnostic, built with the project (build/gather_probe); it does not touch the runtime.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench_util.cuh"
#include "kernels/gemm/bf16.h"
#include "kernels/gemm/gemm_host.h"
#include "kernels/gemm/gemm_tile.cuh"

namespace {

constexpr int kRows = 128;                // A block rows (the engine's BM)
constexpr int kBK = 64;                   // k block: 64 bf16 = one 128-byte swizzle row
constexpr int kBN = 256;                  // B block (the MoE GEMM1's BN)
constexpr int kStageA = kRows * kBK * 2;  // 16 KB
constexpr int kStageB = kBN * kBK * 2;    // 32 KB
constexpr int kStages = 4;
constexpr int kSmemStream = kStages * (kStageA + kStageB) + 1024 + kRows * 4;  // + alignment, row table
constexpr uint64_t kHint = static_cast<uint64_t>(cute::TMA::CacheHintSm90::EVICT_NORMAL);

enum Mode : int { kBoxFromCopy = 0, kRowsOneLane = 1, kRowsWarp = 2, kCpAsync = 3 };
constexpr int kModes = 4;
constexpr int kCpThreads = 64;  // the two warps that copy A with cp.async: 16 x 16 B each per k block
const char* mode_name(int m) {
  return m == kBoxFromCopy   ? "A as one box from the dispatched copy (today)"
         : m == kRowsOneLane ? "A as 128 one-row boxes from x, one lane issues"
         : m == kRowsWarp    ? "A as 128 one-row boxes from x, 32 lanes issue 4 each"
                             : "A by cp.async from x, 2 warps x 16 x 16 B per thread";
}

__device__ __forceinline__ uint8_t* align1024(uint8_t* p) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  return p + ((1024u - (s & 1023u)) & 1023u);
}

// The 128 one-row loads of a stage, rows[r] = x's row for the stage's row r; lanes 0..issuers-1 of
// the calling warp issue rows lane, lane + issuers, ...
__device__ __forceinline__ void load_rows(const CUtensorMap* row_map, uint64_t* bar, uint8_t* stage, const int* rows,
                                          int k0, int lane, int issuers) {
  if (lane >= issuers) return;
  for (int r = lane; r < kRows; r += issuers)
    cute::SM90_TMA_LOAD_2D::copy(row_map, bar, kHint, stage + r * 128, k0, rows[r]);
}

// Thread t of the kCpThreads copies 16-byte chunk j = t % 8 of rows t / 8 + 8 m (m < 16) of the A
// block: its chunk's swizzled place is j ^ (row % 8) = j ^ (t / 8) for all its rows. Then it arrives
// on bar once they land (noinc: bar's count includes the kCpThreads).
__device__ __forceinline__ void cp_async_rows(uint64_t* bar, uint8_t* stage, const uint16_t* x, int64_t hidden,
                                              const int* rows, int k0, int t) {
  const int j = t % 8, r0 = t / 8;
  const uint32_t dst0 = static_cast<uint32_t>(__cvta_generic_to_shared(stage)) + r0 * 128 + ((j ^ r0) << 4);
#pragma unroll
  for (int m = 0; m < kRows / 8; ++m) {
    const uint16_t* src = x + int64_t(rows[r0 + 8 * m]) * hidden + k0 + j * 8;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst0 + m * 1024), "l"(src) : "memory");
  }
  asm volatile(
      "cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(bar)))
      : "memory");
}

// Part 1: one CTA per check, 128 threads. Stage 0: the block's rows as one box of the dispatched
// copy; stage 1: the same rows as one-row boxes of x (issued by `issuers` lanes of warp 0); stage 2:
// the same rows by cp.async (warps 2-3). All three stages go to out.
constexpr int kLayoutStages = 3;
__global__ void layout_kernel(const __grid_constant__ CUtensorMap box_map, const __grid_constant__ CUtensorMap row_map,
                              const uint16_t* x, int64_t hidden, const int* slot_token, const int* blocks,
                              const int* k0s, int issuers, uint8_t* out) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* stage = align1024(smem_raw);
  __shared__ uint64_t bar;
  __shared__ int rows[kRows];
  const int c = blockIdx.x, block = blocks[c], k0 = k0s[c];
  for (int r = threadIdx.x; r < kRows; r += blockDim.x) rows[r] = slot_token[block * kRows + r];
  if (threadIdx.x == 0) {
    cutlass::arch::ClusterBarrier::init(&bar, 1 + kCpThreads);
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x >= 64) cp_async_rows(&bar, stage + 2 * kStageA, x, hidden, rows, k0, threadIdx.x - 64);
  if (threadIdx.x < 32) {
    if (threadIdx.x == 0) {
      cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&bar, 2 * kStageA);
      cute::SM90_TMA_LOAD_2D::copy(&box_map, &bar, kHint, stage, k0, block * kRows);
    }
    __syncwarp();
    load_rows(&row_map, &bar, stage + kStageA, rows, k0, threadIdx.x, issuers);
  }
  cutlass::arch::ClusterBarrier::wait(&bar, 0);
  for (int i = threadIdx.x; i < kLayoutStages * kStageA / 16; i += blockDim.x)
    reinterpret_cast<uint4*>(out + size_t(c) * kLayoutStages * kStageA)[i] = reinterpret_cast<const uint4*>(stage)[i];
}

// Part 2: warp 0 produces (lane 0 issues B and, in kBoxFromCopy, A), warp 1's lane 0 consumes, and
// in kCpAsync warps 2-3 copy A. Tile t = blockIdx.x + i * gridDim.x: row block t / n_tiles, n tile
// t % n_tiles.
template <int kMode, bool kLoadB>
__global__ void __launch_bounds__(128, 1)
    stream_kernel(const __grid_constant__ CUtensorMap box_map, const __grid_constant__ CUtensorMap row_map,
                  const __grid_constant__ CUtensorMap b_map, const uint16_t* x, int64_t hidden, const int* slot_token,
                  const int* block_expert, int num_tiles, int n_tiles, int num_kb, unsigned long long* checksum) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* ring = align1024(smem_raw);
  int* rows = reinterpret_cast<int*>(ring + kStages * (kStageA + kStageB));  // warp 0's; kCpAsync: warps 2-3's
  __shared__ uint64_t full[kStages], empty[kStages];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      cutlass::arch::ClusterBarrier::init(&full[s], kMode == kCpAsync ? 1 + kCpThreads : 1);
      cutlass::arch::ClusterBarrier::init(&empty[s], 1);
    }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();
  constexpr uint32_t kBytes = (kMode == kCpAsync ? 0 : kStageA) + (kLoadB ? kStageB : 0);  // TMA bytes
  int stage = 0;
  uint32_t phase = 0;
  unsigned long long sum = 0;
  for (int t = blockIdx.x; t < num_tiles; t += gridDim.x) {
    const int block = t / n_tiles, n0 = (t % n_tiles) * kBN, expert = block_expert[block];
    if (warp == 0) {
      if constexpr (kMode == kRowsOneLane || kMode == kRowsWarp) {
        // The previous tile's loads have all been issued (the consumer may still read them; the
        // row table is read by the issuing lanes only, before they issue).
        __syncwarp();
        for (int r = lane; r < kRows; r += 32) rows[r] = slot_token[block * kRows + r];
        __syncwarp();
      }
      for (int kb = 0; kb < num_kb; ++kb) {
        cutlass::arch::ClusterBarrier::wait(&empty[stage], phase ^ 1);
        uint8_t* sa = ring + stage * (kStageA + kStageB);
        const int k0 = kb * kBK;
        if (lane == 0) {
          cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&full[stage], kBytes);
          if constexpr (kLoadB) cute::SM90_TMA_LOAD_3D::copy(&b_map, &full[stage], kHint, sa + kStageA, k0, n0, expert);
          if constexpr (kMode == kBoxFromCopy)
            cute::SM90_TMA_LOAD_2D::copy(&box_map, &full[stage], kHint, sa, k0, block * kRows);
        }
        if constexpr (kMode == kRowsOneLane || kMode == kRowsWarp) {
          __syncwarp();  // the expect_tx before any row's bytes complete on the barrier
          load_rows(&row_map, &full[stage], sa, rows, k0, lane, kMode == kRowsWarp ? 32 : 1);
        }
        if (++stage == kStages) stage = 0, phase ^= 1;
      }
    } else if (kMode == kCpAsync && warp >= 2) {
      const int ct = threadIdx.x - 64;
      asm volatile("bar.sync 1, 64;" ::: "memory");  // the previous tile's copies issued: rows is free
      for (int r = ct; r < kRows; r += kCpThreads) rows[r] = slot_token[block * kRows + r];
      asm volatile("bar.sync 1, 64;" ::: "memory");
      for (int kb = 0; kb < num_kb; ++kb) {
        cutlass::arch::ClusterBarrier::wait(&empty[stage], phase ^ 1);
        cp_async_rows(&full[stage], ring + stage * (kStageA + kStageB), x, hidden, rows, kb * kBK, ct);
        if (++stage == kStages) stage = 0, phase ^= 1;
      }
    } else if (warp == 1 && lane == 0) {
      for (int kb = 0; kb < num_kb; ++kb) {
        cutlass::arch::ClusterBarrier::wait(&full[stage], phase);
        const uint8_t* sa = ring + stage * (kStageA + kStageB);
        sum += *reinterpret_cast<const uint32_t*>(sa + (kb % kRows) * 128 + 16 * (kb % 8));
        cutlass::arch::ClusterBarrier::arrive(&empty[stage]);
        if (++stage == kStages) stage = 0, phase ^= 1;
      }
    }
  }
  if (warp == 1 && lane == 0) atomicAdd(checksum, sum);
}

struct Options {
  int tokens = 4096, hidden = 7168, experts = 32, topk = 8, n = 4096, reps = 5;
  double clock_ghz = 1.35;
  bool load_b = true;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "gather_probe: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--tokens")
      o.tokens = std::atoi(next());
    else if (a == "--hidden")
      o.hidden = std::atoi(next());
    else if (a == "--experts")
      o.experts = std::atoi(next());
    else if (a == "--topk")
      o.topk = std::atoi(next());
    else if (a == "--n")
      o.n = std::atoi(next());
    else if (a == "--reps")
      o.reps = std::atoi(next());
    else if (a == "--clock-ghz")
      o.clock_ghz = std::atof(next());
    else if (a == "--no-b")
      o.load_b = false;
    else {
      std::fprintf(stderr,
                   "usage: gather_probe [--tokens 4096] [--hidden 7168] [--experts 32] [--topk 8] [--n 4096] "
                   "[--reps 5] [--clock-ghz 1.35] [--no-b]\n");
      std::exit(a == "--help" || a == "-h" ? 0 : 2);
    }
  }
  if (o.tokens < 1 || o.hidden % kBK != 0 || o.hidden < kBK || o.experts < 1 || o.topk < 1 || o.topk > o.experts ||
      o.n % kBN != 0 || o.n < kBN || o.reps < 1 || o.clock_ghz <= 0 || (int64_t(o.tokens) * o.topk) % kRows != 0) {
    std::fprintf(stderr,
                 "gather_probe: need hidden a multiple of 64, n a multiple of 256, 1 <= topk <= experts, and "
                 "tokens * topk a multiple of 128\n");
    std::exit(2);
  }
  return o;
}

void check_status(const kosmos::Status& s) {
  if (!s) {
    std::fprintf(stderr, "gather_probe: %s\n", s.message().c_str());
    std::exit(1);
  }
}

template <int kMode, bool kLoadB>
float time_stream(const CUtensorMap& box, const CUtensorMap& row, const CUtensorMap& b, const uint16_t* d_x,
                  int64_t hidden, const int* d_slot_token, const int* d_block_expert, int num_tiles, int n_tiles,
                  int num_kb, int grid, int reps, unsigned long long* d_sum) {
  auto k = stream_kernel<kMode, kLoadB>;
  CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemStream));
  k<<<grid, 128, kSmemStream>>>(box, row, b, d_x, hidden, d_slot_token, d_block_expert, num_tiles, n_tiles, num_kb,
                                d_sum);  // warm-up
  CK(cudaGetLastError());
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaEventRecord(e0));
  for (int i = 0; i < reps; ++i)
    k<<<grid, 128, kSmemStream>>>(box, row, b, d_x, hidden, d_slot_token, d_block_expert, num_tiles, n_tiles, num_kb,
                                  d_sum);
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  return ms / reps;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  using kosmos::kernels::gemm::encode_bf16_tensor_map;
  int dev = 0, sms = 0, count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("gather_probe: SKIPPED: no CUDA device\n");
    return 0;
  }
  cudaDeviceProp prop{};
  CK(cudaGetDevice(&dev));
  CK(cudaGetDeviceProperties(&prop, dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  if (prop.major != 9) {
    std::printf("gather_probe: SKIPPED: needs an sm_90 GPU (found %s, sm_%d%d)\n", prop.name, prop.major, prop.minor);
    return 0;
  }
  const int64_t slots = int64_t(o.tokens) * o.topk, H = o.hidden;
  std::printf("gather_probe on %s (%d SMs): T = %d, H = %lld, E = %d, top-%d, N = %d: %lld slots\n", prop.name, sms,
              o.tokens, static_cast<long long>(H), o.experts, o.topk, o.n, static_cast<long long>(slots));

  // Routing: top-k distinct experts per token, uniform; slots sorted by (expert, token) as dispatch lays them out.
  std::mt19937 rng(1234);
  std::vector<std::pair<int, int>> ex_tok;
  ex_tok.reserve(slots);
  std::vector<int> perm(o.experts);
  for (int t = 0; t < o.tokens; ++t) {
    for (int e = 0; e < o.experts; ++e) perm[e] = e;
    for (int j = 0; j < o.topk; ++j) {
      std::uniform_int_distribution<int> pick(j, o.experts - 1);
      std::swap(perm[j], perm[pick(rng)]);
      ex_tok.push_back({perm[j], t});
    }
  }
  std::sort(ex_tok.begin(), ex_tok.end());
  const int num_blocks = static_cast<int>(slots / kRows);
  std::vector<int> slot_token(slots), block_expert(num_blocks);
  for (int64_t s = 0; s < slots; ++s) slot_token[s] = ex_tok[s].second;
  for (int b = 0; b < num_blocks; ++b) block_expert[b] = ex_tok[int64_t(b) * kRows].first;

  // x: random bf16; the dispatched copy: x's rows in slot order.
  std::vector<uint16_t> x(size_t(o.tokens) * H), xd(size_t(slots) * H);
  std::uniform_real_distribution<float> val(-1.f, 1.f);
  for (auto& v : x) v = kosmos::kernels::gemm::float_to_bf16(val(rng));
  for (int64_t s = 0; s < slots; ++s) std::memcpy(&xd[size_t(s) * H], &x[size_t(slot_token[s]) * H], size_t(H) * 2);
  void *d_x = nullptr, *d_xd = nullptr, *d_b = nullptr;
  int *d_slot_token = nullptr, *d_block_expert = nullptr;
  const size_t b_elems = size_t(o.experts) * o.n * H;
  CK(cudaMalloc(&d_x, x.size() * 2));
  CK(cudaMalloc(&d_xd, xd.size() * 2));
  CK(cudaMalloc(&d_b, b_elems * 2));
  CK(cudaMemset(d_b, 0x3c, b_elems * 2));  // weights' values do not matter to the loads
  CK(cudaMalloc(&d_slot_token, slots * 4));
  CK(cudaMalloc(&d_block_expert, num_blocks * 4));
  CK(cudaMemcpy(d_x, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_xd, xd.data(), xd.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_slot_token, slot_token.data(), slots * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_block_expert, block_expert.data(), num_blocks * 4, cudaMemcpyHostToDevice));

  CUtensorMap box_map, row_map, b_map;
  {
    const cuuint64_t dims[2] = {cuuint64_t(H), cuuint64_t(slots)}, strides[1] = {cuuint64_t(H) * 2};
    const cuuint32_t box[2] = {kBK, kRows};
    check_status(encode_bf16_tensor_map(&box_map, "dispatched copy", d_xd, 2, dims, strides, box));
  }
  {
    const cuuint64_t dims[2] = {cuuint64_t(H), cuuint64_t(o.tokens)}, strides[1] = {cuuint64_t(H) * 2};
    const cuuint32_t box[2] = {kBK, 1};
    check_status(encode_bf16_tensor_map(&row_map, "x rows", d_x, 2, dims, strides, box));
  }
  {
    const cuuint64_t dims[3] = {cuuint64_t(H), cuuint64_t(o.n), cuuint64_t(o.experts)};
    const cuuint64_t strides[2] = {cuuint64_t(H) * 2, cuuint64_t(o.n) * H * 2};
    const cuuint32_t box[3] = {kBK, kBN, 1};
    check_status(encode_bf16_tensor_map(&b_map, "B", d_b, 3, dims, strides, box));
  }

  // Part 1: layout.
  const int checks = 64, num_kb = static_cast<int>(H / kBK);
  std::vector<int> blocks(checks), k0s(checks);
  for (int c = 0; c < checks; ++c) {
    blocks[c] = (c * 37 + 5) % num_blocks;
    k0s[c] = ((c * 13) % num_kb) * kBK;
  }
  int *d_blocks = nullptr, *d_k0s = nullptr;
  uint8_t* d_out = nullptr;
  CK(cudaMalloc(&d_blocks, checks * 4));
  CK(cudaMalloc(&d_k0s, checks * 4));
  CK(cudaMalloc(&d_out, size_t(checks) * kLayoutStages * kStageA));
  CK(cudaMemcpy(d_blocks, blocks.data(), checks * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_k0s, k0s.data(), checks * 4, cudaMemcpyHostToDevice));
  CK(cudaFuncSetAttribute(layout_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kLayoutStages * kStageA + 1024));
  bool layout_ok = true;
  for (int issuers : {1, 32}) {
    CK(cudaMemset(d_out, 0xff, size_t(checks) * kLayoutStages * kStageA));
    layout_kernel<<<checks, 128, kLayoutStages * kStageA + 1024>>>(box_map, row_map, static_cast<const uint16_t*>(d_x),
                                                                   H, d_slot_token, d_blocks, d_k0s, issuers, d_out);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<uint8_t> out(size_t(checks) * kLayoutStages * kStageA);
    CK(cudaMemcpy(out.data(), d_out, out.size(), cudaMemcpyDeviceToHost));
    int box_bad = 0, rows_bad = 0, cp_bad = 0;
    for (int c = 0; c < checks; ++c) {
      const uint8_t* st = &out[size_t(c) * kLayoutStages * kStageA];
      // The box's stage, decoded with the 128-byte swizzle (16-byte chunk j of row r at j ^ (r % 8)).
      for (int r = 0; r < kRows; ++r)
        for (int j = 0; j < 8; ++j) {
          const uint8_t* got = st + r * 128 + ((j ^ (r % 8)) * 16);
          const uint16_t* want = &xd[size_t(blocks[c] * kRows + r) * H + k0s[c] + j * 8];
          if (std::memcmp(got, want, 16) != 0) ++box_bad;
        }
      if (std::memcmp(st, st + kStageA, kStageA) != 0) ++rows_bad;
      if (std::memcmp(st, st + 2 * kStageA, kStageA) != 0) ++cp_bad;
    }
    const bool same = box_bad == 0 && rows_bad == 0 && cp_bad == 0;
    std::printf(
        "layout, %2d issuing lane(s): %d checks; box stage vs host rows: %d bad chunks; stages differing from "
        "the box: one-row boxes %d, cp.async %d -> %s\n",
        issuers, checks, box_bad, rows_bad, cp_bad, same ? "SAME" : "DIFFERENT");
    layout_ok = layout_ok && same;
  }

  // Part 2: throughput.
  const int n_tiles = o.n / kBN, num_tiles = num_blocks * n_tiles;
  const double kblocks = double(num_tiles) * num_kb;
  const double bytes = kblocks * (kStageA + (o.load_b ? kStageB : 0));
  const double mma_ns = 2.0 * kRows * kBN * kBK / (4096.0 * o.clock_ghz);  // 4096 dense bf16 FLOP / clock / SM
  unsigned long long* d_sum = nullptr;
  CK(cudaMalloc(&d_sum, sizeof(unsigned long long)));
  std::printf("throughput: %d tiles x %d k blocks, %s per k block, %d CTAs; MMA period at %.2f GHz: %.0f ns\n",
              num_tiles, num_kb, o.load_b ? "A 16 KB + B 32 KB" : "A 16 KB only", sms, o.clock_ghz, mma_ns);
  const auto* dx = static_cast<const uint16_t*>(d_x);
  auto time_mode = [&](int m) {
    auto one = [&](auto mode, auto load_b) {
      return time_stream<decltype(mode)::value, decltype(load_b)::value>(
          box_map, row_map, b_map, dx, H, d_slot_token, d_block_expert, num_tiles, n_tiles, num_kb, sms, o.reps, d_sum);
    };
    auto with_b = [&](auto mode) { return o.load_b ? one(mode, std::true_type{}) : one(mode, std::false_type{}); };
    switch (m) {
      case kBoxFromCopy:
        return with_b(std::integral_constant<int, kBoxFromCopy>{});
      case kRowsOneLane:
        return with_b(std::integral_constant<int, kRowsOneLane>{});
      case kRowsWarp:
        return with_b(std::integral_constant<int, kRowsWarp>{});
      default:
        return with_b(std::integral_constant<int, kCpAsync>{});
    }
  };
  for (int round = 0; round < 2; ++round)
    for (int m = 0; m < kModes; ++m) {
      const float ms = time_mode(m);
      const double period_ns = ms * 1e6 * sms / kblocks;
      std::printf("  round %d  %-56s %8.3f ms  %6.2f TB/s  k-block period per SM %6.0f ns (%.2fx the MMA's)\n",
                  round + 1, mode_name(m), ms, bytes / (ms * 1e-3) / 1e12, period_ns, period_ns / mma_ns);
    }
  std::printf("layout %s\n", layout_ok ? "SAME: one-row boxes and cp.async give the engine's A stage"
                                       : "DIFFERENT: see the layout lines above");
  cudaFree(d_x);
  cudaFree(d_xd);
  cudaFree(d_b);
  cudaFree(d_slot_token);
  cudaFree(d_block_expert);
  cudaFree(d_blocks);
  cudaFree(d_k0s);
  cudaFree(d_out);
  cudaFree(d_sum);
  return layout_ok ? 0 : 1;
}
