#pragma once
#include "kosmos/runtime.h"
namespace kosmos::ops {
// Persistent kernel with GEMM tiles, reduce tiles and the built-in kinds (kOpKernelThreads threads).
inline constexpr int kOpKernelThreads = 384;
inline constexpr int kOpKernelWarps = kOpKernelThreads / 32;
// merged_tails: the variant that can run GEMM problems with kGemmMergeTails (it costs every task
// type a few spilled registers, so plans without such problems take the other).
const runtime::KernelVariant& op_kernel_variant(bool merged_tails = false);
}  // namespace kosmos::ops
