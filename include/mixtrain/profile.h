// Profiling hooks shared by Trainer and InferenceSession profiles.
#pragma once

#include <cstdint>

namespace mixtrain {
inline namespace v1 {

// A function returning how many heap allocations the process has made so far. A program that
// counts them (the `mixtrain` CLI wraps malloc) registers it; profiled steps then report the
// allocations each kernel made (Trainer::NodeTime::allocations). Null (the default): not counted.
using HeapAllocationCounter = uint64_t (*)();
void SetHeapAllocationCounter(HeapAllocationCounter counter);

}  // namespace v1
}  // namespace mixtrain
