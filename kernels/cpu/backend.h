// The CPU backend's Target for given capabilities (kernels/cpu/backend.cc): CpuBackend().target()
// is CpuTarget of what this CPU has; tests build the targets of other CPUs (AVX2 without the
// channel-blocked kernels) with it.
#pragma once

#include "kernels/backend.h"

namespace mixtrain {

Target CpuTarget(const TargetCapabilities& caps);

}  // namespace mixtrain
