// Host side of the built-in task kinds (nop, spin, copy, checksum): payload validation shared by
// both executors, and the CPU executor's implementations.
#pragma once

#include <cstdint>
#include <vector>

#include "kosmos/plan.h"
#include "kosmos/status.h"

namespace kosmos::kernels {

// Checks a built-in task's payload against the plan's buffers (ranges, ranks, alignment).
Status validate_builtin_task(const plan::Plan& plan, const plan::Task& task);

// Resolves (buffer, rank) -> host pointer for the CPU executor.
void spin_host(uint64_t ns);
void copy_host(const void* src, void* dst, uint64_t bytes);
uint64_t checksum_host(const void* src, uint64_t bytes);  // see plan::ChecksumArgs

}  // namespace kosmos::kernels
