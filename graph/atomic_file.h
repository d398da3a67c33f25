// Writing files so a reader never sees half of one: write a temp file in the same folder, then
// rename over the target (atomic on POSIX). On error the temp file is removed.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace mixtrain {

absl::Status WriteFileAtomically(const std::string& path, const std::string& contents);

}  // namespace mixtrain
