// What both MoE benchmarks (`kosmos bench moe`: virtual ranks on one GPU; `kosmos bench moe
// --transport nccl`: one process per GPU) share, so that at the same world they run the same layer
// on the same inputs: the model shapes, the host-generated routing, the hash-generated inputs (any
// rank's tensors can be regenerated anywhere), fp64 references of single tokens, and output checks.
// Implemented in moe_bench_common.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kosmos/moe.h"
#include "kosmos/status.h"

namespace kosmos::cli {

struct MoeModel {
  int64_t hidden, intermediate;
  int experts_per_rank;  // default E = experts_per_rank * world (DeepSeek: 32 local experts, as in issue 5's proxy)
  int fixed_experts;     // > 0: E regardless of the world (Qwen3-235B: 128)
};
extern const std::map<std::string, MoeModel> kMoeModels;

// The routing of every rank, generated on the host (same sequence for the same world and E).
struct MoeRouting {
  std::vector<std::vector<int32_t>> ids;  // per rank [T * k]
  std::vector<std::vector<float>> weights;
  std::vector<int64_t> rows_per_rank;  // rows each rank receives
};
// "uniform", "skewed" (half the experts empty, p ~ 1/(i+1) over the rest), or "balanced" (every
// expert T k / E entries, +-1: no partial last row block when 128 divides that); distinct experts per
// token when possible, weights in [0.05, 1).
MoeRouting make_moe_routing(int world, int64_t tokens, int experts, int top_k, const std::string& kind);

// The bench's inputs: element i of a rank's tensor is a hash of (i, seed) scaled into bf16, so any
// slice of any rank's tensor can be regenerated on any GPU (fill_moe_input with an element offset).
enum class MoeInput { kX, kGateUp, kDown, kDy };
uint64_t moe_input_seed(MoeInput what, int rank);
float moe_input_scale(MoeInput what, const MoeConfig& c);
// n bf16 values of `what` of `rank`, starting at element `offset` of that tensor, into p (device).
Status fill_moe_input(void* p, size_t n, MoeInput what, int rank, size_t offset, const MoeConfig& c, cudaStream_t s);
// Fills rank `rank`'s kX, kGateUp, kDown (and kDy with cfg.backward) in `layer`, and uploads its routing.
Status fill_moe_rank_inputs(const MoeLayer& layer, int rank, const MoeRouting& routing, cudaStream_t s);

// Where a reference reads its operands: token rows of the rank being checked, and expert e's
// (interleaved) gate_up [H, 2I] and down [I, H], as bf16 bits.
struct MoeRefSource {
  std::function<Status(MoeInput what, int64_t token, std::vector<uint16_t>* row)> token_row;  // kX or kDy
  std::function<Status(int expert, std::vector<uint16_t>* gate_up, std::vector<uint16_t>* down)> expert;
};
// Sources for rank `rank`: reading the layer's buffers (virtual ranks: every rank's memory is
// here), or regenerating the tensors on this GPU (one rank per process: peers' experts are not).
MoeRefSource moe_ref_from_layer(const MoeLayer& layer, int rank);
MoeRefSource moe_ref_regenerated(const MoeConfig& c, int rank);

// fp64 y of token t (ids / weights: the checked rank's routing).
Status moe_reference_token(const MoeConfig& c, const MoeRefSource& src, int64_t t, const std::vector<int32_t>& ids,
                           const std::vector<float>& w, std::vector<double>* y);
// fp64 dx and d_weights of token t.
Status moe_reference_token_backward(const MoeConfig& c, const MoeRefSource& src, int64_t t, const std::vector<int32_t>& ids,
                                    const std::vector<float>& w, std::vector<double>* dx, std::vector<double>* dw);

// Relative L2 error of tokens {0, T/2, T-1} of one rank's y (forward) or dx and d_weights
// (backward), host copies of the outputs, against the fp64 references.
Status moe_reference_error(const MoeConfig& c, const MoeRefSource& src, const std::vector<int32_t>& ids,
                           const std::vector<float>& w, const uint16_t* y, double* rel);
Status moe_reference_error_backward(const MoeConfig& c, const MoeRefSource& src, const std::vector<int32_t>& ids,
                                    const std::vector<float>& w, const uint16_t* dx, const float* dw, double* rel);

template <class T>
Status download(const void* src, size_t count, size_t offset, std::vector<T>* out) {
  out->resize(count);
  if (cudaMemcpy(out->data(), static_cast<const T*>(src) + offset, count * sizeof(T), cudaMemcpyDeviceToHost) != cudaSuccess)
    return Status(StatusCode::kCudaError, "download: cudaMemcpy failed");
  return Status::ok();
}

// Poison (0xFF bytes: bf16 NaN) on the stream the layer runs on. NOT cudaMemset: that runs on the
// legacy default stream, which a cudaStreamNonBlocking stream does not wait for, so the memset
// raced the fused kernel and overwrote most of d_gate_up after the kernel had stored it (the
// "non-finite backward output" of the second session).
void poison_on(cudaStream_t s, void* p, size_t bytes);

// "" when all n bf16 values are finite (outputs start from NaN poison, so this also says every
// element was written); else "<count> elements, first at row R col C (raw 0xXXXX)" for rows of
// `cols` values.
std::string non_finite_bf16(const uint16_t* v, size_t n, int64_t cols);

// Each GEMM label's useful FLOPs in `layer`'s plan of one direction, all ranks' rows
// (trace_breakdown's tensor column).
std::map<std::string, double> moe_gemm_label_flops(const MoeLayer& layer, bool backward);

// Where the time of `layer`'s runs went by task label (trace_breakdown; cfg.trace must have been set
// at planning, so every run records its trace): first the records the last timed runs left (the
// fused launch and each unfused launch, under the timing's alternation), then one more fused run on
// stream s, whose timeline goes as SVG to svg_path, and one more run of the unfused composition right
// after it. Every launch's records go as CSV to svg_path + ".csv" (trace_csv; launches 100+ = the
// timed runs', 0 = the extra fused run, 1.. = the extra unfused launches).
// all_ranks: the trace holds every rank's tasks (virtual ranks), so the GEMM labels' tensor column
// can be given (moe_gemm_label_flops counts all ranks' rows); false for one rank per process.
Status trace_moe_run(MoeLayer& layer, bool backward, const std::string& title, const std::string& svg_path, cudaStream_t s,
                     bool all_ranks = true);

// The layer's shape and routing, as every JSON of both MoE benchmarks names them.
void put_moe_shape(nlohmann::json& j, const std::string& model, const std::string& routing, const MoeConfig& c);

// The layer's GEMM FLOPs of one forward (all ranks).
double moe_forward_flops(const MoeConfig& c);
// The backward's: dX + dGateUp, dA' + dDown, plus the recomputed h1 unless the forward saved it.
double moe_backward_flops(const MoeConfig& c);

}  // namespace kosmos::cli
