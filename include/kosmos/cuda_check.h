// KOSMOS_CUDA_CHECK: turns a cudaError_t into a Status with the call text and file:line.
#pragma once

#include <cuda_runtime_api.h>

#include "kosmos/status.h"

#define KOSMOS_CUDA_CHECK(call)                                                                 \
  do {                                                                                          \
    cudaError_t kosmos_err_ = (call);                                                           \
    if (kosmos_err_ != cudaSuccess) {                                                           \
      return ::kosmos::Status(::kosmos::StatusCode::kCudaError,                                 \
                              ::kosmos::detail::concat(#call, " failed: ",                      \
                                                       cudaGetErrorString(kosmos_err_), " [",  \
                                                       ::kosmos::detail::breadcrumb(__FILE__, __LINE__), "]")); \
    }                                                                                           \
  } while (0)
