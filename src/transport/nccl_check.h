// KOSMOS_NCCL_CHECK: turns an ncclResult_t into a Status (code kNcclError) with the call text,
// NCCL's error string, NCCL's last error message for this thread, and file:line.
// Internal to src/transport (and its tests): it needs <nccl.h>.
#pragma once

#include <nccl.h>

#include "kosmos/status.h"

#define KOSMOS_NCCL_CHECK(call)                                                                  \
  do {                                                                                           \
    ncclResult_t kosmos_nccl_res_ = (call);                                                      \
    if (kosmos_nccl_res_ != ncclSuccess) {                                                       \
      const char* kosmos_nccl_last_ = ncclGetLastError(nullptr);                                 \
      return ::kosmos::Status(                                                                   \
          ::kosmos::StatusCode::kNcclError,                                                      \
          ::kosmos::detail::concat(#call, " failed: ", ncclGetErrorString(kosmos_nccl_res_),     \
                                   (kosmos_nccl_last_ && *kosmos_nccl_last_ ? " (" : ""),        \
                                   (kosmos_nccl_last_ ? kosmos_nccl_last_ : ""),                 \
                                   (kosmos_nccl_last_ && *kosmos_nccl_last_ ? ")" : ""), " [",   \
                                   ::kosmos::detail::breadcrumb(__FILE__, __LINE__), "]"));     \
    }                                                                                            \
  } while (0)
