// The op kernel's variant with the merged-tail GEMM tile (op_body.cuh), in a translation unit of
// its own so that it compiles in parallel with the plain variant (op_kernel.cu).
#include "ops/op_body.cuh"

namespace kosmos::ops::detail {

const runtime::KernelVariant& merged_op_kernel_variant() {
  // The large parameter blob only (one kernel less to compile; measured ~4 us more per launch
  // than the small blob on an H100).
  using Merged = OpBody<true>;
  static const runtime::KernelVariant m{"ops (merged tails)", reinterpret_cast<const void*>(&runtime::persistent_kernel<Merged>),
                                        Merged::kThreads, Merged::kSmemBytes, &op_supports, nullptr};
  return m;
}

}  // namespace kosmos::ops::detail
