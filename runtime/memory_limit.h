// How much more memory this process may take before the OS refuses it or kills it: the address
// space limit (RLIMIT_AS, `ulimit -v`), the cgroup's memory.max (containers, systemd units) and
// the physical memory still available. A plan whose buffers exceed it is refused before
// anything is allocated (an out-of-memory kill, or a crash inside a library that does not check
// its allocations, is worse than an error naming the numbers).
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "absl/status/status.h"

namespace mixtrain {

struct MemoryHeadroom {
  size_t bytes = 0;    // the smallest of the limits below that apply
  std::string limit;   // which one, with its value ("ulimit -v (RLIMIT_AS) 97.7 MiB, 80.1 MiB in use")
};

// The headroom now; none when no limit is known (not Linux, nothing readable).
std::optional<MemoryHeadroom> CurrentMemoryHeadroom();

// OK when `bytes` more fit the headroom (with `reserve` more for what no plan counts: kernels'
// workspace, library code); else ResourceExhausted naming `what`, the bytes, the limit and
// `advice`.
absl::Status CheckFitsInMemory(size_t bytes, size_t reserve, const std::string& what, const std::string& advice);

}  // namespace mixtrain
