// See backend.h.
#include "kernels/backend.h"

namespace mixtrain {

const Backend& BackendFor(DeviceType type) { return type == DeviceType::kCUDA ? CudaBackend() : CpuBackend(); }

std::string FactOf(const Backend& b, const std::string& key) {
  for (const BackendFact& f : b.Facts())
    if (f.key == key) return f.value;
  return "";
}

}  // namespace mixtrain
