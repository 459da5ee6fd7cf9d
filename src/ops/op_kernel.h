#pragma once
#include "kosmos/runtime.h"
namespace kosmos::ops {
// Persistent kernel with GEMM tiles, reduce tiles and the built-in kinds (384 threads).
const runtime::KernelVariant& op_kernel_variant();
}  // namespace kosmos::ops
