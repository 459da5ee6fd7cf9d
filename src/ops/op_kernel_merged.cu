// The op kernel's variant with the merged-tail GEMM tile for B [K, N] (the MoE forward's GEMMs), in
// a translation unit of its own so that it compiles in parallel with the others (op_kernel.cu).
#include "ops/op_body.cuh"

namespace kosmos::ops::detail {

const runtime::KernelVariant& merged_op_kernel_variant() {
  return merging_variant<kernels::gemm::GemmMergeVariant::kBKN>("ops (merged tails)");
}

}  // namespace kosmos::ops::detail
