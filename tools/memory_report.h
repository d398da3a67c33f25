// The memory report `mixtrain train --profile`, `mixtrain bench --train --profile` and
// `mixtrain check --memory` print:
// where the training step's memory goes, planned and measured (public API only).
#pragma once

#include "mixtrain/mixtrain.h"

namespace mixtrain::cli {

// `measured`: also the process's resident set (not for `check`, whose process trains nothing).
void PrintMemoryReport(const MemoryStatistics& m, bool measured = true);

}  // namespace mixtrain::cli
