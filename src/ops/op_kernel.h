#pragma once
#include "kernels/gemm/gemm_params.h"
#include "kosmos/runtime.h"
namespace kosmos::ops {
// Persistent kernel with GEMM tiles, reduce tiles and the built-in kinds (kOpKernelThreads threads).
inline constexpr int kOpKernelThreads = 384;
inline constexpr int kOpKernelWarps = kOpKernelThreads / 32;
// merge: the variant that can run GEMM problems with kGemmMergeTails of that B layout (a merged-tail
// tile costs every task type a few spilled registers, so plans without such problems take the plain
// variant, and a kernel holds one merged-tail tile only).
const runtime::KernelVariant& op_kernel_variant(
    kernels::gemm::GemmMergeVariant merge = kernels::gemm::GemmMergeVariant::kNone);
}  // namespace kosmos::ops
