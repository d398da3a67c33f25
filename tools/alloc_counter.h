// The CLI's heap-allocation counter (alloc_counter.cc wraps malloc for the whole process).
#pragma once

#include <cstdint>

namespace mixtrain::cli {

// Heap allocations (malloc, calloc, realloc, aligned variants, hence operator new) so far.
uint64_t HeapAllocations();
// False in sanitizer builds, where the sanitizer owns malloc and nothing is counted.
bool HeapAllocationsCounted();

}  // namespace mixtrain::cli
