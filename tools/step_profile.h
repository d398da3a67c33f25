// The training-step profile table `mixtrain train --profile` and `mixtrain bench --train
// --profile` print (public API only).
#pragma once

#include <cstdint>
#include <vector>

#include "mixtrain/mixtrain.h"

namespace mixtrain::cli {

// Time by phase, by (phase, op type) and the slowest nodes, per step over `steps` steps, with
// achieved GFLOP/s, GB/s and heap allocations (counted by alloc_counter.cc).
void PrintStepProfile(const std::vector<Trainer::NodeTime>& rows, int64_t steps);

}  // namespace mixtrain::cli
