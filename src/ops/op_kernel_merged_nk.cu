// The op kernel's variant with the merged-tail GEMM tile for B [N, K] (the MoE backward's dA' and
// dX), in a translation unit of its own so that it compiles in parallel with the others (op_kernel.cu).
#include "ops/op_body.cuh"

namespace kosmos::ops::detail {

const runtime::KernelVariant& merged_nk_op_kernel_variant() {
  return merging_variant<kernels::gemm::GemmMergeVariant::kBNK>("ops (merged tails, B [N, K])");
}

}  // namespace kosmos::ops::detail
