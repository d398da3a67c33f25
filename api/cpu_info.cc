// GetCpuInfo: what the CPU backend detected and chose (its Facts, kernels/backend.h), for
// `mixtrain info` and embedders.
#include "kernels/backend.h"
#include "mixtrain/mixtrain.h"

namespace mixtrain {
inline namespace v1 {

CpuInfo GetCpuInfo() {
  const Backend& cpu = CpuBackend();
  CpuInfo i;
  i.detected = FactOf(cpu, "detected");
  i.cap = FactOf(cpu, "cap");
  i.usable = FactOf(cpu, "usable");
  i.onednn_isa = FactOf(cpu, "onednn_isa");
  i.native_bf16 = cpu.target().caps.native_bf16;
  i.row_kernels = FactOf(cpu, "row_kernels");
  i.auto_dtype = i.native_bf16 ? "bf16" : "fp32";
  i.cap_error = FactOf(cpu, "cap_error");
  return i;
}

}  // namespace v1
}  // namespace mixtrain
