// MoE task kinds (route, offsets, dispatch, combine): payload, buffer ids and the host bodies.
// The device bodies are in moe_tasks.cuh; both implement the same math, documented here.
//
// World W, rank r; T tokens per rank, k slots per token, E experts, L = E / W experts per rank
// (expert e lives on rank e / L as local group e % L), H hidden, I intermediate. Per rank
// (element types in brackets; MoeBufferId order = the plan's buffer order):
//   kX       [T, H]            bf16   input tokens
//   kIds     [T, k]            int32  expert of slot (t, j); outside [0, E): the slot is dropped
//   kWeights [T, k]            fp32   router weight of slot (t, j)
//   kGateUp  [L, H, 2I]        bf16   local experts' gate|up, SwiGLU-interleaved (gemm_params.h)
//   kDown    [L, I, H]         bf16   local experts' down projection
//   kY       [T, H]            bf16   output
//   kCounts  [W, E]            int32  row s = source s's entries per expert (pushed by s's route)
//   kRoute   [2E + 2Tk + CE]   int32  cnt[E] | start[E] (exclusive prefix of cnt) | pos[T k] | perm[T k]
//                                     | chunk_cnt[C][E] (C = kMaxRouteChunks: route's per-chunk counts)
//   kLayout  [2L + E]          int32  group_m[L] | group_offset[L] | send_off[E]
//   kRecvX   [rows_max, H]     bf16   received rows, grouped by local expert (GEMM1's A)
//   kRecvW   [rows_max]        fp32   router weight of each received row (GEMM2's row scale)
//   kAct     [rows_max, I]     bf16   SwiGLU(recv_x · gate_up)           (GEMM1's C, GEMM2's A)
//   kOut     [rows_max, H]     bf16   w · act · down                      (GEMM2's C)
// rows_max = W * T * k (every token of every rank routed here: no token is ever dropped).
//
// Backward (MoeConfig::backward; flag kMoeFlagBackward in the payload), extra buffers per rank:
//   kDy      [T, H]            bf16   upstream gradient dy
//   kDx      [T, H]            bf16   dx (k slot terms summed in slot order in fp32)
//   kDWeights[T, k]            fp32   d weights[t, j] = <dy_t · down_eᵀ, act>  (0 for dropped slots)
//   kDGateUp [L, H, 2I]        bf16   dGU, SwiGLU-interleaved like kGateUp
//   kDDown   [L, I, H]         bf16   dD
//   kRecvDy  [rows_pad, H]     bf16   received dy rows (same rows as kRecvX)
//   kH1      [rows_pad, 2I]    bf16   pre-activation recv_x · gate_up (interleaved): recomputed, or
//                                     saved by the forward's GEMM1 (MoeConfig::save_activations)
//   kDAct    [rows_pad, I]     bf16   dA' = recv_dy · downᵀ (not scaled by w)
//   kDH1     [rows_pad, 2I]    bf16   dH1 = SwiGLU'(h1) ⊙ (w · dA'), interleaved
//   kRecvDw  [rows_pad]        fp32   <dA', act> per received row (the router-weight gradient)
//   and reused:  kAct = w · act [rows_pad, I] (dD's A operand), kOut = dX rows [rows_pad, H].
// rows_pad = W T k + L (kMoeRowAlign - 1): with kMoeFlagBackward the offsets task pads every
// group's first row to a multiple of kMoeRowAlign = 64 (the GEMM k block), and the SwiGLU-backward
// task writes ZEROS into the padding rows of every operand of the grouped-K weight-gradient GEMMs
// (recv_x, recv_dy, act, dH1), so a k block that runs past a group's end adds nothing.
//
//   swiglu_backward(d, slots [a, a + b)): slots as the grouped GEMMs number them (group-major
//                128-row blocks, from group_m); for each row of group g in the slot with
//                i = row - group_offset[g] < group_m[g]:
//                  gate, up from h1; s = sigmoid(gate); act = gate s up; dot = Σ_c dA'[c] act[c]
//                  recv_dw = dot; dA = w dA'; dgate = dA up s (1 + gate (1 - s)); dup = dA gate s
//                  act_w = w act;  dH1 = (dgate, dup) interleaved
//                and for the padding rows i in [group_m[g], round_up(group_m[g], 64)): zeros.
//
// Tasks:
//   route(s):    cnt[e] = #entries of s for e; pos[t k + j] = rank of (t, j) among s's entries for
//                the same expert, stable (t-major, then j); perm[start[e] + pos] = t k + j. Pushes
//                cnt into row s of kCounts on EVERY rank (virtual ranks: the same allocation;
//                across GPUs: peer stores through the buffer table).
//                Split over C chunks of the T k entries (C = 1: one task does it all): count(s, c)
//                writes chunk_cnt[c][e] = #entries of chunk c for e; rank(s, c), after every count
//                of s, ranks chunk c's entries from base Σ_{c' < c} chunk_cnt[c'][e] (the same pos
//                and perm as one pass), and rank(s, 0) writes cnt, start and pushes the counts.
//   offsets(r):  from kCounts (all W rows present): group_m[l] = Σ_s counts[s][r L + l],
//                group_offset = exclusive prefix of group_m; send_off[e] = (row of e's first entry
//                in its owner d's receive buffer) + Σ_{s' < r} counts[s'][e], i.e. where r's entries
//                for e start on d. Source-major inside a group: rows of e on d are s = 0, 1, ....
//   dispatch(s, d, experts [e0, e1) of d, slice): for every entry of s for e in the range, row i
//                with i % num_slices == slice:
//                recv_x_d[send_off_s[e] + i] = x_s[t], recv_w_d[...] = w_s[t, j].
//   combine(s, tokens [t0, t1)): y_s[t] = bf16( Σ_{j = 0..k-1, in order} float(out_d[send_off_s[e] + pos]) )
//                with d = e / L (fp32 sum in slot order; no atomics; dropped slots add nothing).
#pragma once

#include <cstdint>

#include "kosmos/plan.h"

namespace kosmos::kernels {

enum MoeBufferId : uint16_t {
  kMoeX = 0,
  kMoeIds,
  kMoeWeights,
  kMoeGateUp,
  kMoeDown,
  kMoeY,
  kMoeCounts,
  kMoeRoute,
  kMoeLayout,
  kMoeRecvX,
  kMoeRecvW,
  kMoeAct,
  kMoeOut,
  kMoeDy,
  kMoeDx,
  kMoeDWeights,
  kMoeDGateUp,
  kMoeDDown,
  kMoeRecvDy,
  kMoeH1,
  kMoeDAct,
  kMoeDH1,
  kMoeRecvDw,
  kMoeNumBuffers,
};

inline constexpr uint32_t kMaxTopK = 16;     // slots per token
inline constexpr uint32_t kMaxMoeExperts = 256;  // E (route's prefix: 8 experts per lane)
inline constexpr uint32_t kMaxRouteChunks = 16;  // C: route tasks per source rank and stage
inline constexpr uint32_t kMoeRouteStageRank = 1u;  // route payload b: 0 = count(s, c), 1 = rank(s, c)
inline constexpr int32_t kMoeRowAlign = 64;        // backward: group offsets padded to the GEMM k block
inline constexpr uint32_t kMoeFlagBackward = 1u;   // MoeArgs::flags, see above
inline constexpr uint32_t kMoeFlagPadRows = 2u;    // forward with saved activations: offsets pad as the backward's
inline constexpr uint32_t kMoeFlagDyOnly = 4u;     // backward after such a forward: dispatch moves dy rows only
inline constexpr int kMoeSlotsPerTaskMax = 64;     // swiglu_backward: slots per task

// Payload of every MoE kind (a, b, c: kind-specific, see above).
//   route: a = chunk | num_chunks << 16 (num_chunks 0 means 1), b = stage (0 count, 1 rank; with one
//          chunk there is only the rank stage, which counts for itself)
//   offsets: -
//   dispatch: a = destination rank d | slice << 16 | num_slices << 24 (rows i % num_slices == slice;
//             num_slices 0 means 1), b = first expert (global id), c = one past the last
//   combine:  b = first token, c = one past the last token
//   swiglu_backward: a = first slot, b = number of slots (<= kMoeSlotsPerTaskMax)
// flags (kMoeFlagBackward): offsets pad group offsets; dispatch also moves dy rows; combine sums
// kOut into kDx and gathers kRecvDw into kDWeights. kMoeFlagPadRows (forward of a layer with
// MoeConfig::save_activations): offsets pad as the backward does, so recv_x, recv_w and the GEMM1
// pre-activation kH1 land in the backward's rows. kMoeFlagDyOnly (with kMoeFlagBackward, the
// backward after such a forward): dispatch moves the dy rows only.
struct MoeArgs {
  uint32_t tokens;        // T
  uint32_t hidden;        // H
  uint16_t num_experts;   // E
  uint16_t top_k;         // k
  uint16_t local_experts; // L = E / W
  uint16_t world;         // W
  uint32_t a, b, c;
  uint32_t intermediate;  // I (swiglu_backward)
  uint32_t flags;
};
static_assert(sizeof(MoeArgs) <= plan::kTaskArgWords * 4);

KOSMOS_HOST_DEVICE inline bool is_moe_kind(plan::TaskKind k) {
  return k == plan::TaskKind::kMoeRoute || k == plan::TaskKind::kMoeOffsets || k == plan::TaskKind::kMoeDispatch ||
         k == plan::TaskKind::kMoeCombine || k == plan::TaskKind::kMoeSwigluBackward;
}

// Host body of any MoE kind (CPU executor). `buffer(b, rank)` resolves buffer b of rank.
using MoeBufferLookup = void* (*)(const void* ctx, uint32_t buffer, uint32_t rank);
void moe_task_host(const plan::Task& t, MoeBufferLookup lookup, const void* ctx);

}  // namespace kosmos::kernels
