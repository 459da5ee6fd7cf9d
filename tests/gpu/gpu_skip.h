// GPU tests skip, saying so, when no Hopper (sm_90) GPU is visible; they never pass vacuously.
#pragma once

#include <gtest/gtest.h>

#include "kosmos/runtime.h"

#define SKIP_WITHOUT_GPU()                                                                              \
  do {                                                                                                  \
    auto kosmos_info_ = ::kosmos::runtime::query_device(0);                                             \
    if (!kosmos_info_.available || kosmos_info_.cc_major != 9)                                          \
      GTEST_SKIP() << "no Hopper (sm_90) GPU visible: "                                                 \
                   << (kosmos_info_.available ? kosmos_info_.name : kosmos_info_.error);                \
  } while (0)
