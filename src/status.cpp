#include "kosmos/status.h"

#include <cstring>

namespace kosmos {

const char* to_string(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kInvalidPlan: return "invalid plan";
    case StatusCode::kCudaError: return "CUDA error";
    case StatusCode::kNcclError: return "NCCL error";
    case StatusCode::kTimeout: return "timeout";
    case StatusCode::kAborted: return "aborted";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kInternal: return "internal error";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (is_ok()) return "ok";
  return std::string(kosmos::to_string(code_)) + ": " + message_;
}

namespace detail {
std::string breadcrumb(const char* file, int line) {
  const char* slash = std::strrchr(file, '/');
  return std::string(slash ? slash + 1 : file) + ":" + std::to_string(line);
}
}  // namespace detail

}  // namespace kosmos
