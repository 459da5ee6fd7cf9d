// gemm_tile: one GEMM output tile (or a run of tiles down M) as a task body of the persistent
// runtime kernel. bf16 x bf16 -> fp32 accumulate -> epilogue -> bf16, sm_90a, CuTe primitives.
//
// Called by ALL 384 threads of the CTA (3 warpgroups) with identical arguments; the runtime does
// __syncthreads() after it returns. Roles:
//   warpgroup 0 (threads   0..127): producer. Warp 0 lane 0 issues TMA loads of the A and B
//                                   k-blocks into a `Stages`-deep shared-memory ring; before each
//                                   A k-block it calls wait(m_block, k_block) (runtime hook), then
//                                   fence.proxy.async.global. Warps 1..3 idle.
//   warpgroups 1, 2 (128..383):      consumers (cooperative): each owns BM/2 = 64 rows of the
//                                   BM x BN tile, runs wgmma (SS, fp32 accumulators in registers)
//                                   and the epilogue. Epilogue without kGemmEpiAccumulate: each warp
//                                   rounds its 16 rows to bf16, writes 64 columns at a time into a
//                                   private 2 KB shared staging area (stmatrix, XOR swizzle), then
//                                   either (kGemmEpiTmaStore, tiles whose rows are all C's) lane 0
//                                   issues one TMA store of the 16 x 64 slice and the warp goes on
//                                   while it drains (two staging buffers per warp), or the warp
//                                   stores whole 128-byte row segments with 16-byte stores (masked);
//                                   with kGemmEpiAccumulate: masked direct 4-byte read-add-stores.
// With kSetMaxNReg the producer warpgroup drops to 56 registers and the consumers rise to 224;
// both return to kEntryRegs (168, what __launch_bounds__(384, 1) gives) before returning: the
// consumers shrink first, then arrive on named barrier 1 (384), on which the producer warpgroup
// waits before it re-grows (setmaxnreg is per warp on a per-CTA pool; re-growing early could
// starve a consumer warp still waiting in setmaxnreg.inc, a deadlock).
//
// Shared memory (`smem` must be 1024-byte aligned: the kernel declares it __align__(1024)):
//   A ring: Stages x BM x 64 bf16 (16 KB/stage) | B ring: Stages x BN x 64 bf16 (32/16/8 KB) |
//   epilogue staging 2 buffers x 8 warps x 16 rows x 128 B = 32 KB | full[Stages], empty[Stages]
//   mbarriers. 128x256: 4 stages x 48 KB -> 229,440 B;  128x128: 6 x 32 KB -> 229,472 B;  128x64:
//   8 x 24 KB -> 229,504 B (kGemmSmemBytesMax); with the op kernel's 2 KB of static shared memory
//   231,552 of the 232,448 B a CTA may have. The merged-tail tile (kGemmMergeTails,
//   Config128x256Tail) has a 32 x 64 A area per stage after the A ring and one staging buffer
//   (229,440 B). Nothing in shared memory survives the call.
// Sync protocol (per call; barriers are re-initialised at the start of every call unless the call
// was carried into -- the ring carry below, docs/design/gemm.md: then the barriers, the ring's walk
// and its first k blocks come from the CTA's previous task): thread 0 inits full (count 1) / empty (count 2 = one arrive per
// consumer warpgroup), fence, __syncthreads. Producer: wait empty[s] -> hook -> fence.proxy.async
// -> arrive_and_expect_tx(full[s], bytes) -> TMA loads complete_tx on full[s]. Consumers: wait
// full[s] -> wgmma -> after the NEXT k-block's wgmma batch is issued, wgmma.wait_group 1 -> one
// thread per warpgroup arrives on empty[s]. With kGemmKeepOperands a tile of at most one ring of
// k blocks may read its run's shared operand from the stage areas an earlier tile loaded it into
// (StageWalk, stage_walk.h: the producer loads only the other operand, and drains the ring before
// the resident areas change). Every TMA load issued in a call is consumed in the same call. Each consumer
// warp's lane 0 waits before the call returns until its TMA stores have read the staging and,
// when the hook's outputs_awaited() says another task waits for this one's outputs, until they are
// written (wait_group 0, then fence.proxy.async.global), so the runtime's release of the task's
// signals covers the stored C. Barriers: one __syncthreads
// (barrier 0, all 384 threads) right after the mbarrier init of each call; with kSetMaxNReg, named
// barriers 1 (384 threads: 256 consumer arrivals + 128 producer waits) and 2 (the 256 consumer
// threads) once each at the end of every call. The staging area is private per warp (__syncwarp).
// Hook: wait(m_block, k_block) is called by the single producer thread before each A k-block load,
// and wait.loads_issued() (if the hook has it) once after the call's last load; a hook with
// carried_in() also offers the ring carry (claim_soon, handoff_reset, the claim helper's
// helper_claim / helper_post / helper_wait -- warp 1 claims the CTA's next task --, next_gemm,
// next_ready, carry_out, carry_commit: RuntimeGemmWaiter, op_body.cuh),
// m_block = dense m block, or the GROUP index for grouped problems. If it returns bool, the
// fence.proxy.async.global follows only when it returns true (it acquired something); if it
// returns void the fence always follows.
//
// Preconditions (checked by make_gemm_params on the host): p lives in param/global memory (the TMA
// takes the address of p.tma_a / p.tma_b); the kernel runs 384 threads, __launch_bounds__(384, 1).
#pragma once

#include <cute/arch/cluster_sm90.hpp>
#include <cute/arch/copy_sm90_desc.hpp>
#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/arch/mma_sm90.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/bfloat16.h>

#include <cuda_bf16.h>

#include <type_traits>

#include "gemm_params.h"
#include "stage_walk.h"

#ifdef KOSMOS_GEMM_PROBE  // diagnostic build only (benchmarks/gemm_probe.cu)
#include "gemm_probe.cuh"
#define KOSMOS_GEMM_MARK(role, which) ::kosmos::kernels::gemm::probe::mark(role, which)
#define KOSMOS_GEMM_NEXT(role) ::kosmos::kernels::gemm::probe::next(role)
#else
#define KOSMOS_GEMM_MARK(role, which) do {} while (0)
#define KOSMOS_GEMM_NEXT(role) do {} while (0)
#endif

namespace kosmos::kernels::gemm {

// Runtime hook that never waits (standalone tests and benchmarks).
// A hook returns void (always followed by fence.proxy.async.global) or bool: true when it acquired
// data written by the generic proxy (then the fence follows), false when it did nothing.
struct NoWait {
  __device__ bool operator()(int /*m_block*/, int /*k_block*/) const { return false; }
  // No task reads another's output inside the standalone kernels (the launch's end completes the
  // TMA stores); a hook without this method makes every task wait for its stores' writes.
  __device__ bool outputs_awaited() const { return false; }
};

namespace detail {

using namespace cute;

inline constexpr int kEntryRegs = 168;  // 65536 / 384 rounded down to a multiple of 8
// The split keeps the CTA's pool: 128 x 56 + 256 x 224 = 384 x 168. The consumers' deepest region
// uses R0..R217 (cuobjdump -sass), so 224 costs them nothing; at 40 the producer's grouped slot
// search and counter-wait path spilled 416 bytes (fifth session: 56 leaves no spill, no stack).
inline constexpr int kProducerRegs = 56;
inline constexpr int kConsumerRegs = 224;
static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= 384 * kEntryRegs, "setmaxnreg split exceeds the CTA's pool");

// Epilogue staging: each of the 8 consumer warps owns 16 rows x 64 bf16 columns (2 KB) of shared
// memory; 16-byte chunks are XOR-swizzled by (row % 8) so the stmatrix writes and the 16-byte row
// reads are both bank-conflict free.
inline constexpr int kEpiWarpRows = 16;
inline constexpr int kEpiWarpBytes = kEpiWarpRows * 128;
inline constexpr int kEpiStageBytes = 8 * kEpiWarpBytes;  // 16 KB
// Two staging buffers (TileConfig::kEpiBuffers; one in the merged-tail tile): with
// kGemmEpiTmaStore a pass writes one while the TMA still reads the other.

// kTail_ > 0: the tile also computes up to kTail_ rows past its 128 (a group's short last block
// merged into the block before it, kGemmMergeTails): each stage has a kTail_ x 64 A area beside
// the A and B ones. The epilogue has two staging buffers when they fit beside the ring, else one.
inline constexpr int kGemmSmemLimit = 229504;  // dynamic shared memory beside the op kernel's 2 KB of static
template <int BN_, int Stages_, int kTail_ = 0>
struct TileConfig {
  static constexpr int kBM = kGemmBlockM;
  static constexpr int kBN = BN_;
  static constexpr int kBK = kGemmBlockK;
  static constexpr int kStages = Stages_;
  static constexpr int kTail = kTail_;
  static constexpr int kStageBytesA = kBM * kBK * 2;
  static constexpr int kStageBytesT = kTail * kBK * 2;
  static constexpr int kStageBytesB = kBN * kBK * 2;
  static constexpr int kRingBytes = kStages * (kStageBytesA + kStageBytesT + kStageBytesB);
  static constexpr int kEpiBuffers = kRingBytes + 2 * kEpiStageBytes + 2 * kStages * 8 <= kGemmSmemLimit ? 2 : 1;
  // No alignment slack: every kernel running the body declares its dynamic shared memory
  // `extern __shared__ __align__(1024)`, which places it at a 1024-byte boundary (checked at run
  // time in gemm_tile_impl); with two staging buffers the 1 KB of slack no longer fits beside the
  // runtime's static shared memory.
  static constexpr int kSmemBytes = kRingBytes + kEpiBuffers * kEpiStageBytes + 2 * kStages * 8;
};
using Config128x256 = TileConfig<256, 4>;
using Config128x128 = TileConfig<128, 6>;
using Config128x64 = TileConfig<64, 8>;
#ifndef KOSMOS_GEMM_TAIL_STAGES  // experiments: 3 stages leave room for two staging buffers
#define KOSMOS_GEMM_TAIL_STAGES 4
#endif
using Config128x256Tail = TileConfig<256, KOSMOS_GEMM_TAIL_STAGES, kGemmTailRows>;
static_assert(Config128x256::kEpiBuffers == 2 && Config128x128::kEpiBuffers == 2 && Config128x64::kEpiBuffers == 2);
static_assert(Config128x256Tail::kSmemBytes <= Config128x256::kSmemBytes, "the merged-tail tile must fit the 128x256 tile's shared memory");

template <class Cfg, bool kAMn, bool kBMn>
struct TileTraits {
  using T = cutlass::bfloat16_t;
  using BM = Int<Cfg::kBM>;
  using BN = Int<Cfg::kBN>;
  using BK = Int<Cfg::kBK>;
  using S = Int<Cfg::kStages>;
  static constexpr GMMA::Major kMajorA = kAMn ? GMMA::Major::MN : GMMA::Major::K;
  static constexpr GMMA::Major kMajorB = kBMn ? GMMA::Major::MN : GMMA::Major::K;
  using AtomA = conditional_t<kAMn, GMMA::Layout_MN_SW128_Atom<T>, GMMA::Layout_K_SW128_Atom<T>>;
  using AtomB = conditional_t<kBMn, GMMA::Layout_MN_SW128_Atom<T>, GMMA::Layout_K_SW128_Atom<T>>;
  // MN-major: k-atoms first, so each 64-wide MN slab is one contiguous [64 k][64 mn] TMA box.
  using SmemLayoutA = decltype(tile_to_shape(AtomA{}, make_shape(BM{}, BK{}, S{}),
                                             conditional_t<kAMn, Step<_2, _1, _3>, Step<_1, _2, _3>>{}));
  using SmemLayoutB = decltype(tile_to_shape(AtomB{}, make_shape(BN{}, BK{}, S{}),
                                             conditional_t<kBMn, Step<_2, _1, _3>, Step<_1, _2, _3>>{}));
  using TiledMma = decltype(make_tiled_mma(
      GMMA::ss_op_selector<T, T, float, Shape<_64, BN, BK>, kMajorA, kMajorB>(), Layout<Shape<_2, _1, _1>>{}));
  // The merged tail (Cfg::kTail > 0; 8-row stand-ins otherwise, never used): its product runs
  // swapped, D[n, r] = Σ_k B[k, n] · A[row0 + 128 + r, k] -- the B stage as the (MN-major or K-major)
  // A operand of m64 x kTail wgmmas, the tail rows [kTail, 64 k] (K-major, as TMA'd) as the B operand --
  // so the 32 extra rows cost kTail / BN of the tile's MMA and a 4 KB load per k block, and their
  // accumulators 32 registers per consumer thread instead of another 128.
  using TN = Int<(Cfg::kTail > 0 ? Cfg::kTail : 8)>;
  using SmemLayoutT = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<T>{}, make_shape(TN{}, BK{}, S{})));
  using TiledMmaT = decltype(make_tiled_mma(GMMA::ss_op_selector<T, T, float, Shape<_64, TN, BK>, kMajorB, GMMA::Major::K>(),
                                            Layout<Shape<_2, _1, _1>>{}));
};

// Named barriers (0 is __syncthreads): kRegsBarrier = consumers returned their registers
// (256 arrive + 128 sync), kConsumerBarrier = both consumer warpgroups (256 threads).
inline constexpr int kRegsBarrier = 1;
inline constexpr int kConsumerBarrier = 2;

__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;" ::: "memory");
}

// Where tile i of a run lives. All fields are warp-uniform.
struct TileCoord {
  bool valid;
  int a_row0;  // first row (M coordinate) of A of the tile
  int c_row0;  // first row of C (= a_row0, except grouped-K: g * M + a_row0)
  int rows;    // valid rows (<= BM)
  int tail;    // kGemmMergeTails: rows past the BM (a group's merged last block, <= kGemmTailRows), else 0
  int n0;      // first column of B
  int group;   // B group (0 when dense and grouped-K)
  int wait_m;  // m_block passed to the hook: dense m block, grouped (and grouped-K) group index
  int k_base;  // first K row of the tile's k-loop (grouped-K: group_offset[g]; else 0)
  int num_kb;  // k blocks of the tile (grouped-K: ceil(group_m[g] / BK), may be 0; else ceil(K / BK))
};

// Grouped: slot -> (group, m block) by a warp-wide prefix sum over the groups' slots
// (gemm_group_blocks: ceil(group_m[g] / BM), one less with a merged tail), 8 groups per lane
// (G <= 256). Must be called by all 32 lanes of a warp.
// kExpertMajor (kGemmExpertMajor): `slot` is a tile index L of the claim order and the search runs
// over the groups' tiles (slots x nt); the n block comes back in n (gemm_expert_major_tile).
template <bool kExpertMajor = false>
__device__ __forceinline__ bool map_group_slot(const GemmParams& p, int slot, int lane_idx, int& group,
                                               int& block, int* n = nullptr, int nt = 1) {
  constexpr int kBM = kGemmBlockM;
  // Laundered: otherwise lane * 8 + j (and their sign extensions) are hoisted out of the tile loop
  // and, in the producer's registers (40 until the fifth session), spilled and reloaded from local
  // memory every tile.
  asm volatile("" : "+r"(lane_idx));
  const bool merge = (p.layout & kGemmMergeTails) != 0;
  int cnt[8];
  int local = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int g = lane_idx * 8 + j;
    const int mg = g < p.num_groups ? __ldcg(p.group_m + g) : 0;
    int tail;
    cnt[j] = gemm_group_blocks(mg, merge, &tail);
    if constexpr (kExpertMajor) cnt[j] *= nt;  // the group's tiles
    local += cnt[j];
  }
  int incl = local;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int v = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane_idx >= o) incl += v;
  }
  const int excl = incl - local;
  const bool mine = slot >= excl && slot < incl;
  const unsigned ballot = __ballot_sync(0xffffffffu, mine);
  if (ballot == 0) return false;
  int g = 0, b = 0, c = 1;
  if (mine) {
    int s = slot - excl;
    bool found = false;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      if (!found) {
        if (s < cnt[j]) {
          g = lane_idx * 8 + j;
          b = s;
          c = cnt[j];
          found = true;
        } else {
          s -= cnt[j];
        }
      }
    }
  }
  const int src = __ffs(ballot) - 1;
  group = __shfl_sync(0xffffffffu, g, src);
  if constexpr (kExpertMajor) {  // b: the tile within the group's slots x nt; c: slots x nt
    const int local = __shfl_sync(0xffffffffu, b, src), slots = __shfl_sync(0xffffffffu, c, src) / nt;
    *n = local / slots;
    block = local % slots;
  } else {
    block = __shfl_sync(0xffffffffu, b, src);
  }
  return true;
}

template <int kBN>
__device__ __forceinline__ TileCoord resolve_tile(const GemmParams& p, const GemmTileArgs& a, int i,
                                                  int lane_idx) {
  constexpr int kBM = kGemmBlockM;
  TileCoord t{};
  t.tail = 0;
  const bool along_n = (a.flags & kGemmRunAlongN) != 0;
  t.n0 = (static_cast<int>(a.tile_n) + (along_n ? i : 0)) * kBN;
  const int slot = static_cast<int>(a.tile_m) + (along_n ? 0 : i);
  t.k_base = 0;
  t.num_kb = (p.k + kGemmBlockK - 1) / kGemmBlockK;
  if (p.layout & kGemmGroupedK) {
    const int tiles_per_group = (p.m + kBM - 1) / kBM;
    t.valid = slot < p.num_m_tiles;
    const int g = t.valid ? slot / tiles_per_group : 0;
    t.a_row0 = (slot - g * tiles_per_group) * kBM;
    t.c_row0 = g * p.m + t.a_row0;
    t.rows = min(kBM, p.m - t.a_row0);
    t.group = 0;
    t.wait_m = g;
    if (t.valid) {
      t.k_base = __ldcg(p.group_offset + g);
      const int kg = __ldcg(p.group_m + g);
      t.num_kb = kg > 0 ? (kg + kGemmBlockK - 1) / kGemmBlockK : 0;
    }
    t.valid = t.valid && t.n0 < p.n;
    return t;
  }
  if (p.num_groups == 0) {
    t.valid = slot < p.num_m_tiles;
    t.a_row0 = slot * kBM;
    t.rows = min(kBM, p.m - t.a_row0);
    t.group = 0;
    t.wait_m = slot;
  } else {
    int g = 0, b = 0;
    if (p.layout & kGemmExpertMajor) {  // (slot, n block) is a claim position, see kGemmExpertMajor
      int n = 0;
      t.valid = map_group_slot<true>(p, slot * p.num_n_tiles + static_cast<int>(a.tile_n), lane_idx, g, b, &n,
                                     p.num_n_tiles);
      t.n0 = n * kBN;
    } else {
      t.valid = map_group_slot(p, slot, lane_idx, g, b);
    }
    if (t.valid) {
      const int off = __ldcg(p.group_offset + g);
      const int mg = __ldcg(p.group_m + g);
      t.a_row0 = off + b * kBM;
      t.rows = min(kBM, mg - b * kBM);
      if (p.layout & kGemmMergeTails) {
        int tail;
        const int blocks = gemm_group_blocks(mg, true, &tail);
        if (b == blocks - 1) t.tail = tail;  // 0 unless this block took the group's short last one
      }
    }
    t.group = g;
    t.wait_m = g;
  }
  t.c_row0 = t.a_row0;
  t.valid = t.valid && t.n0 < p.n;
  return t;
}

// Operand residency and the ring walk: StageWalk (stage_walk.h).

// The ring carry's record (docs/design/gemm.md, "Ring carry"), written by a task's producer thread
// for the CTA's next task (in the runtime's shared memory, runtime::BodyCarry) and read by every
// thread of that task: how many of its first tile's k blocks are in flight, the ring's walk as that
// task starts it (before its first tile), and that tile's coordinates (so that neither side
// resolves it again: a grouped tile's slot search is two L2 round trips).
struct RingCarry {
  int loads;
  int stage;
  uint32_t phase;
  int kept;
  int kept_group;
  TileCoord tile;
  template <int kStages>
  __device__ __forceinline__ void save(const StageWalk<kStages>& w, const TileCoord& t, int n) {
    loads = n;
    stage = w.stage;
    phase = w.phase;
    kept = w.kept;
    kept_group = w.kept_group;
    tile = t;
  }
  template <int kStages>
  __device__ __forceinline__ void restore(StageWalk<kStages>& w) const {
    w.stage = stage;
    w.phase = phase;
    w.kept = kept;
    w.kept_group = kept_group;
  }
};

// __fdividef: the IEEE division's slow-path check and call sat in the SwiGLU epilogue; for
// x << 0 the denominator overflows to inf and the quotient is 0, which is silu's limit.
__device__ __forceinline__ float silu(float x) { return __fdividef(x, 1.0f + __expf(-x)); }

// Stores two adjacent output columns (col, col+1) of one row (crow = &C[row, 0]); col is even and
// ldc % 8 == 0, so the pair is 4-byte aligned. `scale` is 1 unless kGemmEpiRowScale.
__device__ __forceinline__ void store_pair(__nv_bfloat16* crow, int col, int n_out, bool accumulate, float scale,
                                           float v0, float v1) {
  __nv_bfloat16* c = crow + col;
  v0 *= scale;
  v1 *= scale;
  if (col + 1 < n_out) {
    if (accumulate) {
      const float2 old = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(c));
      v0 += old.x;
      v1 += old.y;
    }
    *reinterpret_cast<__nv_bfloat162*>(c) = __floats2bfloat162_rn(v0, v1);
  } else if (col < n_out) {
    if (accumulate) v0 += __bfloat162float(*c);
    *c = __float2bfloat16_rn(v0);
  }
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// Four 8x8 b16 matrices; lanes 8m..8m+7 give the row addresses of matrix m, register m of every
// lane holds (row lane / 4, columns 2 * (lane % 4) + {0, 1}) of matrix m: the wgmma accumulator's
// layout for one row half and one 8-column block.
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}

// Lane 0 waits until the TMA has read the staging of all but the kPending most recent bulk groups
// it issued (epilogue_tma), then the warp may write that staging again.
template <int kPending>
__device__ __forceinline__ void wait_staging_read(int lane_idx) {
  if (lane_idx == 0) asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(kPending) : "memory");
  __syncwarp();
}

// The row scales of a consumer lane's two rows (8 apart) among its warp's 16 (1 without
// kGemmEpiRowScale, and for rows past t.rows).
__device__ __forceinline__ void warp_row_scales(const GemmParams& p, const TileCoord& t, int row_base, int lane_idx,
                                                float (&scale)[2]) {
  scale[0] = scale[1] = 1.0f;
  if (p.epilogue & kGemmEpiRowScale) {
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const int r = row_base + lane_idx / 4 + 8 * rr;
      if (r < t.rows) scale[rr] = __ldg(p.row_scale + t.c_row0 + r);
    }
  }
}

// Pass q of a warp's epilogue into its staging slice at stage_addr: kNB 8-column output blocks of
// the warp's 16 rows, SwiGLU and the row scale applied in fp32, rounded to bf16, written with
// stmatrix in the 128-byte swizzle (16-byte chunk jj of row r at jj ^ (r % 8)).
// acc: the warpgroup's 64 x BN accumulator, acc(c + 2 * rr + 4 * j) = row 8 * rr + lane / 4 of the
// warp's 16, column 8 * j + 2 * (lane % 4) + c.
template <int kNB, bool kSwiGLU, class Frag>
__device__ __forceinline__ void stage_pass(const Frag& acc, const float (&scale)[2], uint32_t stage_addr, int q,
                                           int lane_idx) {
  // stmatrix row address of this lane: matrix m = lane / 8 (row half m % 2, block pair m / 2), row i.
  const int st_i = lane_idx % 8, st_m = lane_idx / 8;
  const int st_row = 8 * (st_m & 1) + st_i;
  auto value = [&](int rr, int jo, int e) -> float {
    if constexpr (kSwiGLU) {
      const int gi = e + 2 * rr + 8 * jo;  // gate block 2 * jo, up block 2 * jo + 1
      return silu(acc(gi)) * acc(gi + 4) * scale[rr];
    } else {
      return acc(e + 2 * rr + 4 * jo) * scale[rr];
    }
  };
#pragma unroll
  for (int jp = 0; jp < kNB / 2; ++jp) {
    const int jo = q * kNB + 2 * jp;
    const int jj = 2 * jp + (st_m >> 1);
    stmatrix_x4(stage_addr + st_row * 128 + ((jj ^ st_i) << 4),
                pack_bf16x2(value(0, jo, 0), value(0, jo, 1)), pack_bf16x2(value(1, jo, 0), value(1, jo, 1)),
                pack_bf16x2(value(0, jo + 1, 0), value(0, jo + 1, 1)),
                pack_bf16x2(value(1, jo + 1, 0), value(1, jo + 1, 1)));
  }
}

// Epilogue through shared memory (every epilogue without kGemmEpiAccumulate). The warp applies
// SwiGLU / the row scale in fp32, rounds to bf16 and writes its 16 rows x kOutBlocks * 8 output
// columns 64 columns at a time into its private 2 KB staging area with stmatrix, then stores each
// row as 16-byte chunks (8 lanes per 128-byte row segment, full sectors). Rows >= t.rows and
// columns >= n_out are masked; a chunk straddling n_out is stored element by element. Only
// __syncwarp is needed: the staging area is private to the warp (stage_pass writes it).
// kPreact: the kGemmEpiSavePreact store instead -- bf16(acc), unscaled, all n columns, to c_aux.
template <int kOutBlocks, bool kSwiGLU, bool kPreact = false, class Frag>
__device__ __forceinline__ void epilogue_staged(const GemmParams& p, const TileCoord& t, const Frag& acc,
                                                uint32_t stage_addr, int cw, int lane_idx) {
  constexpr int kNB = kOutBlocks < 8 ? kOutBlocks : 8;  // 8-column blocks per pass (<= 64 columns)
  static_assert(kOutBlocks % kNB == 0 && kNB % 2 == 0, "output blocks come in pairs");
  const int row_base = kEpiWarpRows * cw;  // first tile row of this warp
  static_assert(!(kSwiGLU && kPreact), "the pre-activation store has no SwiGLU");
  float scale[2] = {1.0f, 1.0f};
  if (!kPreact) warp_row_scales(p, t, row_base, lane_idx, scale);
  wait_staging_read<0>(lane_idx);  // the TMA stores of the warp's previous tile may still read it
  const int col_base = kSwiGLU ? t.n0 / 2 : t.n0;
  __nv_bfloat16* c = static_cast<__nv_bfloat16*>(kPreact ? p.c_aux : p.c);
  const int64_t ldc = kPreact ? p.ldc_aux : p.ldc;
  const int n_out = kPreact ? p.n : p.n_out;
#pragma unroll
  for (int q = 0; q < kOutBlocks / kNB; ++q) {
    stage_pass<kNB, kSwiGLU>(acc, scale, stage_addr, q, lane_idx);
    __syncwarp();
#pragma unroll
    for (int it = 0; it < kNB / 2; ++it) {
      const int idx = it * 32 + lane_idx;
      const int row = idx / kNB, jj = idx % kNB;
      uint4 v;  // ld.shared, not a generic load: warp_stage comes from the laundered smem pointer
      asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                   : "r"(stage_addr + row * 128 + ((jj ^ (row & 7)) << 4)));
      const int r = row_base + row;
      const int col = col_base + 8 * (q * kNB + jj);
#ifdef KOSMOS_GEMM_PROBE_NO_STORE  // diagnostic (gemm_probe_nostore): the epilogue without its global stores
      if (r < 0) asm volatile("" ::"r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
      continue;
#endif
      if (r < t.rows && col < n_out) {
        __nv_bfloat16* dst = c + static_cast<int64_t>(t.c_row0 + r) * ldc + col;
        if (col + 8 <= n_out) {
          *reinterpret_cast<uint4*>(dst) = v;
        } else {
          uint16_t* d16 = reinterpret_cast<uint16_t*>(dst);
#pragma unroll
          for (int k = 0; k < 8; ++k) {  // constant indices: v stays in registers
            const uint32_t word = k < 2 ? v.x : k < 4 ? v.y : k < 6 ? v.z : v.w;
            if (col + k < n_out) d16[k] = static_cast<uint16_t>(word >> (16 * (k & 1)));
          }
        }
      }
    }
    __syncwarp();
  }
}

// The TMA-store epilogue (kGemmEpiTmaStore; tiles whose rows are all C's, see the caller): as
// epilogue_staged, but each 16 x 64 slice leaves through one TMA store issued by lane 0 (the staging
// is already in the TMA's 128-byte swizzle: chunk jj of row r at jj ^ (r % 8)), asynchronously --
// the warp goes on to its next pass and its next tile's MMAs. Two staging buffers: pass q writes
// buffer q % 2 after the TMA has read what pass q - 2 left there (cp.async.bulk.wait_group.read 1:
// at most the latest group, pass q - 1's, still pending); pass 0 after every earlier slice was read
// (the previous tile's, issued a mainloop ago). Columns past n_out and rows past the tensor are
// clipped by the TMA. The caller waits for the writes before the task returns.
template <int kOutBlocks, bool kSwiGLU, int kBuffers, class Frag>
__device__ __forceinline__ void epilogue_tma(const GemmParams& p, const TileCoord& t, const Frag& acc,
                                             uint32_t warp_stage0, int cw, int lane_idx) {
  // Passes of 64 columns, the TMA box's width (the staging rows are 128 B): a narrower pass (the
  // SwiGLU output of a 64-wide tile, 32 columns) would store the neighbour tile's columns too.
  constexpr int kNB = 8;
  static_assert(kOutBlocks % kNB == 0, "the TMA-store epilogue writes 64-column passes");
  const int row_base = kEpiWarpRows * cw;
  float scale[2];
  warp_row_scales(p, t, row_base, lane_idx, scale);
  const int col_base = kSwiGLU ? t.n0 / 2 : t.n0;
#pragma unroll
  for (int q = 0; q < kOutBlocks / kNB; ++q) {
    const uint32_t stage_addr = warp_stage0 + (kBuffers == 2 ? (q & 1) * kEpiStageBytes : 0);
#ifndef KOSMOS_GEMM_PROBE_NO_EPI_WAIT  // diagnostic (gemm_probe_nowait): no staging waits, wrong C
    if (q == 0 || kBuffers == 1) wait_staging_read<0>(lane_idx);  // one buffer: the previous pass read
    else if (q >= 2) wait_staging_read<1>(lane_idx);
#endif
    stage_pass<kNB, kSwiGLU>(acc, scale, stage_addr, q, lane_idx);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // stmatrix writes -> async proxy
    __syncwarp();
    if (lane_idx == 0) {
      // Formed here, not hoisted out of the tile loop (a 64-bit value live through the mainloop).
      uint64_t map = reinterpret_cast<uint64_t>(&p.tma_c);
      asm volatile("" : "+l"(map));
      asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];"
                   ::"l"(map), "r"(stage_addr), "r"(col_base + 8 * q * kNB), "r"(t.c_row0 + row_base)
                   : "memory");
      asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    }
  }
}

// The merged tail's epilogue (kGemmMergeTails), through the warp's staging buffer. The swapped
// accumulator of consumer thread ct (TileTraits::TiledMmaT: two warpgroups along M, 64 tile columns
// each, MMA_M = BN / 128 blocks) holds element c + 2 rr + 4 j + (kTail / 2) mi = (tile column
// n = 128 mi + 64 wg + 16 w + lane / 4 + 8 rr, tail row r = 8 j + 2 (lane % 4) + c), w = warp in the
// warpgroup: each warp holds all kTail rows of 16 columns per m block. It writes them as bf16 into its
// 2 KB staging ([r][columns]), then lane r stores row r with 16-byte stores (2-byte stores straight
// from the accumulator layout spilled more: STACK 120). Order as the main epilogue: the pre-activation (bf16(acc),
// all n columns, to c_aux), SwiGLU (the up column n + 8 of a gate column n is element + 2), the row
// scale, rounding. Called before the main epilogue, after the warp's previous TMA stores read the staging.
__device__ __forceinline__ void st_shared_b16(uint32_t addr, float v) {
  const __nv_bfloat16 h = __float2bfloat16_rn(v);
  asm volatile("st.shared.b16 [%0], %1;" ::"r"(addr), "h"(*reinterpret_cast<const unsigned short*>(&h)) : "memory");
}
// Lane `lane` stores its row r = lane of the staged [kTail][kCols] bf16 block: kCols / 8 chunks of
// 16 bytes; chunk q goes to crow + col0 + (q / (kCols / kBlocks)) * block_stride + 8 * (q % ...).
template <int kCols, int kBlocks>
__device__ __forceinline__ void store_staged_rows(uint32_t stage, int lane, int tail, __nv_bfloat16* crow, int col0,
                                                  int block_stride, int n_out) {
  if (lane >= tail) return;
  constexpr int kChunks = kCols / 8, kPerBlock = kChunks / kBlocks;
#pragma unroll
  for (int q = 0; q < kChunks; ++q) {
    uint4 v;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(stage + lane * (kCols * 2) + q * 16));
    const int col = col0 + (q / kPerBlock) * block_stride + 8 * (q % kPerBlock);
    if (col + 8 <= n_out) {
      *reinterpret_cast<uint4*>(crow + col) = v;
    } else {
      uint16_t* d16 = reinterpret_cast<uint16_t*>(crow + col);
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const uint32_t word = k < 2 ? v.x : k < 4 ? v.y : k < 6 ? v.z : v.w;
        if (col + k < n_out) d16[k] = static_cast<uint16_t>(word >> (16 * (k & 1)));
      }
    }
  }
}
template <class FragT>
__device__ __forceinline__ void epilogue_tail(const GemmParams& p, const TileCoord& t, const FragT& acc_t, int ct,
                                              uint32_t stage) {
  constexpr int kSize = decltype(size(acc_t))::value;
  constexpr int kPerM = kGemmTailRows / 2;  // elements per m64 block: (2, 2, kTail / 8)
  constexpr int kM = kSize / kPerM;         // m blocks of 128 columns (2 for BN = 256)
  static_assert(kSize % kPerM == 0 && 16 * kM * kGemmTailRows * 2 <= kEpiWarpBytes, "the tail's columns fit the warp's staging");
  // %laneid read here, not ct % 32: derived from ct, a lane offset was computed at the tile's start,
  // held through the mainloop and spilled (the merging op kernel's last spilled word).
  int lane;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
  const int n_warp = 64 * (ct / 128) + 16 * ((ct % 128) / 32);  // the warp's first column of m block 0
  const int r_thr = 2 * (lane % 4), q_thr = lane / 4;
  const int64_t row = t.c_row0 + kGemmBlockM + lane;  // the row lane stores
  // Lane r's row scale, for the threads whose elements are in row r.
  const float my_scale = (p.epilogue & kGemmEpiRowScale) && lane < t.tail ? __ldg(p.row_scale + row) : 1.0f;
  wait_staging_read<0>(lane);
  if (p.epilogue & kGemmEpiSavePreact) {  // [r][16 kM] columns: bf16(acc), unscaled
#pragma unroll
    for (int i = 0; i < kSize; ++i) {
      const int v = i % kPerM, mi = i / kPerM;
      const int r = r_thr + 8 * (v / 4) + v % 2, q = 16 * mi + 8 * ((v / 2) % 2) + q_thr;
      st_shared_b16(stage + r * (32 * kM) + q * 2, acc_t(i));
    }
    __syncwarp();
    store_staged_rows<16 * kM, kM>(stage, lane, t.tail, static_cast<__nv_bfloat16*>(p.c_aux) + row * p.ldc_aux,
                                   t.n0 + n_warp, 128, p.n);
    __syncwarp();
  }
  if (p.epilogue & kGemmEpiSwiGLU) {  // [r][8 kM] output columns n0 / 2 + 64 mi + n_warp / 2 + (0..7)
#pragma unroll
    for (int i = 0; i < kSize; ++i) {
      const int v = i % kPerM, mi = i / kPerM;
      if ((v / 2) % 2 == 1) continue;  // an up element: consumed with its gate element (i - 2)
      const int r = r_thr + 8 * (v / 4) + v % 2, q = 8 * mi + q_thr;
      const float val = silu(acc_t(i)) * acc_t(i + 2 < kSize ? i + 2 : i) * __shfl_sync(0xffffffffu, my_scale, r);
      st_shared_b16(stage + r * (16 * kM) + q * 2, val);
    }
    __syncwarp();
    store_staged_rows<8 * kM, kM>(stage, lane, t.tail, static_cast<__nv_bfloat16*>(p.c) + row * p.ldc,
                                  t.n0 / 2 + n_warp / 2, 64, p.n_out);
  } else {  // [r][16 kM] columns n0 + 128 mi + n_warp + (0..15)
#pragma unroll
    for (int i = 0; i < kSize; ++i) {
      const int v = i % kPerM, mi = i / kPerM;
      const int r = r_thr + 8 * (v / 4) + v % 2, q = 16 * mi + 8 * ((v / 2) % 2) + q_thr;
      st_shared_b16(stage + r * (32 * kM) + q * 2, acc_t(i) * __shfl_sync(0xffffffffu, my_scale, r));
    }
    __syncwarp();
    store_staged_rows<16 * kM, kM>(stage, lane, t.tail, static_cast<__nv_bfloat16*>(p.c) + row * p.ldc,
                                   t.n0 + n_warp, 128, p.n_out);
  }
  __syncwarp();  // the staging is read before the main epilogue writes it
}

// kPairB (experiment, standalone engine only; docs/design/gemm.md, "Where the remaining gap is"):
// the CTA runs in a 2-CTA cluster whose partner computes the tiles below or above it with the same
// B tiles (same n, same K). The pair shares B: k-block kb's B tile is loaded once, by the CTA of
// cluster rank kb % 2, multicast into both CTAs' rings; every consumer warpgroup releases a stage on
// both CTAs' empty barriers (4 arrivals), so neither producer overwrites a stage its partner still
// reads. Both CTAs must run the same tiles' k loops in step; cluster barriers at the start (both
// rings initialised) and the end (no remote arrival or multicast write left in flight).
template <class Cfg, bool kAMn, bool kBMn, bool kSetMaxNReg, bool kPairB = false, class Waiter>
__device__ __forceinline__ void gemm_tile_impl(const GemmParams& p, const GemmTileArgs& a, char* smem,
                                               int thread_idx, Waiter& wait) {
  using Tr = TileTraits<Cfg, kAMn, kBMn>;
  using T = typename Tr::T;
  constexpr int kBM = Cfg::kBM, kBN = Cfg::kBN, kBK = Cfg::kBK, kStages = Cfg::kStages;
  // Operands kept resident between the tiles of a run (StageWalk); not with the cluster pair,
  // whose CTAs must load every k block in step.
  constexpr bool kKeep = !kPairB;
  // (Evaluated at each tile, not held across the call: a value computed here lives through the
  // setmaxnreg split, and holding this flag cost the merging variant 52 bytes of spill.)
  // (Of a problem q and its task's args: the ring carry asks them of the CTA's next task too.)
  auto along_n = [](const GemmTileArgs& args) { return (args.flags & kGemmRunAlongN) != 0; };
  auto keep_allowed = [](const GemmParams& q, const TileCoord& t) {
    return kKeep && (q.layout & kGemmKeepOperands) && t.tail == 0;
  };
  // The group whose B a resident B belongs to (grouped over M or K: B and its K range are per group).
  auto keep_group = [](const GemmParams& q, const TileCoord& t) { return q.num_groups > 0 ? t.wait_m : 0; };
  // The ring carry (docs/design/gemm.md, "Ring carry"): with a hook that offers it, the record the
  // CTA's previous task left for this one -- this call's first k blocks already in flight, the ring's
  // position and its first tile's coordinates -- or null (a fresh ring).
  constexpr bool kCarry = !kPairB && requires { wait.carried_in(); };
  const RingCarry* cin = nullptr;
  if constexpr (kCarry) cin = static_cast<const RingCarry*>(wait.carried_in());

  // smem: 1024-byte aligned (the 128-byte swizzle atoms of the ring need it), checked below.
  constexpr int kTail = Cfg::kTail;
  T* smem_a = reinterpret_cast<T*>(smem);
  T* smem_t = reinterpret_cast<T*>(smem + kStages * Cfg::kStageBytesA);  // kTail x 64 per stage (kTail > 0)
  T* smem_b = reinterpret_cast<T*>(smem + kStages * (Cfg::kStageBytesA + Cfg::kStageBytesT));
  char* epi_stage = smem + Cfg::kRingBytes;  // Cfg::kEpiBuffers x kEpiStageBytes, 2 KB each per consumer warp
  uint64_t* full = reinterpret_cast<uint64_t*>(epi_stage + Cfg::kEpiBuffers * kEpiStageBytes);
  uint64_t* empty = full + kStages;

  const int warp_idx = thread_idx / 32;
  const int lane_idx = thread_idx % 32;
  const int wg_idx = thread_idx / 128;
  const int count = static_cast<int>(a.count);

  if (thread_idx == 0) {
    if (static_cast<uint32_t>(__cvta_generic_to_shared(smem)) & 1023u) __trap();  // see TileConfig::kSmemBytes
    // The producer thread's first TMA needs both descriptors: start fetching them now, under the
    // barrier init and __syncthreads (a one-wave GEMM pays the fetch once per CTA on its critical path).
    cute::prefetch_tma_descriptor(reinterpret_cast<const cute::TmaDescriptor*>(&p.tma_a));
    cute::prefetch_tma_descriptor(reinterpret_cast<const cute::TmaDescriptor*>(&p.tma_b));
    if constexpr (kTail > 0) cute::prefetch_tma_descriptor(reinterpret_cast<const cute::TmaDescriptor*>(&p.tma_t));
    if constexpr (kCarry) wait.handoff_reset();  // the claim helper's go / done (warp 1, below)
    // A carried ring is mid-flight: its barriers keep their phases (the carried loads complete on them).
    if (cin == nullptr) {
#pragma unroll
      for (int s = 0; s < kStages; ++s) {
        cutlass::arch::ClusterBarrier::init(&full[s], 1);
        cutlass::arch::ClusterBarrier::init(&empty[s], kPairB ? 4 : 2);
      }
      cutlass::arch::fence_barrier_init();
      // The previous task may have used this shared memory through the generic proxy (the MoE
      // bodies' row tables, another tile shape's staging); the runtime's barrier after it orders
      // those accesses before this thread, and this fence orders them before its TMA writes.
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
  }
  __syncthreads();
  static_assert(!kPairB || (!kAMn && !kBMn), "kPairB: A row-major, B [N, K] only");
  if constexpr (kPairB) cute::cluster_sync();

  if (wg_idx == 0) {
    if constexpr (kSetMaxNReg) cutlass::arch::warpgroup_reg_dealloc<kProducerRegs>();
    if (warp_idx == 0) {
      const uint64_t hint = static_cast<uint64_t>(TMA::CacheHintSm90::EVICT_NORMAL);
      // The producer thread's k block: waits until the consumers released ring stage walk.stage,
      // expects the block's bytes on its full barrier and issues its TMA loads (those not resident).
      // Of problem q's tile t (this call's, or the CTA's next task's when carrying).
      auto load_k_block = [&](const GemmParams& q, const TileCoord& t, int kb, bool skip_a, bool skip_b,
                              StageWalk<kStages>& walk) {
        const int stage = walk.stage;
        cutlass::arch::ClusterBarrier::wait(&empty[stage], walk.phase ^ 1);
        const bool tail = kTail > 0 && t.tail > 0;  // never with a resident operand (StageWalk)
        const uint32_t bytes = (skip_a ? 0u : uint32_t(Cfg::kStageBytesA)) +
                               (skip_b ? 0u : uint32_t(Cfg::kStageBytesB)) + (tail ? uint32_t(Cfg::kStageBytesT) : 0u);
        cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&full[stage], bytes);
        T* sa = smem_a + walk.a_index(kb, stage) * (kBM * kBK);
        T* sb = smem_b + walk.b_index(kb, stage) * (kBN * kBK);
        const int k0 = t.k_base + kb * kBK;
        if constexpr (kTail > 0) {  // the merged tail's rows, [a_row0 + BM, + kTail) (past them: masked)
          if (tail) SM90_TMA_LOAD_2D::copy(&q.tma_t, &full[stage], hint, smem_t + stage * (kTail * kBK), k0, t.a_row0 + kBM);
        }
        if (skip_a) {
          // A of this k block is resident (an earlier tile of the run loaded it).
        } else if constexpr (kAMn) {
#pragma unroll
          for (int j = 0; j < kBM / 64; ++j)
            SM90_TMA_LOAD_2D::copy(&q.tma_a, &full[stage], hint, sa + j * 64 * kBK, t.a_row0 + 64 * j, k0);
        } else {
          SM90_TMA_LOAD_2D::copy(&q.tma_a, &full[stage], hint, sa, k0, t.a_row0);
        }
        if (skip_b) {
          // B likewise.
        } else if constexpr (kPairB) {
          if (uint32_t(kb & 1) == cute::block_rank_in_cluster())
            SM90_TMA_LOAD_MULTICAST_3D::copy(&q.tma_b, &full[stage], uint16_t(0x3), hint, sb, k0, t.n0, t.group);
        } else if constexpr (kBMn) {
#pragma unroll
          for (int j = 0; j < kBN / 64; ++j)
            SM90_TMA_LOAD_3D::copy(&q.tma_b, &full[stage], hint, sb + j * 64 * kBK, t.n0 + 64 * j, k0, t.group);
        } else {
          SM90_TMA_LOAD_3D::copy(&q.tma_b, &full[stage], hint, sb, k0, t.n0, t.group);
        }
        walk.advance();
      };
      // Before the resident areas change: wait until the consumers released every stage's last use.
      auto drain_ring = [&](const StageWalk<kStages>& walk) {
#pragma unroll
        for (int s = 0; s < kStages; ++s) cutlass::arch::ClusterBarrier::wait(&empty[s], walk.next_parity(s) ^ 1);
      };
      StageWalk<kStages> walk;
      if (cin != nullptr) cin->restore(walk);
      for (int i = 0; i < count; ++i) {
        TileCoord t;
        if (i == 0 && cin != nullptr) t = cin->tile;
        else t = resolve_tile<kBN>(p, a, i, lane_idx);
        if (!t.valid) break;
        bool load_kept, drain;
        const int kept = walk.start_tile(keep_allowed(p, t), t.num_kb, along_n(a), keep_group(p, t), load_kept, drain);
        const bool skip_a = kept == kKeepA && !load_kept, skip_b = kept == kKeepB && !load_kept;
        // The carried k blocks of the first tile are in flight (the previous task drained for them).
        const int first_kb = i == 0 && cin != nullptr ? cin->loads : 0;
        if (lane_idx == 0) {
          if (drain && first_kb == 0) drain_ring(walk);
#pragma unroll 1
          for (int kb = 0; kb < first_kb; ++kb) walk.advance();
          // With the carry, the CTA's next task is claimed kGemmClaimLead k blocks before the run's
          // last load (its claim and the reads after it are a chain of L2 round trips that must end
          // before this task's consumers do); else after the last load (loads_issued).
          const int claim_kb = t.num_kb > kGemmClaimLead ? t.num_kb - kGemmClaimLead : 0;
          for (int kb = first_kb; kb < t.num_kb; ++kb) {
            if (kb == 0) KOSMOS_GEMM_MARK(1, 4);
            if (kb == t.num_kb - 1) KOSMOS_GEMM_MARK(1, 5);
            if constexpr (kCarry) {
              if (i == count - 1 && kb == claim_kb) wait.claim_soon();
            }
            if constexpr (std::is_same_v<decltype(wait(0, 0)), bool>) {
              if (wait(t.wait_m, kb)) fence_proxy_async_global();
            } else {
              wait(t.wait_m, kb);
              fence_proxy_async_global();
            }
            load_k_block(p, t, kb, skip_a, skip_b, walk);
          }
          KOSMOS_GEMM_NEXT(1);
        }
        __syncwarp();
      }
      // Every load of the call is issued: the hook may now use this thread for other work that
      // overlaps the consumers' last k-blocks and epilogue (the runtime claims the next task).
      if constexpr (requires { wait.loads_issued(); }) {
        if (lane_idx == 0) wait.loads_issued();
      }
      // Ring carry: when the CTA's next task (claimed by the helper, warp 1, below) is a ready GEMM
      // tile of this tile shape and these operand majors, load its first tile's first k blocks (up
      // to a ring; those whose operand waits are met, checked without spinning) into the ring now,
      // under this task's last k blocks and epilogue, and leave it the ring's position and the
      // tile's coordinates.
      if constexpr (kCarry) {
        if (wait.carries() && lane_idx == 0) {
          const uint32_t flags = wait.helper_wait();
          if (flags & Waiter::kNextCarry) {
            typename Waiter::NextTask nx{wait.helper_problem(), 0xFFFFFFFFu, (flags & Waiter::kNextFence) != 0};
            RingCarry* out = static_cast<RingCarry*>(wait.carry_out());
            const TileCoord nt = out->tile;  // resolved by the helper
            int n = 0;
            const int most = nt.num_kb < kStages ? nt.num_kb : kStages;
            while (n < most && wait.next_ready(nx, nt.wait_m, n)) ++n;
            if (n > 0) {
              const GemmParams& nq = wait.problem(nx.problem);
              walk.new_task();
              out->save(walk, nt, n);  // the walk as the next call starts it, before its first tile
              bool load_kept, drain;
              const int kept = walk.start_tile(keep_allowed(nq, nt), nt.num_kb, (flags & Waiter::kNextAlongN) != 0,
                                               keep_group(nq, nt), load_kept, drain);
              if (drain) drain_ring(walk);
              if (nx.fence) fence_proxy_async_global();
#pragma unroll 1
              for (int kb = 0; kb < n; ++kb)
                load_k_block(nq, nt, kb, kept == kKeepA && !load_kept, kept == kKeepB && !load_kept, walk);
              wait.carry_commit();
            }
          }
        }
        __syncwarp();
      }
    } else if (warp_idx == 1) {
      // The claim helper (RuntimeGemmWaiter::helper_claim): when the producer thread says go, claim
      // the CTA's next task and, when it is a ready GEMM tile the ring can carry into, resolve its
      // first tile (the whole warp: a grouped tile's slot search) into the carry record; then
      // answer. Off the producer thread, whose loads it would stall, and early: the chain of L2
      // round trips ends under this task's last k blocks rather than after them.
      if constexpr (kCarry) {
        if (wait.carries()) {
          if (lane_idx == 0) wait.helper_claim();
          __syncwarp();  // lane 0's claim (shared memory) before every lane reads it
          GemmTileArgs na{};
          typename Waiter::NextTask nx{};
          uint32_t flags = 0;
          if (wait.next_gemm(na, nx) && wait.problem(nx.problem).tile_shape == p.tile_shape &&
              ((wait.problem(nx.problem).layout ^ p.layout) & (kGemmAColMajor | kGemmBTransposed | kGemmMergeTails)) == 0) {
            const TileCoord nt = resolve_tile<kBN>(wait.problem(nx.problem), na, 0, lane_idx);  // the whole warp
            if (nt.valid && nt.num_kb > 0) {
              flags = Waiter::kNextCarry | (nx.fence ? Waiter::kNextFence : 0u) | (along_n(na) ? Waiter::kNextAlongN : 0u);
              if (lane_idx == 0) static_cast<RingCarry*>(wait.carry_out())->tile = nt;
            }
          }
          if (lane_idx == 0) wait.helper_post(nx.problem, flags);
          __syncwarp();
        }
      }
    }
    if constexpr (kSetMaxNReg) {
      // NOTE: setmaxnreg acts per warp on a per-CTA pool. Warps 1..3 reach this point at once; if
      // they took registers back before the consumers' setmaxnreg.inc had been served, consumer
      // warps could wait forever. So the producer warpgroup re-grows only after both consumer
      // warpgroups have shrunk back (named barrier kRegsBarrier; it also orders this warpgroup's
      // dec and inc as setmaxnreg requires).
      named_barrier_sync(kRegsBarrier, 384);
      cutlass::arch::warpgroup_reg_alloc<kEntryRegs>();
    }
  } else {
    if constexpr (kSetMaxNReg) cutlass::arch::warpgroup_reg_alloc<kConsumerRegs>();
    // Everything the consumers derive from the thread index is computed here, under their
    // 224-register budget: values computed before setmaxnreg (or hoisted to kernel entry) live in
    // the 168-register region and were spilled, then reloaded from local memory in every tile.
    int consumer_thread = thread_idx;
    asm volatile("" : "+r"(consumer_thread));
    const int ct = consumer_thread - 128;
    const int lane = consumer_thread % 32;
    typename Tr::TiledMma mma;
    auto thr = mma.get_thread_slice(ct);
    Tensor sA = make_tensor(make_smem_ptr(smem_a), typename Tr::SmemLayoutA{});  // (BM, BK, S)
    Tensor sB = make_tensor(make_smem_ptr(smem_b), typename Tr::SmemLayoutB{});  // (BN, BK, S)
    Tensor tCsA = thr.partition_A(sA);
    Tensor tCsB = thr.partition_B(sB);
    Tensor tCrA = thr.make_fragment_A(tCsA);  // (MMA, MMA_M, MMA_K, S) smem descriptors
    Tensor tCrB = thr.make_fragment_B(tCsB);
    Tensor acc = partition_fragment_C(mma, Shape<Int<kBM>, Int<kBN>>{});  // ((2,2,BN/8),1,1) fp32
    static_assert(size(acc) == kBN / 2, "expected a 64 x BN accumulator per warpgroup");
    // The merged tail's swapped product (TileTraits; dead code unless kTail > 0).
    typename Tr::TiledMmaT mma_t;
    auto thr_t = mma_t.get_thread_slice(ct);
    Tensor sT = make_tensor(make_smem_ptr(smem_t), typename Tr::SmemLayoutT{});  // (kTail, BK, S)
    Tensor tTrA = thr_t.make_fragment_A(thr_t.partition_A(sB));                 // B stage as A: (BN, BK, S)
    Tensor tTrB = thr_t.make_fragment_B(thr_t.partition_B(sT));
    Tensor acc_t = partition_fragment_C(mma_t, Shape<Int<kBN>, typename Tr::TN>{});  // (n, tail row)
    const bool signal_thread = (ct % 128) == 0;

    StageWalk<kStages> walk;
    if (cin != nullptr) cin->restore(walk);
    for (int i = 0; i < count; ++i) {
      TileCoord t;
      if (i == 0 && cin != nullptr) t = cin->tile;
      else t = resolve_tile<kBN>(p, a, i, lane);
      if (!t.valid) break;
      bool load_kept, drain;  // the producer's business; the consumers need the walk's areas
      walk.start_tile(keep_allowed(p, t), t.num_kb, along_n(a), keep_group(p, t), load_kept, drain);

      if (ct == 0) KOSMOS_GEMM_MARK(0, 0);
      mma.accumulate_ = GMMA::ScaleOut::Zero;
      warpgroup_fence_operand(acc);
      const bool tail = kTail > 0 && t.tail > 0;
      if constexpr (kTail > 0) {
        mma_t.accumulate_ = GMMA::ScaleOut::Zero;
        warpgroup_fence_operand(acc_t);
      }
      int prev_stage = -1;
      const int num_kb = t.num_kb;
      if (num_kb == 0) {  // grouped-K group without rows: the tile is zeros (nothing was loaded)
#pragma unroll
        for (int e = 0; e < size(acc); ++e) acc(e) = 0.0f;
        // (acc_t too: never read then -- no tail without k blocks -- but a path on which the
        // previous tile's acc_t could reach its epilogue keeps it live through every main epilogue.)
        if constexpr (kTail > 0) {
#pragma unroll
          for (int e = 0; e < size(acc_t); ++e) acc_t(e) = 0.0f;
        }
      }
      // The k loop, with or without the merged tail's wgmmas (two copies, so that each k block's
      // batch is straight-line code: a branch inside it made ptxas close the batch with a dummy
      // wgmma in every k block of the tiles without a tail).
      auto k_loop = [&](auto with_tail) {
        for (int kb = 0; kb < num_kb; ++kb) {
          const int stage = walk.stage;
          cutlass::arch::ClusterBarrier::wait(&full[stage], walk.phase);
          const int a_idx = walk.a_index(kb, stage), b_idx = walk.b_index(kb, stage);
          if (kb == 0 && ct == 0) KOSMOS_GEMM_MARK(0, 1);
          warpgroup_arrive();
#pragma unroll
          for (int k = 0; k < size<2>(tCrA); ++k) {
            cute::gemm(mma, tCrA(_, _, k, a_idx), tCrB(_, _, k, b_idx), acc);
            mma.accumulate_ = GMMA::ScaleOut::One;
          }
          if constexpr (decltype(with_tail)::value) {  // no resident operand with a tail: b_idx == stage
#pragma unroll
            for (int k = 0; k < size<2>(tTrA); ++k) {
              cute::gemm(mma_t, tTrA(_, _, k, stage), tTrB(_, _, k, stage), acc_t);
              mma_t.accumulate_ = GMMA::ScaleOut::One;
            }
          }
          warpgroup_commit_batch();
          warpgroup_wait<1>();
          if (prev_stage >= 0 && signal_thread) {
            cutlass::arch::ClusterBarrier::arrive(&empty[prev_stage]);
            if constexpr (kPairB) cutlass::arch::ClusterBarrier::arrive(&empty[prev_stage], cute::block_rank_in_cluster() ^ 1u, 1u);
          }
          prev_stage = stage;
          walk.advance();
        }
      };
      if constexpr (kTail > 0) {
        if (tail) k_loop(std::true_type{});
        else k_loop(std::false_type{});
      } else {
        k_loop(std::false_type{});
      }
      warpgroup_wait<0>();
      if (signal_thread && prev_stage >= 0) {
        cutlass::arch::ClusterBarrier::arrive(&empty[prev_stage]);
        if constexpr (kPairB) cutlass::arch::ClusterBarrier::arrive(&empty[prev_stage], cute::block_rank_in_cluster() ^ 1u, 1u);
      }
      warpgroup_fence_operand(acc);
      if constexpr (kTail > 0) warpgroup_fence_operand(acc_t);
      if (ct == 0) KOSMOS_GEMM_MARK(0, 2);

      if ((p.epilogue & kGemmEpiAccumulate) == 0) {
        const int cw = ct / 32;  // consumer warp 0..7 = tile rows 16 * cw ..
        const uint32_t warp_stage = static_cast<uint32_t>(__cvta_generic_to_shared(epi_stage)) + cw * kEpiWarpBytes;
        // The merged tail first (after the main epilogue its 32 accumulators would live through
        // that one's deepest register use; both orders leave the merging kernel 24 bytes of stack).
        if constexpr (kTail > 0) {
          if (tail) epilogue_tail(p, t, acc_t, ct, warp_stage);
        }
        // TMA stores for tiles whose 128 rows are all C's: a dense tile (the TMA clips rows past m),
        // or a grouped one with every row in its group (past them are the next group's rows).
        const bool tma = (p.epilogue & kGemmEpiTmaStore) && (t.rows == kBM || (p.num_groups == 0 && !(p.layout & kGemmGroupedK)));
        if (p.epilogue & kGemmEpiSwiGLU) {
          if (p.epilogue & kGemmEpiSavePreact) epilogue_staged<kBN / 8, false, true>(p, t, acc, warp_stage, cw, lane);
          if constexpr (kBN / 16 >= 8) {  // 64 output columns or more (not the 128x64 tile)
            if (tma) epilogue_tma<kBN / 16, true, Cfg::kEpiBuffers>(p, t, acc, warp_stage, cw, lane);
            else epilogue_staged<kBN / 16, true>(p, t, acc, warp_stage, cw, lane);
          } else {
            epilogue_staged<kBN / 16, true>(p, t, acc, warp_stage, cw, lane);
          }
        } else {
          if (tma) epilogue_tma<kBN / 8, false, Cfg::kEpiBuffers>(p, t, acc, warp_stage, cw, lane);
          else epilogue_staged<kBN / 8, false>(p, t, acc, warp_stage, cw, lane);
        }
        if (ct == 0) {
          KOSMOS_GEMM_MARK(0, 3);
          KOSMOS_GEMM_NEXT(0);
        }
        continue;
      }
      // Accumulate (C += ...): masked direct stores from the wgmma accumulator layout. Thread (warp w of its
      // warpgroup, lane l) holds rows r0 + 8 * rr (rr < 2), r0 = 64 * wg + 16 * w + l / 4, and
      // columns 8 * j + 2 * (l % 4) + {0, 1} (j < BN / 8): acc index = c + 2 * rr + 4 * j.
      const int r0 = (ct / 128) * 64 + ((ct % 128) / 32) * 16 + lane / 4;
      const int c0 = 2 * (lane % 4);
      const bool swiglu = (p.epilogue & kGemmEpiSwiGLU) != 0;
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        const int r = r0 + 8 * rr;
        if (r < t.rows) {
          const int row = t.c_row0 + r;
          __nv_bfloat16* crow = static_cast<__nv_bfloat16*>(p.c) + static_cast<int64_t>(row) * p.ldc;
          const float scale = (p.epilogue & kGemmEpiRowScale) ? __ldg(p.row_scale + row) : 1.0f;
          const bool accumulate = (p.epilogue & kGemmEpiAccumulate) != 0;
          if (swiglu) {
            const int col0 = t.n0 / 2 + c0;  // gate/up blocks of 8 -> output column n0/2 + 8j + c0
#pragma unroll
            for (int j = 0; j < kBN / 16; ++j) {
              const int gi = 2 * rr + 4 * (2 * j), ui = gi + 4;
              store_pair(crow, col0 + 8 * j, p.n_out, accumulate, scale, silu(acc(gi)) * acc(ui), silu(acc(gi + 1)) * acc(ui + 1));
            }
          } else {
            const int col0 = t.n0 + c0;
#pragma unroll
            for (int j = 0; j < kBN / 8; ++j) {
              const int ai = 2 * rr + 4 * j;
              store_pair(crow, col0 + 8 * j, p.n_out, accumulate, scale, acc(ai), acc(ai + 1));
            }
          }
        }
      }
    }
    // Before the task returns its staging must be read (the next task reuses the shared memory),
    // and, when the runtime will signal the task's outputs to other tasks, written: the bulk
    // stores' writes done and ordered before the generic-proxy release that follows
    // (docs/design/gemm.md, "TMA-store epilogue"). A task nobody waits for leaves its last
    // slices draining (the launch's end completes them).
    if (lane == 0 && (p.epilogue & kGemmEpiTmaStore)) {
      bool visible = true;
      if constexpr (requires { wait.outputs_awaited(); }) visible = wait.outputs_awaited();
      if (visible) {
        asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
        asm volatile("fence.proxy.async.global;" ::: "memory");
      } else {
        asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
      }
    }
    if constexpr (kSetMaxNReg) {
      named_barrier_sync(kConsumerBarrier, 256);  // the warpgroup syncs between its inc and dec
      cutlass::arch::warpgroup_reg_dealloc<kEntryRegs>();
      named_barrier_arrive(kRegsBarrier, 384);
    }
  }
  if constexpr (kPairB) cute::cluster_sync();
}

}  // namespace detail

// Shared memory the task body needs (including 1 KB alignment slack), per tile shape.
__host__ __device__ constexpr int gemm_smem_bytes(GemmTileShape s) {
  return s == GemmTileShape::k128x128  ? detail::Config128x128::kSmemBytes
         : s == GemmTileShape::k128x64 ? detail::Config128x64::kSmemBytes
                                       : detail::Config128x256::kSmemBytes;
}
inline constexpr int kGemmSmemBytesMax = gemm_smem_bytes(GemmTileShape::k128x256) > gemm_smem_bytes(GemmTileShape::k128x128)
                                             ? (gemm_smem_bytes(GemmTileShape::k128x256) > gemm_smem_bytes(GemmTileShape::k128x64)
                                                    ? gemm_smem_bytes(GemmTileShape::k128x256)
                                                    : gemm_smem_bytes(GemmTileShape::k128x64))
                                             : (gemm_smem_bytes(GemmTileShape::k128x128) > gemm_smem_bytes(GemmTileShape::k128x64)
                                                    ? gemm_smem_bytes(GemmTileShape::k128x128)
                                                    : gemm_smem_bytes(GemmTileShape::k128x64));

namespace detail {
template <class Cfg, class Waiter>
__device__ __forceinline__ void gemm_tile_layouts(const GemmParams& p, const GemmTileArgs& a, char* smem,
                                                  int thread_idx, Waiter& wait) {
  const bool a_mn = (p.layout & kGemmAColMajor) != 0;
  const bool b_mn = (p.layout & kGemmBTransposed) == 0;
  if (a_mn) {
    if (b_mn) gemm_tile_impl<Cfg, true, true, true>(p, a, smem, thread_idx, wait);
    else      gemm_tile_impl<Cfg, true, false, true>(p, a, smem, thread_idx, wait);
  } else {
    if (b_mn) gemm_tile_impl<Cfg, false, true, true>(p, a, smem, thread_idx, wait);
    else      gemm_tile_impl<Cfg, false, false, true>(p, a, smem, thread_idx, wait);
  }
}
}  // namespace detail

// Experiment (standalone engine only, launched in 2-CTA clusters): the 128x256 tile of an NT problem
// (A row-major, B [N, K]) with B shared by the cluster pair (detail::gemm_tile_impl, kPairB). Both
// CTAs of a cluster must call it together, for tiles of the same n block and the same K.
template <class Waiter>
__device__ __forceinline__ void gemm_tile_pair_b(const GemmParams& p, const GemmTileArgs& a, char* smem,
                                                 int thread_idx, Waiter& wait) {
  detail::gemm_tile_impl<detail::Config128x256, false, false, true, true>(p, a, smem, thread_idx, wait);
}

// The task body. Dispatches on the problem's tile shape and operand majors (uniform branches).
// kMergedTails: whether the merged-tail tile (kGemmMergeTails) is compiled in. It costs the whole
// kernel a few spilled registers, so the op kernel has a variant without it for plans that do not
// merge; a problem with the flag reaching a kernel without it traps.
template <class Waiter, bool kMergedTails = true>
__device__ __forceinline__ void gemm_tile(const GemmParams& p, const GemmTileArgs& a, char* smem, int thread_idx,
                                          Waiter& wait) {
  using namespace detail;
  if (p.tile_shape == GemmTileShape::k128x128) {
    gemm_tile_layouts<Config128x128>(p, a, smem, thread_idx, wait);
  } else if (p.tile_shape == GemmTileShape::k128x64) {
    gemm_tile_layouts<Config128x64>(p, a, smem, thread_idx, wait);
  } else if (p.layout & kGemmMergeTails) {  // make_gemm_params: grouped, A row-major, B [K, N] only
    if constexpr (kMergedTails) gemm_tile_impl<Config128x256Tail, false, true, true>(p, a, smem, thread_idx, wait);
    else __trap();
  } else {
    gemm_tile_layouts<Config128x256>(p, a, smem, thread_idx, wait);
  }
}

}  // namespace kosmos::kernels::gemm
