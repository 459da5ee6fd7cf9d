// GPU tests skip, saying so, when no Hopper (sm_90) GPU is visible; they never pass vacuously.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "kosmos/runtime.h"

#define SKIP_WITHOUT_GPU()                                                                              \
  do {                                                                                                  \
    auto kosmos_info_ = ::kosmos::runtime::query_device(0);                                             \
    if (!kosmos_info_.available || kosmos_info_.cc_major != 9)                                          \
      GTEST_SKIP() << "no Hopper (sm_90) GPU visible: "                                                 \
                   << (kosmos_info_.available ? kosmos_info_.name : kosmos_info_.error);                \
  } while (0)

namespace kosmos::test {
// Sets an environment variable for the scope (the GPU executor reads KOSMOS_* at creation).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) ::setenv(name_, old_.c_str(), 1);
    else ::unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};
}  // namespace kosmos::test
