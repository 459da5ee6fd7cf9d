// kosmos::Status, kosmos::Error and the checking macros used everywhere on the host.
//
// Public host API returns Status; only the CLI / binding edge throws Error. Every failed check
// leaves a "file:line" breadcrumb in the message so a user report points at the line.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace kosmos {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument,  // bad shape, dtype, alignment, rank, ...
  kInvalidPlan,      // plan validation failed (cycle, unreachable target, ...)
  kCudaError,
  kNcclError,
  kTimeout,          // watchdog expired on the device or a CPU worker
  kAborted,          // the host set the abort flag
  kUnavailable,      // no GPU, unsupported device, backend missing
  kInternal,
};

const char* to_string(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status ok() { return {}; }

  bool is_ok() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Thrown only at the CLI / binding edge (see throw_if_error).
class Error : public std::runtime_error {
 public:
  explicit Error(Status status) : std::runtime_error(status.to_string()), status_(std::move(status)) {}
  const Status& status() const { return status_; }

 private:
  Status status_;
};

inline void throw_if_error(const Status& s) {
  if (!s.is_ok()) throw Error(s);
}

namespace detail {
std::string breadcrumb(const char* file, int line);
template <class... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace kosmos

// KOSMOS_CHECK(cond, msg...): returns a Status from the enclosing function when cond is false.
#define KOSMOS_CHECK_CODE(cond, code, ...)                                                          \
  do {                                                                                              \
    if (!(cond)) {                                                                                  \
      return ::kosmos::Status((code), ::kosmos::detail::concat(__VA_ARGS__) + " [" +               \
                                          ::kosmos::detail::breadcrumb(__FILE__, __LINE__) + "]"); \
    }                                                                                               \
  } while (0)
#define KOSMOS_CHECK(cond, ...) KOSMOS_CHECK_CODE(cond, ::kosmos::StatusCode::kInvalidArgument, __VA_ARGS__)

// KOSMOS_RETURN_IF_ERROR(expr): propagates a failed Status.
#define KOSMOS_RETURN_IF_ERROR(expr)           \
  do {                                         \
    ::kosmos::Status kosmos_status_ = (expr);  \
    if (!kosmos_status_.is_ok()) return kosmos_status_; \
  } while (0)
