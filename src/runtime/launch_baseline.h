#pragma once
#include "kosmos/status.h"
namespace kosmos::runtime {
// Median microseconds per empty kernel launch, `launches` back to back, over `reps` repetitions.
Status time_launch_per_task(int launches, int reps, double* us_per_launch);
}  // namespace kosmos::runtime
