// The op kernel's plain variant (op_body.cuh: the task body) and the choice between the variants.
// The merging variant lives in op_kernel_merged.cu: the two kernels are most of this library's compile
// time, and in two translation units they build in parallel.
#include "ops/op_body.cuh"

namespace kosmos::ops {

const runtime::KernelVariant& op_kernel_variant(bool merged_tails) {
  if (merged_tails) return detail::merged_op_kernel_variant();
  using Plain = detail::OpBody<false>;
  static const runtime::KernelVariant v{
      "ops", reinterpret_cast<const void*>(&runtime::persistent_kernel<Plain>), Plain::kThreads, Plain::kSmemBytes,
      &detail::op_supports,
      reinterpret_cast<const void*>(&runtime::persistent_kernel<Plain, runtime::kSmallBodyParamBytes>)};
  return v;
}

}  // namespace kosmos::ops

#ifdef KOSMOS_GEMM_PROBE
// Diagnostic build of this translation unit (gemm_probe; the plain variant only): host access to
// its own probe marks.
namespace kosmos::ops::probe_access {
cudaError_t reset() {
  static int zero[kernels::gemm::probe::kMaxCtas][2];
  return cudaMemcpyToSymbol(kernels::gemm::probe::g_seq, zero, sizeof(zero));
}
cudaError_t read(void* marks, void* seq, void* kernel_ns) {
  cudaError_t e = cudaMemcpyFromSymbol(marks, kernels::gemm::probe::g_marks, sizeof(kernels::gemm::probe::g_marks));
  if (e == cudaSuccess) e = cudaMemcpyFromSymbol(seq, kernels::gemm::probe::g_seq, sizeof(kernels::gemm::probe::g_seq));
  if (e == cudaSuccess)
    e = cudaMemcpyFromSymbol(kernel_ns, kernels::gemm::probe::g_kernel_ns, sizeof(kernels::gemm::probe::g_kernel_ns));
  return e;
}
}  // namespace kosmos::ops::probe_access
#endif
