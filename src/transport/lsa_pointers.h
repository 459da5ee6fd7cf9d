// Reads the LSA peer pointers of one NCCL symmetric window (NCCL 2.28.9 computes them only on the
// device: ncclGetLsaPointer is an inline device function over the window's device-side struct).
#pragma once

#include <cuda_runtime_api.h>

#include <vector>

#include "kosmos/status.h"

namespace kosmos::transport::detail {

// out->at(p) = ncclGetLsaPointer(window, 0, p) for p in [0, lsa_size), and *self_alias =
// ncclGetLocalPointer(window, 0). `window` is an ncclWindow_t; runs one tiny kernel on the current
// device and synchronizes `stream`.
Status read_lsa_pointers(void* window, int lsa_size, cudaStream_t stream, std::vector<void*>* out,
                         void** self_alias);

}  // namespace kosmos::transport::detail
