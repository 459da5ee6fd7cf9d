// stage_walk: which shared-memory area each k block of a GEMM tile goes through, and with which
// mbarrier parity -- the part of gemm_tile's pipeline that the producer and the consumers must
// compute identically. Host-compilable, so the CPU test (tests/unit/test_stage_walk.cpp) runs the
// same code against a model of the barriers and the areas.
//
// Shared memory of a tile: A areas [0, S) of one A k block each, then B areas [0, S) of one B k
// block each (gemm_tile.cuh, TileConfig); a_index / b_index name an area of the operand's ring.
//
// Operand residency (kGemmKeepOperands). The k blocks of a call go through the ring in order (stage,
// phase), as always. A tile of at most kStages k blocks whose run shares one operand -- A along N
// (one slot: the same rows and K range), B down M (dense, or grouped within one group: the same
// columns and K range) -- keeps that operand resident: its k block kb lives in the operand's area
// of stage kb, loaded once by the first such tile, while the other operand streams through the
// ring with its full prefetch depth (64 of 192 KB per 128 x 256 tile when B stays, 128 KB when A
// stays). Before a tile starts keeping an operand, stops, or switches to another group's B, the
// producer drains the ring (waits until the consumers released every stage), since the resident
// areas may still be read by earlier k blocks or hold what they read. No deadlock: a drain waits
// only for k blocks of earlier tiles, each released at the latest when its tile's mainloop ends.
//
// Tiles of kStages + 1 k blocks keep nothing. Keeping them too (the extra block in the other
// operand's areas of the last stages, that operand streaming through the stages before them) was
// built and measured in the twenty-fifth session: correct, but slower -- the Qwen3 proxy's
// weight gradients lost more to the shorter ring's prefetch depth than they saved in loads
// (docs/design/gemm.md, "Kept operands").
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define KOSMOS_STAGE_WALK_FN __host__ __device__ __forceinline__
#else
#define KOSMOS_STAGE_WALK_FN inline
#endif

namespace kosmos::kernels::gemm::detail {

// kKeepStale: the resident areas hold an operand of the previous task (new_task); no tile shares it.
enum : int { kKeepNone = 0, kKeepA = 1, kKeepB = 2, kKeepStale = 3 };

template <int kStages>
struct StageWalk {
  int stage = 0;         // next ring stage
  uint32_t phase = 0;    // parity of the ring's current lap
  int kept = kKeepNone;  // what the resident areas hold
  int kept_group = -1;   // the group of the resident B

  // The mode of a tile (kKeep*), identical for the producer and the consumers. keep: residency is
  // allowed for this call and tile (kGemmKeepOperands, no merged tail); along_n: the run walks N
  // (shares A), else M (shares B); group: B's group (0 when dense). load_kept: the tile loads the
  // resident operand into the stage areas; drain: the producer must wait for every stage first.
  KOSMOS_STAGE_WALK_FN int start_tile(bool keep, int num_kb, bool along_n, int group, bool& load_kept, bool& drain) {
    const bool fits = keep && num_kb > 0 && num_kb <= kStages;
    const int want = !fits ? kKeepNone : along_n ? kKeepA : kKeepB;
    const bool same = want != kKeepNone && want == kept && (want == kKeepA || group == kept_group);
    drain = !same && (kept != kKeepNone || want != kKeepNone);
    load_kept = want != kKeepNone && !same;
    kept = want;
    kept_group = group;
    return want;
  }
  // The walk goes on into the CTA's next task (the ring carry, gemm_tile.cuh): whatever is resident
  // belongs to a run of the task before, which no tile of the next one shares (another tile's
  // columns or rows), so the next tile that keeps or streams drains first.
  KOSMOS_STAGE_WALK_FN void new_task() {
    if (kept != kKeepNone) kept = kKeepStale;
  }
  // The parity the next use of stage s completes with; its previous use's release has the other.
  KOSMOS_STAGE_WALK_FN uint32_t next_parity(int s) const { return s >= stage ? phase : phase ^ 1u; }
  KOSMOS_STAGE_WALK_FN void advance() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1;
    }
  }
  // The area of k block kb of A / B of the current tile, the ring being at stage s.
  KOSMOS_STAGE_WALK_FN int a_index(int kb, int s) const { return kept == kKeepA ? kb : s; }
  KOSMOS_STAGE_WALK_FN int b_index(int kb, int s) const { return kept == kKeepB ? kb : s; }
};

}  // namespace kosmos::kernels::gemm::detail
