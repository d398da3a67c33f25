// See mixtrain/profile.h.
#include "mixtrain/profile.h"

#include "runtime/executor.h"

namespace mixtrain {
inline namespace v1 {

void SetHeapAllocationCounter(HeapAllocationCounter counter) { SetProfilerAllocationCounter(counter); }

}  // namespace v1
}  // namespace mixtrain
