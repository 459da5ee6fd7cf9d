// stage_walk: which shared-memory area each k block of a GEMM tile goes through, and with which
// mbarrier parity -- the part of gemm_tile's pipeline that the producer and the consumers must
// compute identically. Host-compilable, so the CPU test (tests/unit/test_stage_walk.cpp) runs the
// same code against a model of the barriers and the areas.
//
// Shared memory of a tile (TileConfig, no merged tail): A areas [0, S) of kStageBytesA each, then B
// areas [0, S) of kStageBytesB each. Area indices below are in units of the operand's own stage
// size, counted from the start of its ring (so an index past S, or below 0, names bytes of the
// other operand's areas).
//
// Operand residency (kGemmKeepOperands). The k blocks of a call go through the ring in order, as
// always. A tile whose run shares one operand -- A along N (one slot: the same rows and K range),
// B down M (dense, or grouped within one group: the same columns and K range) -- keeps that
// operand resident when its k blocks fit: k block kb of the kept operand lives in the operand's
// area of stage kb, loaded once by the first such tile, while the other operand streams through
// the ring. Up to S k blocks keep with the whole ring streaming (64 of 192 KB per 128 x 256 tile
// when B stays, 128 KB when A stays). A tile of exactly S + 1 k blocks (K = 257..320 at 128 x 256:
// the weight gradients of experts with that many rows) keeps too: its k block S goes into the
// other operand's areas of the ring's last stages, and the streaming operand cycles through the
// stages before them only (RingGeometry: 2 of 4 stages when B stays at 128 x 256, 3 when A stays).
// Before a tile starts keeping an operand, stops, switches to another group's B or changes its
// ring, the producer drains the ring (waits until the consumers released every stage), since the
// resident areas may still be read by earlier k blocks or hold what they read; the walk then starts
// again at stage 0. No deadlock: a drain waits only for k blocks of earlier tiles, each released at
// the latest when its tile's mainloop ends.
//
// Parity: each stage's full / empty mbarriers complete one phase per use of the stage; `parity`
// keeps, per stage, the parity that its next use completes with (a bit per stage, since a shorter
// ring uses some stages more often than others).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define KOSMOS_STAGE_WALK_FN __host__ __device__ __forceinline__
#else
#define KOSMOS_STAGE_WALK_FN inline
#endif

namespace kosmos::kernels::gemm::detail {

enum : int { kKeepNone = 0, kKeepA = 1, kKeepB = 2 };

// Where a tile of BM x BN (k blocks of BK, S stages; stage bytes a = BM * BK * 2, b = BN * BK * 2)
// puts the extra (S + 1st) k block of a kept operand. kPartial = false (the merged-tail tile,
// whose tail areas sit between the A and B rings): no partial keep.
template <int kBM, int kBN, int kBK, int kStages_, bool kPartial = true>
struct RingGeometry {
  static constexpr int kStages = kStages_;
  static constexpr int kStageBytesA = kBM * kBK * 2;
  static constexpr int kStageBytesB = kBN * kBK * 2;
  // B kept: its block S takes the A areas of the last kSpanB stages; A streams through the others.
  static constexpr int kSpanB = (kStageBytesB + kStageBytesA - 1) / kStageBytesA;
  static constexpr int kRingKeepB = kPartial ? kStages - kSpanB : 0;
  static constexpr int kExtraB = -(kSpanB * kStageBytesA) / kStageBytesB;  // B index of A area S - kSpanB
  // A kept: its block S takes the B areas of the last kSpanA stages; B streams through the others.
  static constexpr int kSpanA = (kStageBytesA + kStageBytesB - 1) / kStageBytesB;
  static constexpr int kRingKeepA = kPartial ? kStages - kSpanA : 0;
  static constexpr int kExtraA = (kStages * kStageBytesA + (kStages - kSpanA) * kStageBytesB) / kStageBytesA;
  static_assert((kSpanB * kStageBytesA) % kStageBytesB == 0, "the extra B block must start on a B stage boundary");
  static_assert((kStages * kStageBytesA + (kStages - kSpanA) * kStageBytesB) % kStageBytesA == 0,
                "the extra A block must start on an A stage boundary");
  static_assert(!kPartial || (kRingKeepA >= 2 && kRingKeepB >= 2), "a partial keep needs at least two streaming stages");
};

template <class Geo>
struct StageWalk {
  static constexpr int kStages = Geo::kStages;
  static_assert(kStages <= 32, "one parity bit per stage");
  int stage = 0;          // next stage of the ring
  int ring = kStages;     // stages the streaming operand cycles through (fewer with a partial keep)
  uint32_t parity = 0;    // bit s: the parity the next use of stage s completes with
  int kept = kKeepNone;   // what the resident areas hold
  int kept_group = -1;    // the group of the resident B
  int kept_kb = 0;        // k blocks of the resident operand

  // The mode of a tile (kKeep*), identical for the producer and the consumers. keep: residency is
  // allowed for this call and tile (kGemmKeepOperands, no merged tail); along_n: the run walks N
  // (shares A), else M (shares B); group: B's group (0 when dense). load_kept: the tile loads the
  // resident operand into its areas; drain: the producer must wait for every stage first.
  KOSMOS_STAGE_WALK_FN int start_tile(bool keep, int num_kb, bool along_n, int group, bool& load_kept, bool& drain) {
    const int want_op = along_n ? kKeepA : kKeepB;
    const int partial_ring = along_n ? Geo::kRingKeepA : Geo::kRingKeepB;
    const bool fits = keep && num_kb > 0 && (num_kb <= kStages || (num_kb == kStages + 1 && partial_ring > 0));
    const int want = fits ? want_op : kKeepNone;
    const int want_ring = want != kKeepNone && num_kb > kStages ? partial_ring : kStages;
    const bool same = want != kKeepNone && want == kept && (want == kKeepA || group == kept_group) && num_kb == kept_kb;
    drain = !same && (kept != kKeepNone || want != kKeepNone);
    load_kept = want != kKeepNone && !same;
    if (drain) stage = 0;  // every stage is free once drained: start the (maybe shorter) ring over
    ring = want_ring;
    kept = want;
    kept_group = group;
    kept_kb = num_kb;
    return want;
  }
  // The parity the next use of stage s completes with; its previous use's release has the other.
  KOSMOS_STAGE_WALK_FN uint32_t next_parity(int s) const { return (parity >> s) & 1u; }
  KOSMOS_STAGE_WALK_FN void advance() {
    parity ^= 1u << stage;
    if (++stage == ring) stage = 0;
  }
  // The area (in the operand's stage units, see above) of k block kb of A / B of the current tile,
  // the ring's current stage being `s`.
  KOSMOS_STAGE_WALK_FN int a_index(int kb, int s) const {
    return kept != kKeepA ? s : kb < kStages ? kb : Geo::kExtraA;
  }
  KOSMOS_STAGE_WALK_FN int b_index(int kb, int s) const {
    return kept != kKeepB ? s : kb < kStages ? kb : Geo::kExtraB;
  }
};

}  // namespace kosmos::kernels::gemm::detail
