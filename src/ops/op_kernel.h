#pragma once
#include "kosmos/runtime.h"
namespace kosmos::ops {
// Persistent kernel with GEMM tiles, reduce tiles and the built-in kinds (kOpKernelThreads threads).
inline constexpr int kOpKernelThreads = 384;
inline constexpr int kOpKernelWarps = kOpKernelThreads / 32;
const runtime::KernelVariant& op_kernel_variant();
}  // namespace kosmos::ops
